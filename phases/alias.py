"""Phase 2 — alias: the established DNS names (`nvidia-dcgm`, `nvidia-dcgm-exporter`) for the
GPUCluster/DRA stack, as tool-owned Services that select the DRA app label at first. The legacy
stack gets nothing. A Service of an alias name that the tool does not own is never touched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import aliasing, monitoring, scrapechecks, sharing
from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.discovery import collected
from migrator.model.findings import Remedy
from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.stacks import Component
from migrator.model.steps import CreateAlias, DeleteAlias, Step

# What an alias copies (the table-driven test reads them here).
COPIED_SPEC_FIELDS = aliasing.COPIED_SPEC_FIELDS
NEVER_COPIED_SPEC_FIELDS = aliasing.NEVER_COPIED_SPEC_FIELDS
COPIED_PORT_FIELDS = aliasing.COPIED_PORT_FIELDS

NUMBER = 2
NAME = "alias"
SWITCHES_SELECTORS = False
ANSWERS_FOR = frozenset({Remedy.ALIASES})  # the stable names and their scrape paths

def alias_body(ctx: PlanContext, comp: Component, source: Mapping[str, Any],
               owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The alias of `source` in this namespace (`model/aliasing.py`)."""
    return aliasing.alias_body(ctx.snapshot.namespace, ctx.catalog.common, comp, source, owner)


def _candidates(ctx: PlanContext) -> list[Component]:
    return [c for c in ctx.components if c.alias and c.daemonset in ctx.snapshot.daemonsets]


def _exporter_daemonsets(ctx: PlanContext) -> list[str]:
    return [c.daemonset for c in ctx.components if c.exporter]


def _taken_by(ctx: PlanContext, alias: str, source: str) -> str | None:
    """Why an existing Service of the alias name must not be touched, or None if it is ours."""
    live = ctx.service(alias)
    if live is None:
        return None
    ann = o.annotations_of(live).get(ctx.catalog.common.alias_of_annotation)
    if ctx.is_tool_owned(live) and ann == source:
        return None
    owner = ctx.operator_owner(live) or "no dcgm-migrate marker"
    return (f"Service/{alias} already exists and is not the tool's ({owner}); it is never "
            "overwritten or adopted — with ClusterPolicy and GPUCluster coexisting, shared "
            "ownership of the stable names belongs to the operator")


def shared_with(ctx: PlanContext, alias: str) -> str | None:
    """`ClusterPolicy/<name>` when a ClusterPolicy's operator renders the alias name for its
    own pods (both stacks run here): the name is shared, not taken — the GPUCluster pods join
    that Service through EndpointSlices `dcgm-migrate guard` keeps (`model/sharing.py`); the
    operator's Service itself is never written."""
    live = ctx.service(alias)
    if live is None or collected(ctx.snapshot, live) or o.terminating(live):
        return None
    return sharing.rendered_by(live)


def _shared_detail(alias: str, owner: str, source: str) -> str:
    return (f"shared: Service/{alias} belongs to {owner}, which renders it for its own pods; "
            f"the pods of Service/{source} join it through EndpointSlices that `dcgm-migrate "
            "guard` keeps (the operator's Service is never written)")


def _leaving(ctx: PlanContext, live: Mapping[str, Any]) -> str | None:
    """Why a Service holding an alias name is about to go away by itself (its operator CR was
    deleted: the moment of a ClusterPolicy → GPUCluster change), or None if it stays."""
    owner = collected(ctx.snapshot, live)
    if owner is None:
        return None
    return (f"Service/{o.name(live)} belongs to {owner}, which is deleted: garbage collection "
            "removes it, and the alias is created as soon as it is gone")


def _name_gate(ctx: PlanContext, alias: str, source: str) -> GateResult:
    """alias-name-free: free, already the tool's, or about to be freed (the runner waits)."""
    name = f"alias-name-free/{alias}"
    taken = _taken_by(ctx, alias, source)
    live = ctx.service(alias)
    leaving = _leaving(ctx, live) if taken and live is not None else None
    if leaving:
        return GateResult(name, False, leaving, wait=True)
    return GateResult(name, taken is None, taken or "free or already the tool's")


def _still_terminating(ctx: PlanContext, alias: str) -> str | None:
    """Why the alias cannot be created (again) now: the old one is Terminating."""
    why = o.terminating(ctx.service(alias))
    if why is None:
        return None
    ns = ctx.snapshot.namespace
    return (f"Service/{alias} is being deleted ({why}); it cannot be created again until it is "
            f"gone: wait for its finalizers, or remove them if nothing needs them (`kubectl -n "
            f"{ns} patch service {alias} --type=merge -p "
            "'{\"metadata\":{\"finalizers\":null}}'`), then run again")


def plan(ctx: PlanContext) -> PhasePlan:
    steps: list[Step] = []
    gates: list[GateResult] = []
    notes: list[str] = []
    blocked = None
    checks: list[Step] = []
    cr = aliasing.owner_of(ctx.snapshot.gpu_clusters)
    comps = _candidates(ctx)
    if not comps:
        notes.append("no GPUCluster (DRA) components: the legacy stack keeps its names and "
                     "gets no aliases; phase 2 completes with no writes")
    what_if = ctx.snapshot
    for comp in comps:
        assert comp.alias
        release = ctx.catalog.managed_by_release(ctx.service(comp.alias))
        if release is not None:
            detail = (f"handed over: Service/{comp.alias} is managed by the GPU Operator itself "
                      f"(release {release.name}); the tool never writes it again")
            gates.append(GateResult(f"alias-name-free/{comp.alias}", True, detail))
            notes.append(detail)
            continue
        source = ctx.service(comp.service)
        if source is None:
            notes.append(f"Service/{comp.service} does not exist: no alias {comp.alias}")
            continue
        owner = shared_with(ctx, comp.alias)
        if owner is not None:
            detail = _shared_detail(comp.alias, owner, comp.service)
            gates.append(GateResult(f"alias-name-free/{comp.alias}", True, detail))
            notes.append(detail)
            continue
        free = _name_gate(ctx, comp.alias, comp.service)
        freeing = free.wait  # garbage collection frees it: the runner waits before writing
        if freeing:
            notes.append(free.detail)
            free = GateResult(free.name, True, free.detail)
        gates.append(free)
        if not free.ok:
            blocked = blocked or free.detail
            continue
        leaving = None if freeing else _still_terminating(ctx, comp.alias)
        if leaving:
            gates.append(GateResult(f"alias-not-terminating/{comp.alias}", False, leaving))
            blocked = blocked or leaving
            continue
        step = CreateAlias(comp.alias, comp.service, alias_body(ctx, comp, source, cr))
        if step.satisfied(ctx.service(comp.alias)):
            notes.append(f"Service/{comp.alias} already exists as the tool's alias")
            checks.append(step)
            continue
        steps.append(step)
        what_if = monitoring.with_service(what_if, step.body)
    if steps:
        gates.append(scrapechecks.duplicate_gate(what_if, _exporter_daemonsets(ctx),
                                               before=ctx.snapshot))
    guarded = [g.baseline(ctx.snapshot, c.service, c.local_traffic) for c in comps
               if ctx.service(c.service)]
    return PhasePlan(number=NUMBER, name=NAME, steps=tuple(steps), gates=tuple(gates),
                     notes=tuple(notes), blocked=blocked, guarded=tuple(guarded),
                     checks=tuple(checks))


def before_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    if isinstance(step, CreateAlias):
        out = [_name_gate(ctx, step.service, step.source)]
        leaving = None if out[0].wait else _still_terminating(ctx, step.service)
        if leaving:
            out.append(GateResult(f"alias-not-terminating/{step.service}", False, leaving))
        what_if = monitoring.with_service(ctx.snapshot, step.body)
        out.append(scrapechecks.duplicate_gate(what_if, _exporter_daemonsets(ctx),
                                             before=ctx.snapshot))
        return out
    if isinstance(step, DeleteAlias):
        live = ctx.service(step.service)
        if live is not None and _taken_by(ctx, step.service, step.source):
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
    out = []
    for step in steps:
        if not isinstance(step, CreateAlias):
            continue
        name = f"alias-holds/{step.service}"
        live = ctx.service(step.service)
        if live is None:
            out.append(GateResult(name, False, f"Service/{step.service} was deleted (by hand, or "
                                  "by garbage collection after its GPUCluster was deleted)"))
        elif shared_with(ctx, step.service):
            owner = shared_with(ctx, step.service) or ""
            out.append(GateResult(name, True, "handed over: " + _shared_detail(
                step.service, owner, step.source).removeprefix("shared: ")))
        elif _taken_by(ctx, step.service, step.source):
            out.append(GateResult(name, False, f"Service/{step.service} was replaced by an "
                                  "object that is not the tool's"))
        elif o.terminating(live):
            out.append(GateResult(name, False, f"Service/{step.service} is being deleted "
                                  f"({o.terminating(live)})"))
        else:
            out.append(_matches_source(ctx, step, live))
    return out + stable_names(ctx)


def _matches_source(ctx: PlanContext, step: CreateAlias, live: Mapping[str, Any]) -> GateResult:
    """The alias against what phase 2 renders from its source *now* (the guard re-syncs the
    same differences), not against the body recorded when it was created: a CR edit of the
    source is drift until the alias follows it, and no longer drift once it has."""
    name = f"alias-holds/{step.service}"
    source = ctx.service(step.source)
    comp = next((c for c in ctx.catalog.components if c.alias == step.service
                 and c.service == step.source), None)
    if source is None or comp is None:
        return GateResult(name, True, f"alias of {step.source} (no source to compare with)")
    diff = aliasing.differences(live, alias_body(ctx, comp, source, None))
    if diff:
        return GateResult(name, False, f"differs from its source {step.source} in "
                          f"{aliasing.describe(diff)}; `dcgm-migrate guard` re-syncs it")
    return GateResult(name, True, f"alias of {step.source}, matching it")


def stable_names(ctx: PlanContext) -> list[GateResult]:
    """Every stable name the stack running *now* needs (its alias, or for the legacy stack its
    own Service) exists and selects ready pods, whatever the state recorded: after a stack
    change the recorded steps describe the old stack, not what consumers resolve today."""
    out = []
    seen = set()
    for comp in ctx.components:
        stable = comp.alias or comp.service
        if stable in seen or ctx.service(comp.service) is None:
            continue  # no source Service: nothing to alias (plan notes it), nothing to check
        seen.add(stable)
        label = comp.common_label.key
        result = g.serves(ctx.snapshot, stable, ctx.daemonsets_with_label(label),
                          gate="stable-name")
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
    inverse: list[Step] = []
    warnings = []
    notes = []
    for step in reversed(steps):
        if isinstance(step, CreateAlias):
            live = ctx.service(step.service)
            if live is None:
                continue
            if _taken_by(ctx, step.service, step.source):
                owner = ctx.operator_owner(live) or "without the dcgm-migrate marker"
                warnings.append(f"Service/{step.service} is no longer the tool's alias (now "
                                f"{owner}); left in place, skipped")
                continue
            if o.terminating(live):
                notes.append(f"Service/{step.service} is already being deleted "
                             f"({o.terminating(live)}); it goes once those finalizers are "
                             "removed")
                continue
            inverse.append(step.inverse())
    return PhasePlan(number=NUMBER, name=NAME, steps=tuple(inverse), warnings=tuple(warnings),
                     notes=tuple(notes))
