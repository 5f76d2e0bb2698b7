"""Phase 2 — alias: the established DNS names for the GPUCluster/DRA stack, as tool-owned Services
selecting the DRA app label at first; a Service of that name not the tool's is never touched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import aliasing, monitoring, scrapechecks
from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.discovery import collected
from migrator.model.findings import Remedy
from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.steps import CreateAlias, DeleteAlias, Step
from migrator.phases.common import Draft

NUMBER = 2
NAME = "alias"
SWITCHES_SELECTORS = False
ANSWERS_FOR = frozenset({Remedy.ALIASES})  # the stable names and their scrape paths


def _duplicate_gate(ctx: PlanContext, what_if: Snapshot) -> GateResult:
    exporters = [c.daemonset for c in ctx.components if c.exporter]
    return scrapechecks.duplicate_gate(what_if, exporters, before=ctx.snapshot)


def _taken_by(ctx: PlanContext, alias: str, source: str) -> str | None:
    """Why an existing Service of the alias name must not be touched, or None if it is ours."""
    live = ctx.service(alias)
    if live is None or (ctx.is_tool_owned(live) and o.annotations_of(live).get(
            ctx.catalog.common.alias_of_annotation) == source):
        return None
    return (f"Service/{alias} already exists and is not the tool's "
            f"({ctx.operator_owner(live) or 'no dcgm-migrate marker'}); it is never "
            "overwritten or adopted — with ClusterPolicy and GPUCluster coexisting, shared "
            "ownership of the stable names belongs to the operator")


def shared_with(ctx: PlanContext, alias: str) -> str | None:
    """`ClusterPolicy/<name>` when its operator renders the alias name for its own pods: shared,
    not taken (the GPUCluster pods join it through the guard's EndpointSlices, model/sharing.py)."""
    live = ctx.service(alias)
    if live is None or collected(ctx.snapshot, live) or o.terminating(live):
        return None
    return o.rendered_by(live)


def _shared_detail(alias: str, owner: str, source: str) -> str:
    return (f"shared: Service/{alias} belongs to {owner}, which renders it for its own pods; "
            f"the pods of Service/{source} join it through EndpointSlices that `dcgm-migrate "
            "guard` keeps (the operator's Service is never written)")


def _leaving(ctx: PlanContext, live: Mapping[str, Any]) -> str | None:
    """Why a Service holding an alias name is about to go away by itself (its operator CR was
    deleted: a ClusterPolicy → GPUCluster change), or None if it stays."""
    owner = collected(ctx.snapshot, live)
    return None if owner is None else (f"Service/{o.name(live)} belongs to {owner}, which is "
                                       "deleted: garbage collection removes it, and the alias is "
                                       "created as soon as it is gone")


def _name_gate(ctx: PlanContext, alias: str, source: str) -> GateResult:
    """alias-name-free: free, already the tool's, or about to be freed (the runner waits)."""
    taken, live = _taken_by(ctx, alias, source), ctx.service(alias)
    leaving = _leaving(ctx, live) if taken and live is not None else None
    return GateResult(f"alias-name-free/{alias}", taken is None,
                      leaving or taken or "free or already the tool's", wait=bool(leaving))


def _terminating(ctx: PlanContext, alias: str) -> list[GateResult]:
    """alias-not-terminating: the alias cannot be created (again) while the old one goes."""
    why = o.terminating(ctx.service(alias))
    return [] if why is None else [GateResult(
        f"alias-not-terminating/{alias}", False,
        f"Service/{alias} is being deleted ({why}); it cannot be created again until it is "
        f"gone: wait for its finalizers, or remove them if nothing needs them (`kubectl -n "
        f"{ctx.snapshot.namespace} patch service {alias} --type=merge -p "
        "'{\"metadata\":{\"finalizers\":null}}'`), then run again")]


def plan(ctx: PlanContext) -> PhasePlan:
    draft = Draft(NUMBER, NAME)
    blocked = None
    cr = aliasing.owner_of(ctx.snapshot.gpu_clusters)
    comps = [c for c in ctx.components if c.alias and c.daemonset in ctx.snapshot.daemonsets]
    if not comps:
        draft.notes.append("no GPUCluster (DRA) components: the legacy stack keeps its names and "
                           "gets no aliases; phase 2 completes with no writes")
    what_if = ctx.snapshot
    for comp in comps:
        assert comp.alias
        release = ctx.catalog.managed_by_release(ctx.service(comp.alias))
        source = ctx.service(comp.service)
        owner = shared_with(ctx, comp.alias) if release is None and source is not None else None
        detail = (f"handed over: Service/{comp.alias} is managed by the GPU Operator itself "
                  f"(release {release.name}); the tool never writes it again" if release else
                  _shared_detail(comp.alias, owner, comp.service) if owner else None)
        if detail:
            draft.gates.append(GateResult(f"alias-name-free/{comp.alias}", True, detail))
            draft.notes.append(detail)
            continue
        if source is None:
            draft.notes.append(f"Service/{comp.service} does not exist: no alias {comp.alias}")
            continue
        free = _name_gate(ctx, comp.alias, comp.service)
        failed = draft.gate([free, *(_terminating(ctx, comp.alias) if free.ok else [])])
        if failed:
            blocked = blocked or failed[0]
            continue
        step = CreateAlias(comp.alias, comp.service, aliasing.alias_body(
            ctx.snapshot.namespace, ctx.catalog.common, comp, source, cr))
        if step.satisfied(ctx.service(comp.alias)):
            draft.notes.append(f"Service/{comp.alias} already exists as the tool's alias")
            draft.checks.append(step)
            continue
        draft.steps.append(step)
        what_if = monitoring.with_service(what_if, step.body)
    if draft.steps:
        draft.gates.append(_duplicate_gate(ctx, what_if))
    draft.guarded += [g.baseline(ctx.snapshot, c.service, c.local_traffic) for c in comps
                      if ctx.service(c.service)]
    return draft.plan(blocked=blocked)


def before_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    if isinstance(step, CreateAlias):
        free = _name_gate(ctx, step.service, step.source)
        return [free, *([] if free.wait else _terminating(ctx, step.service)),
                _duplicate_gate(ctx, monitoring.with_service(ctx.snapshot, step.body))]
    if isinstance(step, DeleteAlias) and _taken_by(ctx, step.service, step.source):
        return [GateResult(f"alias-still-ours/{step.service}", False,
                           f"Service/{step.service} is no longer the tool's; not deleting")]
    return []


def after_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    """The alias's EndpointSlices hold exactly the source's ready pods."""
    if not isinstance(step, CreateAlias):
        return []
    source_pods = ctx.snapshot.endpoints_of(step.source).ready_pods()
    return [g.endpoints_are(ctx.snapshot, step.service, source_pods)]


def verify(ctx: PlanContext, steps: Sequence[Step]) -> list[GateResult]:
    return [GateResult(f"alias-holds/{s.service}", *_holds(ctx, s))
            for s in steps if isinstance(s, CreateAlias)] + stable_names(ctx)


def _holds(ctx: PlanContext, step: CreateAlias) -> tuple[bool, str]:
    """Does the alias this step created still stand, and why (alias-holds)."""
    live = ctx.service(step.service)
    owner = shared_with(ctx, step.service)
    if live is None:
        return False, (f"Service/{step.service} was deleted (by hand, or by garbage collection "
                       "after its GPUCluster was deleted)")
    if owner:
        return True, "handed over: " + _shared_detail(step.service, owner,
                                                      step.source).removeprefix("shared: ")
    if _taken_by(ctx, step.service, step.source):
        return False, f"Service/{step.service} was replaced by an object that is not the tool's"
    if o.terminating(live):
        return False, f"Service/{step.service} is being deleted ({o.terminating(live)})"
    # against what phase 2 renders from its source *now* (as the guard re-syncs it), not the
    # recorded body: a CR edit of the source is drift until the alias follows it
    source = ctx.service(step.source)
    comp = next((c for c in ctx.catalog.components
                 if c.alias == step.service and c.service == step.source), None)
    if source is None or comp is None:
        return True, f"alias of {step.source} (no source to compare with)"
    diff = aliasing.differences(live, aliasing.alias_body(
        ctx.snapshot.namespace, ctx.catalog.common, comp, source, None))
    if diff:
        return False, (f"differs from its source {step.source} in {aliasing.describe(diff)}; "
                       "`dcgm-migrate guard` re-syncs it")
    return True, f"alias of {step.source}, matching it"


def stable_names(ctx: PlanContext) -> list[GateResult]:
    """Every stable name the stack running *now* needs exists and selects ready pods, whatever the
    state recorded (after a stack change it describes the old stack)."""
    out = []
    seen = set()
    for comp in ctx.components:
        stable = comp.alias or comp.service
        if stable in seen or ctx.service(comp.service) is None:
            continue  # no source Service: nothing to alias (plan notes it), nothing to check
        seen.add(stable)
        result = g.serves(ctx.snapshot, stable, ctx.daemonsets_with_label(
            comp.common_label.key), gate="stable-name")
        live = ctx.service(stable)
        leaving = _leaving(ctx, live) if live is not None else None
        if leaving and comp.alias:
            result = GateResult(result.name, False, f"{leaving}; `apply` waits for that and "
                                "creates it (the verdict's stable-name fix names the command)")
        elif live is None and comp.alias:
            result = GateResult(result.name, False, f"Service/{stable} does not exist: the "
                                f"{comp.stack} stack needs it as the alias of {comp.service}; "
                                "`apply` creates it again (the verdict's stable-name fix names "
                                "the command that restores every completed phase)")
        out.append(result)
    return out


def rollback(ctx: PlanContext, steps: Sequence[Step]) -> PhasePlan:
    draft = Draft(NUMBER, NAME)
    for step in reversed(steps):
        if not isinstance(step, CreateAlias) or (live := ctx.service(step.service)) is None:
            continue
        if _taken_by(ctx, step.service, step.source):
            owner = ctx.operator_owner(live) or "without the dcgm-migrate marker"
            draft.warnings.append(f"Service/{step.service} is no longer the tool's alias (now "
                                  f"{owner}); left in place, skipped")
        elif o.terminating(live):
            draft.notes.append(f"Service/{step.service} is already being deleted "
                               f"({o.terminating(live)}); it goes once those finalizers are "
                               "removed")
        else:
            draft.steps.append(step.inverse())
    return draft.plan()
