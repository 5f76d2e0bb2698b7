"""Phase 3 — switch: Service selectors move to the common label once every pod the Service would
select carries it; operator-owned Services only with --include-operator-owned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import gates as g
from migrator.model import monitoring, scrapechecks
from migrator.model import objects as o
from migrator.model.discovery import collected
from migrator.model.findings import Remedy
from migrator.model.gates import GateKind, GateResult
from migrator.model.guarding import HELD_ANNOTATION
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.stacks import Component
from migrator.model.steps import SetSelector, Step, from_record
from migrator.phases.common import Draft

NUMBER = 3
NAME = "switch"
SWITCHES_SELECTORS = True
ANSWERS_FOR = frozenset({Remedy.SELECTORS})  # fixes name it; no check's phase is it


def _selector(svc: Mapping[str, Any]) -> dict[str, str]:
    return dict(o.dig(svc, "spec", "selector") or {})


def _step_for(ctx: PlanContext, comp: Component, name: str,
              svc: Mapping[str, Any]) -> SetSelector:
    """The switch of this Service: as recorded when resuming, else from its selector now."""
    recorded = ctx.recorded.get(SetSelector.id_of(name))
    if recorded:
        prior = from_record(recorded)
        assert isinstance(prior, SetSelector)
        return prior
    local = o.dig(svc, "spec", "internalTrafficPolicy") == "Local"
    return SetSelector(name, _selector(svc), comp.common_selector, local,
                       operator_owned=ctx.operator_owner(svc) is not None,
                       allow_foreign=ctx.options.allow_foreign_pods)


def _leaving(ctx: PlanContext, pods: Sequence[str]) -> dict[str, str]:
    """Of these pods, those garbage collection is removing, and why (their DaemonSet is gone,
    being deleted, or controlled by a deleted operator CR: the other stack's, after a change)."""
    stacks, wanted = {c.daemonset for c in ctx.catalog.components}, set(pods)
    out: dict[str, str] = {}
    for pod in ctx.snapshot.pods:
        if pod.name not in wanted or pod.owner_kind != "DaemonSet" or pod.owner_name not in stacks:
            continue
        ds = ctx.snapshot.daemonsets.get(pod.owner_name or "")
        owner = collected(ctx.snapshot, ds) if ds is not None else None
        if ds is None:
            out[pod.name] = f"DaemonSet/{pod.owner_name} is gone"
        elif o.terminating(ds):
            out[pod.name] = f"DaemonSet/{pod.owner_name} is being deleted"
        elif owner is not None:
            out[pod.name] = f"DaemonSet/{pod.owner_name} belongs to {owner}, which is deleted"
    return out


def _strays(ctx: PlanContext, selector: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(pods outside the DaemonSets that carry this common selector, those DaemonSets)."""
    daemonsets = ctx.daemonsets_with_label(next(iter(selector), ""))
    return g.pods_outside(ctx.snapshot, selector, daemonsets), daemonsets


def _pre_gates(ctx: PlanContext, step: SetSelector) -> tuple[list[GateResult], list[str]]:
    """Mixed rollout, superset, duplicate scraping: the checks before any selector moves."""
    key, value = next(iter(step.after.items()))
    daemonsets = ctx.daemonsets_with_label(key)
    out = [g.pods_carry(ctx.snapshot, ds, {key: value}, gate="mixed-rollout") for ds in daemonsets]
    superset, strays = g.selector_superset(ctx.snapshot, step.service, step.before, step.after,
                                           step.local, daemonsets)
    out.append(superset)
    out.append(g.foreign_pods(step.service, strays, daemonsets, ctx.options.allow_foreign_pods,
                              leaving=_leaving(ctx, strays)))
    warnings = []
    if strays and not out[-1].wait:
        warnings.append(f"Service/{step.service}: the common selector would also pick up pods "
                        f"outside the DaemonSets: {', '.join(strays[:5])}"
                        + ("" if ctx.options.allow_foreign_pods else
                           " (phase 3 refuses unless --allow-foreign-pods)"))
    svc = ctx.service(step.service)
    if svc is not None:
        switched = {**svc, "spec": {**(svc.get("spec") or {}), "selector": dict(step.after)}}
        exporters = [c.daemonset for c in ctx.components if c.exporter]
        out.append(scrapechecks.duplicate_gate(
            monitoring.with_service(ctx.snapshot, switched), exporters,
            f"no-duplicate-scrape/{step.service}", before=ctx.snapshot))
    return out, warnings


def plan(ctx: PlanContext) -> PhasePlan:
    draft = Draft(NUMBER, NAME)
    for comp in ctx.components:
        if comp.daemonset not in ctx.snapshot.daemonsets:
            continue
        for name in (n for n in (comp.alias, comp.service) if n):
            svc = ctx.service(name)
            if svc is None:
                continue
            step = _step_for(ctx, comp, name, svc)
            release = ctx.catalog.managed_by_release(svc)
            if release is not None:
                draft.notes.append(f"Service/{name} is managed by the GPU Operator itself "
                                   f"(release {release.name}): handed over, never switched by "
                                   "the tool")
                continue
            if name == comp.alias and not ctx.is_tool_owned(svc):
                continue  # not our alias (e.g. the ClusterPolicy's own nvidia-dcgm)
            # Who owns it now, not when a step was recorded: an alias the ClusterPolicy's
            # operator took over (a ClusterPolicy added beside the GPUCluster) is its now.
            owner = ctx.operator_owner(svc)
            if owner is not None and not ctx.options.include_operator_owned:
                draft.warnings.append(f"Service/{name} is owned by {owner}, which re-renders it "
                                      "on every reconcile and would revert the selector; not "
                                      "switched (--include-operator-owned switches it anyway)")
                continue
            if owner is not None:
                draft.warnings.append(f"Service/{name} is operator-owned: {owner} will revert "
                                      "its selector on the next reconcile")
            draft.guarded.append(g.baseline(ctx.snapshot, name, step.local))
            if step.satisfied(svc):
                draft.notes.append(f"Service/{name} already selects {comp.common_label.key}")
                draft.checks.append(step)
                strays, _ = _strays(ctx, step.after)
                if strays:
                    draft.warnings.append(f"Service/{name} selects pods outside the "
                                          f"DaemonSets: {', '.join(strays[:5])}")
                continue
            pre, warn = _pre_gates(ctx, step)
            draft.gate(pre)
            draft.warnings.extend(warn)
            draft.steps.append(step)
    return draft.plan()


def before_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    if not isinstance(step, SetSelector):
        return []
    svc = ctx.service(step.service)
    if svc is None:
        return [GateResult(f"exists/{step.service}", False, f"Service/{step.service} is gone")]
    if _selector(svc) != dict(step.before):
        return [GateResult(f"selector-unchanged/{step.service}", False,
                           f"selector is {_selector(svc)}, expected {dict(step.before)}: changed "
                           "outside the tool", kind=GateKind.CHANGED_MEANWHILE)]
    if not set(step.after) & {c.common_label.key for c in ctx.catalog.components}:
        # Restoring the original selector (rollback): only the superset check applies.
        return [g.selector_superset(ctx.snapshot, step.service, step.before, step.after,
                                    step.local, [c.daemonset for c in ctx.components])[0]]
    return _pre_gates(ctx, step)[0]


def after_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    """EndpointSlices reflect the new selector: exactly its Ready pods."""
    if not isinstance(step, SetSelector):
        return []
    want = frozenset(p.name for p in ctx.snapshot.pods_matching(step.after) if p.ready)
    return [g.endpoints_are(ctx.snapshot, step.service, want)]


def verify(ctx: PlanContext, steps: Sequence[Step]) -> list[GateResult]:
    out = []
    switched = [s for s in steps if isinstance(s, SetSelector)]
    recorded = {s.service for s in switched}
    for step in switched:
        svc = ctx.service(step.service)
        name = f"selector-holds/{step.service}"
        if svc is None:
            out.append(GateResult(name, False, f"Service/{step.service} is gone"))
        elif HELD_ANNOTATION in o.annotations_of(svc) and _selector(svc) == dict(step.before):
            # `dcgm-migrate guard` moved it back on purpose (its DaemonSet lost the common
            # label) and moves it forward again by itself: not drift.
            out.append(GateResult(name, True, f"held on {dict(step.before)} by the guard: "
                                  f"{o.annotations_of(svc)[HELD_ANNOTATION]}"))
        elif not step.satisfied(svc):
            who = ctx.operator_owner(svc)
            out.append(GateResult(name, False, f"selector is {o.dig(svc, 'spec', 'selector')}, "
                                  f"not {dict(step.after)}"
                                  + (f" — {who} reconciled it back" if who else "")))
        else:
            strays, daemonsets = _strays(ctx, step.after)
            out += [g.serves(ctx.snapshot, step.service, daemonsets, gate="selector-holds"),
                    g.foreign_pods(step.service, strays, daemonsets, step.allow_foreign)]
    # Aliases of this stack the tool owns but phase 3 never switched (created after it ran,
    # e.g. after a stack change): the phase no longer holds for this stack.
    for comp in ctx.components:
        svc = ctx.service(comp.alias) if comp.alias else None
        if svc is None or comp.alias in recorded or ctx.catalog.managed_by_release(svc):
            continue  # a handed-over one: the operator release selects by its own label
        if ctx.is_tool_owned(svc) and _selector(svc) != dict(comp.common_selector):
            out.append(GateResult(f"switched/{comp.alias}", False,
                                  f"Service/{comp.alias} (the tool's alias) selects "
                                  f"{o.dig(svc, 'spec', 'selector')}, not "
                                  f"{dict(comp.common_selector)}: it was created after phase 3 "
                                  "ran (a stack change?); `apply --phase 3` switches it"))
    return out


def rollback(ctx: PlanContext, steps: Sequence[Step]) -> PhasePlan:
    """Restore the recorded originals, newest first; a Service that is no longer the tool's to
    restore is left as its new owner has it, with a warning."""
    draft = Draft(NUMBER, NAME)
    for step in (s for s in reversed(steps) if isinstance(s, SetSelector)):
        svc = ctx.service(step.service)
        if svc is None or step.inverse().satisfied(svc):
            continue
        owner = ctx.operator_owner(svc)
        if not step.operator_owned and not ctx.is_tool_owned(svc):
            draft.warnings.append(f"Service/{step.service} is no longer the tool's alias (now "
                                  f"{owner or 'without the dcgm-migrate marker'}): its selector "
                                  "is left as its owner set it; skipped")
        elif _selector(svc) != dict(step.after):
            draft.warnings.append(f"Service/{step.service} selects {_selector(svc)}, neither the "
                                  f"tool's {dict(step.after)} nor the original "
                                  f"{dict(step.before)}: changed outside the tool"
                                  f"{' by ' + owner if owner else ''}; left as it is, skipped")
        else:
            draft.steps.append(step.inverse())
            draft.guarded.append(g.baseline(ctx.snapshot, step.service, step.local))
    return draft.plan()
