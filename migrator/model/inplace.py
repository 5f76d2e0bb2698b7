"""Phase 1's two paths for a DaemonSet (docs/runbook.md, phase 1): in place — hold it on
`OnDelete`, relabel its template, relabel its pods (engine/inplace.py), restore its strategy:
no pod restarted — or rolling, the template change rolled by the controller within
maxUnavailable. Pure: which path, why, and what each costs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.planning import PlanContext
from migrator.model.steps import HoldStrategy, RelabelPods, RestoreStrategy, SetLabels, Step
from migrator.model.wording import counted

HASH_LABEL = "controller-revision-hash"


def rolling_because(ctx: PlanContext, ds: Mapping[str, Any]) -> str | None:
    """Why this DaemonSet's pods must roll rather than be relabelled in place (None: in
    place). In place needs every pod on the current revision: the rollout complete by the
    status's counts, and one `controller-revision-hash` on every pod (engine/inplace.py
    proves the rest from the ControllerRevisions before it patches a pod)."""
    if o.held_strategy(ds) is not None:
        return None  # the tool's own hold: a run killed in place finishes in place
    if ctx.options.rolling:
        return "--rolling"
    if o.update_strategy(ds) != "RollingUpdate":
        return f"updateStrategy {o.update_strategy(ds)}"
    hashes = {p.labels.get(HASH_LABEL) for p in ctx.snapshot.pods_of(o.name(ds))
              if not p.deleting}
    if not g.rollout_complete(dict(ds)).ok or len(hashes) > 1 or None in hashes:
        return "pods on an older revision (a template change is still rolling out)"
    return None


def in_place_steps(ctx: PlanContext, ds: Mapping[str, Any], step: SetLabels,
                    write_labels: bool) -> list[Step]:
    """Hold on OnDelete, relabel the template, relabel the pods, restore the strategy."""
    name = o.name(ds)
    strategy = o.held_strategy(ds) or dict(o.dig(ds, "spec", "updateStrategy")
                                         or {"type": "RollingUpdate"})
    rendered = o.annotations_of(ds).get(ctx.catalog.common.operator_hash_annotation)
    return [HoldStrategy(name, strategy), *([replace(step, in_place=True)] if write_labels
                                            else []),
            RelabelPods(name, tuple(step.template_after), rendered),
            RestoreStrategy(name, strategy)]


# Seconds the in-place path takes per pod: its patch, 10 in flight (engine/inplace.py), and
# the reads around it — 10,000 pods in 35 simulated (48 real) seconds for the whole
# `apply --phase 3` at 5,000 nodes (docs/performance.md, "Phase 1: in place or rolling");
# a floor of a few seconds for the hold, the revision and the restore.
IN_PLACE_SECONDS_PER_POD = 0.005
IN_PLACE_FLOOR_SECONDS = 2


def cost(ds: Mapping[str, Any], pods: int, rolling: str | None) -> str:
    """What a path costs and why it is taken: pods restarted and the time a rollout takes
    (pods x the slowest container's readiness delay / maxUnavailable), or no restart and a
    pod patch each in place."""
    if rolling is None:
        seconds = IN_PLACE_FLOOR_SECONDS + pods * IN_PLACE_SECONDS_PER_POD
        return (f"in place: 0 of {counted(pods, 'pod')} restarted, "
                f"{counted(pods, 'pod patch', 'pod patches')}, about "
                f"{seconds:.0f} s (every pod runs the current revision and only template "
                "labels change)")
    probes = [c.get("readinessProbe") or {} for c in
              o.dig(ds, "spec", "template", "spec", "containers") or []]
    delay = max((int(p.get("initialDelaySeconds") or 0) + int(p.get("periodSeconds") or 10)
                 for p in probes), default=10)
    budget = max(1, o.max_unavailable(dict(ds), pods))
    minutes = pods * delay / budget / 60
    return (f"rolling ({rolling}): {counted(pods, 'pod')} restarted, about {minutes:.0f} min "
            f"({pods} x {delay}s readiness / maxUnavailable {budget})")
