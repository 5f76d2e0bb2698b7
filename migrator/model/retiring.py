"""Recorded steps that no longer describe the cluster (pure): retired (kept for the record, no
longer verified or rolled back) rather than undone as drift."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.discovery import collected
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PlanContext
from migrator.model.steps import CreateAlias, DeleteAlias, SetSelector, Step

GONE = "gone"  # the object no longer exists
REVERTED = "reverted"  # the operator re-rendered an operator-owned Service
REPLACED = "replaced"  # an alias's name is another owner's now (or a ClusterPolicy shares it)
HANDED_OVER = "handed-over"  # an operator release's own reconciler manages the object now


def retired(ctx: PlanContext, step: Step) -> tuple[str, str] | None:
    """(record status, reason) if this recorded step no longer describes the cluster."""
    live = (ctx.snapshot.daemonsets.get(step.name) if step.kind == kinds.DAEMONSET
            else ctx.service(step.name))
    owner = collected(ctx.snapshot, live) if live is not None else None
    if live is None and isinstance(step, CreateAlias) and ctx.service(step.source):
        return None  # phase 2 re-creates it
    if live is None or owner:
        why = (f"is being garbage-collected: its {owner} was deleted" if owner else
               "no longer exists: deleted, or its stack was removed")
        return GONE, (f"{step.object} {why}; its recorded step is retired, nothing is left to "
                      "verify or roll back")
    if handed := _handed_over(ctx, step, live):
        return HANDED_OVER, handed
    source = _alias_source(ctx, step)
    if source is not None and ctx.service(source) is None and not ctx.is_tool_owned(live):
        holder = ctx.operator_owner(live) or "another owner"
        return REPLACED, (f"{step.object} was the tool's alias of {source}, which no longer "
                          f"exists (its stack was removed), and the name is {holder}'s now: "
                          "its recorded step is retired and the Service is left alone")
    renderer = o.rendered_by(live)
    if source is not None and not ctx.is_tool_owned(live) and renderer:
        return REPLACED, (f"{step.object} was the tool's alias of {source}; {renderer}'s "
                          "operator renders the name now (both stacks run here), and the pods "
                          f"of {source} join it through the EndpointSlices `dcgm-migrate guard` "
                          "keeps: handed over, its recorded step is retired and the Service is "
                          "left alone")
    if (isinstance(step, SetSelector) and step.operator_owned and not step.satisfied(live)
            and not ctx.options.include_operator_owned):
        owner = ctx.operator_owner(live) or "its operator"
        return REVERTED, (f"{step.object}: {owner} reverted the selector switch made with "
                          "--include-operator-owned; recorded as reverted by the operator "
                          "(run apply with --include-operator-owned to switch it again)")
    return None


def _handed_over(ctx: PlanContext, step: Step, live: Mapping[str, Any]) -> str | None:
    """Why this step's object is an operator release's now (`plans/releases.yaml`): a Service
    it manages, or a DaemonSet whose template it renders while it manages the stable name."""
    if isinstance(step, CreateAlias | SetSelector | DeleteAlias):
        release = ctx.catalog.managed_by_release(live)
        if release is None:
            return None
        return (f"{step.object} is managed by the GPU Operator itself now (release "
                f"{release.name}: {release.shared_label.key}={release.shared_label.value}): "
                "handed over — the tool never writes it again, verifies it like any "
                "operator Service and leaves it alone on rollback")
    daemonset = step.name if step.kind == kinds.DAEMONSET else None
    comp = next((c for c in ctx.catalog.components if c.daemonset == daemonset), None)
    if comp is None or o.template_labels(live).get(comp.common_label.key):
        return None
    found = ctx.catalog.release_label(comp, ctx.snapshot.services)
    if found is None or o.template_labels(live).get(found[1].key) != found[1].value:
        return None
    release, wanted = found
    return (f"{step.object} is rendered by GPU Operator release {release.name} with "
            f"{wanted.key}={wanted.value}, which Service/{comp.alias or comp.service} selects "
            "now; the tool's common label is no longer needed: handed over, nothing to verify or "
            "roll back")


def _alias_source(ctx: PlanContext, step: Step) -> str | None:
    """The source Service of the tool's alias this step created or switched, if it is one."""
    if isinstance(step, CreateAlias):
        return step.source
    if isinstance(step, SetSelector) and not step.operator_owned:
        return next((c.service for c in ctx.catalog.components if c.alias == step.service), None)
    return None


def reasked(reverted: Sequence[Step], options: Options) -> list[GateResult]:
    """With --include-operator-owned, each switch the operator reverted fails a gate: re-run."""
    if not options.include_operator_owned:
        return []
    return [GateResult(f"selector-holds/{s.service}", False, f"{s.object} was reverted by its "
                       "operator; --include-operator-owned switches it again")
            for s in reverted if isinstance(s, SetSelector)]
