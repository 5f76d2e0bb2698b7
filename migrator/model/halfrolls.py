"""Phase 1's two paths for a DaemonSet, in place or rolling (which, why, at what cost), and OnDelete
DaemonSets left half-rolled: what `--roll-on-delete` finishes and what a fix line says."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.planning import PlanContext
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.steps import HoldStrategy, RelabelPods, RestoreStrategy, SetLabels, Step
from migrator.model.wording import counted

HASH_LABEL = "controller-revision-hash"
# The deprecated labels the DaemonSet controller still writes: a pod of another template
# generation runs an older template (the controller itself counts a pod updated by its hash
# alone, `daemon/util.IsPodUpdated`, whose generation test compares with a pointer's text).
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
POD_GENERATION = "pod-template-generation"
# Seconds the in-place path takes per pod (patch, 10 in flight, reads), over a floor for the hold,
# revision and restore (docs/performance.md, "Phase 1: in place or rolling").
IN_PLACE_SECONDS_PER_POD = 0.005
IN_PLACE_FLOOR_SECONDS = 2


def rolling_because(ctx: PlanContext, ds: Mapping[str, Any]) -> str | None:
    """Why this DaemonSet's pods must roll rather than be relabelled in place (None: in place,
    which needs every pod on the current revision: the current spec observed, one
    `controller-revision-hash` on all live pods, and as many counted updated as there are pods
    on nodes that should run one). A pod that is not Ready, a node that has none yet, or a pod
    left on a deleted node (which the controller counts nowhere) decides nothing here: the
    phase's health gate names what is short, whichever path."""
    if o.held_strategy(ds) is not None:
        return None  # the tool's own hold: a run killed in place finishes in place
    if ctx.options.rolling:
        return "--rolling"
    if o.update_strategy(ds) != "RollingUpdate":
        return f"updateStrategy {o.update_strategy(ds)}"
    live = [p for p in ctx.snapshot.pods_of(o.name(ds)) if not p.deleting]
    hashes = {p.labels.get(HASH_LABEL) for p in live}
    updated, _, desired = g.rollout_counts(dict(ds))
    if not o.observed(ds) or updated < min(desired, len(live)) or len(hashes) > 1 \
            or None in hashes:
        return "pods on an older revision (a template change is still rolling out)"
    return None


def in_place_steps(ctx: PlanContext, ds: Mapping[str, Any], step: SetLabels) -> list[Step]:
    """Hold on OnDelete, relabel the template (unless done), relabel the pods, restore."""
    name = o.name(ds)
    strategy = o.held_strategy(ds) or dict(o.dig(ds, "spec", "updateStrategy")
                                         or {"type": "RollingUpdate"})
    rendered = o.annotations_of(ds).get(ctx.catalog.common.operator_hash_annotation)
    labels: list[Step] = [] if step.satisfied(dict(ds)) else [replace(step, in_place=True)]
    return [HoldStrategy(name, strategy), *labels,
            RelabelPods(name, tuple(step.template_after), rendered),
            RestoreStrategy(name, strategy)]


def cost(ds: Mapping[str, Any], pods: int, rolling: str | None) -> str:
    """What a path costs: pods restarted and the time a rollout takes (pods x the slowest
    container's readiness delay / maxUnavailable), or no restart and a patch a pod in place."""
    if rolling is None:
        seconds = IN_PLACE_FLOOR_SECONDS + pods * IN_PLACE_SECONDS_PER_POD
        return (f"in place: 0 of {counted(pods, 'pod')} restarted, "
                f"{counted(pods, 'pod patch', 'pod patches')}, about "
                f"{seconds:.0f} s (every pod runs the current revision and only template "
                "labels change)")
    probes = [c.get("readinessProbe") or {} for c in o.template_containers(ds)[0]]
    delay = max((int(p.get("initialDelaySeconds") or 0) + int(p.get("periodSeconds") or 10)
                 for p in probes), default=10)
    budget = max(1, o.max_unavailable(dict(ds), pods))
    minutes = pods * delay / budget / 60
    return (f"rolling ({rolling}): {counted(pods, 'pod')} restarted, about {minutes:.0f} min "
            f"({pods} x {delay}s readiness / maxUnavailable {budget})")


def on_delete(ds: Mapping[str, Any]) -> bool:
    return o.update_strategy(ds) == "OnDelete"


def stale_pods(snapshot: Snapshot, ds: Mapping[str, Any],
               keys: Iterable[str]) -> list[PodView]:
    """The live pods of an OnDelete DaemonSet to delete, by node: labels `keys` differing from the
    template's, or (while pods are counted not updated) another template generation."""
    want = {k: o.template_labels(ds).get(k) for k in keys}
    generation = o.annotations_of(ds).get(TEMPLATE_GENERATION)
    updated, _, desired = g.rollout_counts(dict(ds))
    old_generation = updated < desired and generation is not None
    return sorted((p for p in snapshot.pods_of(o.name(ds)) if not p.deleting and (
        any(p.labels.get(k) != v for k, v in want.items())
        or (old_generation and p.labels.get(POD_GENERATION) != generation))),
        key=lambda p: p.node)


def health_gate(ctx: PlanContext, ds: Mapping[str, Any]) -> GateResult:
    """`rollout-complete` before phase 1 writes; an OnDelete DaemonSet the tool rolls itself
    (`--roll-on-delete`) only needs every pod available: its `RollPods` finishes the rest."""
    result = g.daemonset_healthy(ctx.snapshot, dict(ds))
    if result.ok or not (ctx.options.roll_on_delete and on_delete(ds)):
        return result
    updated, available, desired = g.rollout_counts(dict(ds))
    if available < desired or not o.observed(ds):
        return result
    return GateResult(result.name, True, f"updated {updated}/{desired}, available "
                      f"{available}/{desired}: OnDelete, the tool rolls the older pods itself "
                      "(--roll-on-delete)")


def rollout_fix(snapshot: Snapshot, ds: Mapping[str, Any]) -> str:
    """The fix for an OnDelete DaemonSet whose rollout is not complete: the first pod of an
    older template to delete, and how to list the rest."""
    name, ns = o.name(ds), snapshot.namespace
    generation = o.annotations_of(ds).get(TEMPLATE_GENERATION)
    old = [p for p in snapshot.pods_of(name) if not p.deleting
           and generation is not None and p.labels.get(POD_GENERATION) != generation]
    first = (f"delete `kubectl -n {ns} delete pod {old[0].name}` (on {old[0].node}) first, "
             if old else "delete them ")
    return (f"updateStrategy OnDelete replaces a pod only when it is deleted: {first}then the "
            f"others one node at a time, each after the last one's replacement is Ready "
            f"(`kubectl -n {ns} get pods -l app={name} -L {POD_GENERATION}` lists them; the "
            f"template is generation {generation}); after dcgm-migrate's own apply or rollback "
            "of phase 1, rerunning it with --roll-on-delete does this")
