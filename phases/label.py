"""Phase 1 — label: the reserved common label on each DCGM/Exporter DaemonSet, its template and
pods; in place where it applies (model/halfrolls.py: no pod restarted), otherwise rolled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from migrator.model import gates as g
from migrator.model import halfrolls, labelmarks
from migrator.model import objects as o
from migrator.model.findings import Remedy
from migrator.model.gates import GateResult
from migrator.model.halfrolls import cost, in_place_steps, rolling_because
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.selectors import for_service
from migrator.model.stackchange import cr_overrides
from migrator.model.stacks import Component
from migrator.model.steps import (
    HoldStrategy,
    RestoreStrategy,
    RollPods,
    SetLabels,
    Step,
    from_record,
)
from migrator.phases.common import Draft

NUMBER = 1
NAME = "label"
SWITCHES_SELECTORS = False
ANSWERS_FOR = frozenset({Remedy.COMMON_LABELS})  # its pods carry the common labels


def _component_of(ctx: PlanContext, daemonset: str) -> Component | None:
    return next((c for c in ctx.components if c.daemonset == daemonset), None)


def _release_label(ctx: PlanContext, comp: Component) -> tuple[str, str] | None:
    if not ctx.options.prepare_for:
        return None
    label = ctx.catalog.release(ctx.options.prepare_for).component_labels.get(comp.component)
    return (label.key, label.value) if label else None


def _nodes(ctx: PlanContext, comp: Component) -> set[str]:
    return {p.node for p in ctx.snapshot.pods_of(comp.daemonset) if p.node}


def _yields_to(ctx: PlanContext, comp: Component) -> tuple[Component, set[str]] | None:
    """The other stack's DaemonSet the release gives the same component label, with the nodes both
    run a pod on (its required anti-affinity runs one pod of a component per node), when that one
    keeps serving them: the stack whose own Service is the stable name (the other joins it through
    an alias), else by name."""
    own = _release_label(ctx, comp)
    for other in ctx.components:
        if own is None or other.daemonset == comp.daemonset or _release_label(ctx, other) != own:
            continue
        shared = _nodes(ctx, comp) & _nodes(ctx, other)
        if shared:
            keeps = (comp.alias is not None, comp.daemonset) < (other.alias is not None,
                                                                 other.daemonset)
            return None if keeps else (other, shared)
    return None


def prepared_label(ctx: PlanContext, comp: Component) -> tuple[str, str] | None:
    """(key, value) of the `--prepare-for` release's component label, unless the other stack's
    DaemonSet keeps this one's nodes (an old labelled pod would keep both stacks' pods Pending)."""
    return None if _yields_to(ctx, comp) else _release_label(ctx, comp)


def _sharing_notes(ctx: PlanContext, draft: Draft) -> str | None:
    """Where both stacks run a component on the same nodes: a note per DaemonSet left unprepared;
    a block (returned) when the overlap is partial (the release's rollout would stall there)."""
    blocked: list[str] = []
    release = ctx.options.prepare_for
    for comp in ctx.components:
        found = _yields_to(ctx, comp) if ctx.daemonset(comp) is not None else None
        if found is None:
            continue
        other, shared = found
        key, value = _release_label(ctx, comp) or ("", "")
        if _nodes(ctx, comp) - shared or _nodes(ctx, other) - shared:
            blocked.append(
                f"DaemonSet/{comp.daemonset} and DaemonSet/{other.daemonset} share "
                f"{len(shared)} of their nodes but not all: release {release} runs one pod "
                f"with {key}={value} per node (required pod anti-affinity), so its rollout "
                f"of one of them would stall at a shared node and leave that stack's other "
                f"nodes out of the stable name; run each component on both stacks' nodes "
                f"or on separate ones (nvidia.com/gpu.deploy.* node labels) before preparing")
            continue
        draft.notes.append(
            f"--prepare-for {release}: DaemonSet/{comp.daemonset} runs on the nodes of "
            f"DaemonSet/{other.daemonset}, and the release runs one pod with {key}={value} per "
            f"node (required pod anti-affinity): only DaemonSet/{other.daemonset} is prepared "
            f"and keeps serving them; the release's new {comp.daemonset} pods stay Pending "
            f"(Unschedulable) there until that stack's DCGM leaves those nodes")
    return "; ".join(blocked) or None


def _wanted(ctx: PlanContext, comp: Component) -> dict[str, str]:
    """The labels phase 1 writes: the common label, with `--prepare-for` the release's too."""
    extra = prepared_label(ctx, comp)
    return {comp.common_label.key: comp.common_label.value} | (dict([extra]) if extra else {})


def _label_step(ctx: PlanContext, comp: Component, ds: Mapping[str, Any]) -> SetLabels:
    """Phase 1's write on this DaemonSet (a label `--prepare-for` adds to a recorded step has
    its original read now, before the tool writes it)."""
    wanted = _wanted(ctx, comp)
    recorded = ctx.recorded.get(SetLabels.id_of(comp.daemonset))
    # resuming: the originals are what we saw before our first write
    prior = from_record(recorded) if recorded else SetLabels(comp.daemonset, {}, {}, {}, {})
    assert isinstance(prior, SetLabels)
    new = {k: v for k, v in wanted.items() if k not in prior.meta_after}
    if not new:
        return prior
    mark = None if recorded else labelmarks.read(ds)  # the tool's own labels are never originals
    meta, template = (mark.meta_before, mark.template_before) if mark else ({}, {})
    return SetLabels(comp.daemonset, {**prior.meta_after, **new}, {**prior.template_after, **new},
                     {**prior.meta_before,
                      **{k: meta[k] if k in meta else o.labels(ds).get(k) for k in new}},
                     {**prior.template_before,
                      **{k: template[k] if k in template else o.template_labels(ds).get(k)
                         for k in new}})


ROLL_ON_DELETE_FIX = ("nothing was written for this phase; rerun with `--roll-on-delete` to let "
                      "the tool delete the old pods one node at a time, each after the last "
                      "one's replacement is Ready")


def _planned(ctx: PlanContext, draft: Draft, blocked: list[str], fix: str | None) -> PhasePlan:
    """The plan, guarding every Service selecting the DaemonSets' pods within the DaemonSet's
    rolling budget."""
    tolerance = {}
    for name, svc in sorted(ctx.snapshot.services.items()):
        selects = for_service(o.dig(svc, "spec", "selector")).matches
        ds_name = next((c.daemonset for c in ctx.components if any(
            selects(p.labels) for p in ctx.snapshot.pods_of(c.daemonset))), None)
        if ds_name is not None:
            local = o.dig(svc, "spec", "internalTrafficPolicy") == "Local"
            draft.guarded.append(g.baseline(ctx.snapshot, name, local))
            ds = ctx.snapshot.daemonsets[ds_name]
            tolerance[name] = o.max_unavailable(ds, g.rollout_counts(ds)[2])
    return draft.plan(blocked="; ".join(blocked) or None, fix=fix, tolerance=tolerance)


def plan(ctx: PlanContext) -> PhasePlan:
    draft = Draft(NUMBER, NAME)
    blocked: list[str] = []
    for comp in ctx.components:
        ds = ctx.daemonset(comp)
        if ds is None:
            continue
        step = replace(_label_step(ctx, comp, ds), in_place=False)
        key, value = comp.common_label.key, comp.common_label.value
        user_value = step.meta_before.get(key) or step.template_before.get(key)
        if user_value not in (None, value):
            draft.warnings.append(f"DaemonSet/{comp.daemonset} sets {key}={user_value!r}; the "
                                  f"reserved label wins and becomes {value!r} (rollback "
                                  f"restores {user_value!r})")
        for field, cr_value in cr_overrides(ctx, comp, ds):
            draft.warnings.append(
                f"{field} sets {key}={cr_value!r} for DaemonSet/{comp.daemonset}: phase 1 "
                f"overrides it with {value!r}, but the operator's next re-render (an upgrade or "
                f"any CR edit) brings {cr_value!r} back, the pods roll without the common label "
                "and every Service switched to it drains; remove the key from that CR field")
        rolling, done = rolling_because(ctx, ds), step.satisfied(ds)
        held = o.held_strategy(ds) is not None
        ondelete = halfrolls.on_delete(ds) and not held
        pods, what = len(ctx.snapshot.pods_of(comp.daemonset)), f"DaemonSet/{comp.daemonset}"
        if rolling is None and (held or not done):
            draft.steps += in_place_steps(ctx, ds, step)
            if not held:
                draft.gates.append(g.daemonset_healthy(ctx.snapshot, ds))
            draft.notes.append(f"{what}: " + cost(ds, pods, None))
        elif not done:
            draft.steps.append(step)
            draft.gates.append(halfrolls.health_gate(ctx, ds))
            if not ondelete:
                draft.notes.append(f"{what}: " + cost(ds, pods, rolling))
        else:
            draft.notes.append(f"{what} already carries {key}")
            draft.checks.append(step)  # e.g. an operator that renders it: its rollout must end
        if ondelete and ctx.options.roll_on_delete:
            draft.steps.append(RollPods(comp.daemonset, (key,)))
            draft.notes.append(f"{what} uses updateStrategy OnDelete: the tool deletes its old "
                               "pods one node at a time (--roll-on-delete)")
        elif ondelete:
            pods_ok = g.pods_carry(ctx.snapshot, comp.daemonset, {key: value})
            if not done or not pods_ok.ok:
                blocked.append(f"{what} uses updateStrategy OnDelete, so a template change rolls "
                               "no pods (" + (f"old pods: {pods_ok.detail}" if not pods_ok.ok else
                                              "every pod would keep its old labels")
                               + "); rerun with --roll-on-delete to let the tool delete old "
                               "pods one node at a time")
                draft.notes.append(blocked[-1])
    draft.warnings += _release_warnings(ctx)
    unsafe = _sharing_notes(ctx, draft)
    return _planned(ctx, draft, [*blocked, *([unsafe] if unsafe else [])],
                    ROLL_ON_DELETE_FIX if blocked and not unsafe else None)


def _release_warnings(ctx: PlanContext) -> list[str]:
    """What the release `--prepare-for` names takes away: the Services it deletes."""
    if not ctx.options.prepare_for:
        return []
    release = ctx.catalog.release(ctx.options.prepare_for)
    gone = [n for n in release.deletes_services if ctx.service(n) is not None]
    return [f"GPU Operator release {release.name} deletes {', '.join('Service/' + n for n in gone)}"
            ": every consumer that resolves those names loses them with the upgrade; find "
            "who still does before upgrading (docs/runbook.md, 'Upgrading to an operator with "
            "shared Services')"] if gone else []


def before_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    if isinstance(step, HoldStrategy) and step.name in ctx.snapshot.daemonsets:
        return [g.daemonset_healthy(ctx.snapshot, ctx.snapshot.daemonsets[step.name])]
    if isinstance(step, SetLabels):
        ds = ctx.snapshot.daemonsets.get(step.daemonset)
        if ds is None:
            return [GateResult(f"exists/{step.daemonset}", False,
                               f"DaemonSet/{step.daemonset} no longer exists")]
        if not step.rolls_pods() and not step.in_place:
            return []
        # In place, health was gated before the hold, whose write the controller may not have
        # observed yet; each pod is then proven by its revision (engine/inplace.py).
        return ([] if step.in_place else [halfrolls.health_gate(ctx, ds)]) + _unused(ctx, step)
    return []


def _unused(ctx: PlanContext, step: SetLabels) -> list[GateResult]:
    """no-selector-uses: no Service selects by a label this write removes."""
    users = {k: g.services_selecting(ctx.snapshot, k) for k, v in step.template_after.items()
             if v is None}
    return [GateResult(f"no-selector-uses/{key}", not names, f"Services still select by {key}: "
                       f"{', '.join(names)}; roll back phase 3 first" if names else "none")
            for key, names in users.items()]


def after_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    """Rollout complete and every pod carries the template's labels."""
    if not isinstance(step, SetLabels | RollPods | RestoreStrategy) or (
            isinstance(step, SetLabels) and step.in_place):
        return []  # in place: its pods are relabelled next, RestoreStrategy's gates wait
    if (ds := ctx.snapshot.daemonsets.get(step.daemonset)) is None:
        return []
    comp = _component_of(ctx, step.daemonset)
    keys = _wanted(ctx, comp) if comp else {}
    return [g.daemonset_healthy(ctx.snapshot, ds), g.pods_carry(
        ctx.snapshot, step.daemonset, {k: o.template_labels(ds).get(k) for k in keys})]


def verify(ctx: PlanContext, steps: Sequence[Step]) -> list[GateResult]:
    out = []
    hash_key = ctx.catalog.common.operator_hash_annotation
    for step in (s for s in steps if isinstance(s, SetLabels)):
        ds = ctx.snapshot.daemonsets.get(step.daemonset)
        name = f"labels-hold/{step.daemonset}"
        if ds is None:
            out.append(GateResult(name, False, f"DaemonSet/{step.daemonset} is gone"))
            continue
        if not step.satisfied(ds):
            why = "removed from the DaemonSet"
            if labelmarks.read(ds) is not None:  # an operator's re-render drops the mark
                why += (" by an edit of it (by hand or another client), not by an operator "
                        f"re-render: phase 1's mark {labelmarks.LABELS_MARK} is still on it; "
                        "apply re-runs phase 1")
            elif hash_key in o.annotations_of(ds) and ctx.operator_owner(ds):
                why += (f" — {ctx.operator_owner(ds)} re-rendered it (annotation {hash_key}"
                        f"={o.annotations_of(ds)[hash_key]}) without the common labels")
            out.append(GateResult(name, False, f"common labels {why}"))
            continue
        held = o.held_strategy(ds)
        if held is not None:
            out.append(GateResult(f"held/{step.daemonset}", False,
                                  f"held on updateStrategy OnDelete by dcgm-migrate (its own: "
                                  f"{held.get('type')}); resuming the run or a rollback "
                                  "restores it"))
        out.append(GateResult(name, True, "labels on DaemonSet and template"))
        out.append(g.pods_carry(ctx.snapshot, step.daemonset, dict(step.template_after)))
        comp = _component_of(ctx, step.daemonset)
        extra = prepared_label(ctx, comp) if comp else None
        if extra and o.template_labels(ds).get(extra[0]) != extra[1]:
            out.append(GateResult(f"prepared/{step.daemonset}", False,
                                  f"--prepare-for {ctx.options.prepare_for}: the template "
                                  f"lacks {extra[0]}={extra[1]}; phase 1 adds it"))
    return out


def rollback(ctx: PlanContext, steps: Sequence[Step]) -> PhasePlan:
    """The labels' originals restored; an OnDelete DaemonSet's pods rolled by the tool only with
    `--roll-on-delete` (refused without it: every pod would keep the label)."""
    draft = Draft(NUMBER, NAME)
    left: list[str] = []
    for step in reversed(steps):
        if not isinstance(step, SetLabels) or (
                ds := ctx.snapshot.daemonsets.get(step.daemonset)) is None:
            continue
        inv = replace(step.inverse(), in_place=False)
        if rolling_because(ctx, ds) is None:  # in place, gated before the hold
            if not inv.satisfied(ds) or o.held_strategy(ds) is not None:
                draft.steps += in_place_steps(ctx, ds, inv)
                draft.gates += _unused(ctx, inv)
            continue
        pods = len(ctx.snapshot.pods_of(step.daemonset))
        stale = halfrolls.on_delete(ds) and pods > 0 and (not inv.satisfied(ds) or bool(
            halfrolls.stale_pods(ctx.snapshot, ds, step.template_after)))
        if stale and not ctx.options.roll_on_delete:
            left.append(f"DaemonSet/{step.daemonset} uses updateStrategy OnDelete, so its "
                        f"{pods} pods would keep {', '.join(step.template_after)} after its "
                        "template loses it")
            continue
        if not inv.satisfied(ds):
            draft.steps.append(inv)
        if stale:
            draft.steps.append(RollPods(step.daemonset, tuple(step.template_after)))
    # Held with no label write to undo (a run killed right after its hold): restored alone.
    for comp in ctx.components:
        ds = ctx.snapshot.daemonsets.get(comp.daemonset)
        held = o.held_strategy(ds) if ds is not None else None
        if held is not None and not any(isinstance(s, RestoreStrategy) and s.daemonset
                                        == comp.daemonset for s in draft.steps):
            draft.steps.append(RestoreStrategy(comp.daemonset, held))
    return _planned(ctx, draft, left, ROLL_ON_DELETE_FIX if left else None)
