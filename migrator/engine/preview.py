"""`apply --phase N --dry-run` as an honest preview (pure: snapshot + state in, report out).

A server-side dry run persists nothing, so running the phase loop with dry-run writes would
plan every later phase against the unchanged cluster and, recording phases completed in a
scratch state, verify them against it (false drift, "completed" for what never ran). The
preview instead walks phases 1..N as `Runner.apply` would, without running anything:

- a completed phase that still holds is shown as it is (`holds`); one that drifted, or whose
  stack changed, is planned again as the runner would re-run it;
- every other phase is planned against the cluster *as it would be* after the earlier
  phases' writes (`model/projection.py`): its changes (object, field, before → after), the
  gates that can be evaluated with their result — the plan's, and each step's pre-gates on
  the cluster as it would be just before that step — and, for what only the run itself can
  show, the waits it would go through (`wouldWaitFor`: a DaemonSet's rollout, an alias's
  EndpointSlices, the no-loss baselines);
- a gate that refuses stops the preview there (`would-stop`; later phases `not-reached`),
  as it would stop the run before its write.

A phase's `status` stays what the state records: a dry run records nothing. The caller sends
the server-side dry-run writes of `Preview.writes` (each step whose object exists now, or
that creates it), so the API server validates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from migrator import phases
from migrator.engine import assemble
from migrator.engine.reports import PhasePreview, PhaseView, PlanReport
from migrator.engine.state import PhaseRecord, PhaseStatus, State
from migrator.engine.walk import Action, Decision, decide
from migrator.engine.warned import merged
from migrator.model import gates as g
from migrator.model import kinds, projection
from migrator.model import objects as o
from migrator.model.discovery import discover
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component
from migrator.model.steps import Change, Step, from_record
from migrator.phases import Phase

WOULD_RUN = "would-run"  # the run would plan and write this phase (or only wait, if nothing)
HOLDS = "holds"  # completed, and it still holds: the run would leave it alone
WOULD_STOP = "would-stop"  # a gate refuses: the run would stop before this phase's write
NOT_REACHED = "not-reached"  # an earlier phase would stop the run first

Obj = dict[str, Any]


@dataclass(frozen=True)
class Preview:
    report: PlanReport  # its phases carry `preview`
    writes: tuple[Step, ...]  # to send as server-side dry runs
    unsent: tuple[str, ...]  # steps whose object exists only after N
    refusal: str | None  # what would stop the run, or None


@dataclass
class _Walk:
    """What the walk over the phases carries from one to the next."""

    catalog: Catalog
    components: tuple[Component, ...]
    options: Options
    live: Snapshot  # the cluster now: which objects a dry-run write can reach
    projected: Snapshot  # the cluster as it would be after the phases walked so far
    writes: list[Step] = field(default_factory=list)
    unsent: list[str] = field(default_factory=list)
    refusal: str | None = None
    warnings: list[str] = field(default_factory=list)
    stopped: int | None = None  # the phase that would stop the run

    def context(self, snap: Snapshot, recorded: Mapping[str, Any] | None = None) -> PlanContext:
        return PlanContext(snap, self.catalog, self.components, self.options, recorded or {})


def build(snapshot: Snapshot, catalog: Catalog, state: State | None, options: Options,
          upto: int) -> Preview:
    """The preview of `apply --phase upto --dry-run` (module docstring)."""
    report = assemble.build(snapshot, catalog, state, options)
    found = discover(snapshot, catalog)
    walk = _Walk(catalog, found.components, options, snapshot, snapshot)
    changed = state is not None and state.stack_changed(found.stack)
    views: list[PhaseView] = []
    for module in phases.PHASES:
        number = module.NUMBER
        rec = state.phase(number) if state else None
        if number > upto or walk.stopped is not None:
            views.append(_unasked(walk, module, rec, asked=number <= upto))
        else:
            views.append(_phase(walk, module, rec, found.stack if changed else None))
    # the report of `apply`, with these phases: derived once, from final values
    previewed = replace(report, phases=tuple(views),
                        warnings=merged(report.warnings, walk.warnings))
    return Preview(previewed, tuple(walk.writes), tuple(walk.unsent), walk.refusal)


def _view(module: Phase, rec: PhaseRecord | None, changes: tuple[Change, ...],
          gates: Iterable[GateResult], notes: list[str], blocked: str | None = None, *,
          outcome: str | None = None, waits: Iterable[str] = ()) -> PhaseView:
    return PhaseView(module.NUMBER, module.NAME, rec.status if rec else PhaseStatus.PENDING,
                     changes,
                     tuple(gates), tuple(notes), rec.error if rec else None, blocked,
                     None if outcome is None else PhasePreview(outcome,
                                                               tuple(dict.fromkeys(waits))))


def _unasked(walk: _Walk, module: Phase, rec: PhaseRecord | None, *,
             asked: bool) -> PhaseView:
    """A phase past N (shown as the run's final report would show it), or one an earlier
    phase's refusal keeps the run from reaching."""
    decision = _decide(walk, module, rec)
    notes = [] if not asked else [f"not reached: phase {walk.stopped} would stop the run first"]
    outcome = NOT_REACHED if asked else None
    if decision.status is PhaseStatus.COMPLETED or decision.plan is None:
        return _view(module, rec, (), decision.gates, notes, outcome=outcome)
    plan = decision.plan
    notes = [*notes, *plan.notes]
    if plan.blocked and plan.blocked not in notes:
        notes.append(plan.blocked)
    return _view(module, rec, assemble.changes_of(plan.steps), plan.gates, notes, plan.blocked,
                 outcome=outcome)


def _decide(walk: _Walk, module: Phase, rec: PhaseRecord | None,
            new_stack: str | None = None) -> Decision:
    """The walk's decision (engine/walk.py) on the cluster as it would be by now."""
    return decide(module, rec, walk.projected, walk.catalog, walk.components, walk.options,
                  new_stack=new_stack)


def _phase(walk: _Walk, module: Phase, rec: PhaseRecord | None,
           new_stack: str | None) -> PhaseView:
    """One phase the run would reach: holds, would run, or would stop."""
    decision = _decide(walk, module, rec, new_stack)
    if decision.action is Action.HOLDS:
        return _view(module, rec, (), decision.gates, [], outcome=HOLDS)
    reason = None
    if decision.action is Action.RERUN:
        reason = (f"it no longer holds ({g.describe(decision.drift)})" if decision.drift
                  else f"the stack changed to {new_stack}")
    walk.warnings += [f"the run would retire a recorded step: {r.reason}"
                      for r in decision.retire]
    plan = decision.plan
    assert plan is not None
    notes = list(plan.notes)
    if reason:
        notes.insert(0, f"recorded completed, but {reason}: the run would run it again")
    if plan.blocked and plan.blocked not in notes:
        notes.append(plan.blocked)
    gates: dict[str, GateResult] = {r.name: r for r in plan.gates}
    waits: list[str] = []
    refusal = plan.refusal
    snap = walk.projected
    if refusal is None:
        for step in _revisit(plan, rec, snap):  # written before a kill: only its waits left
            waits += _waits(walk, module, step, snap, snap, plan)
        for step in plan.steps:
            if not step.pod_by_pod and step.satisfied(_live(snap, step)):
                continue  # the runner marks it skipped (a pod-by-pod step always runs)
            pre = list(module.before_write(walk.context(snap), step))
            failing = g.failed(pre)
            if failing and all(r.wait for r in failing):  # heals by itself: the run waits
                waits += [f"{r.name}, within --timeout: {r.detail}" for r in failing]
                pre = [r for r in pre if r.ok]
            elif failing:
                refusal = f"{step.object}: {g.describe(pre)}"
            gates.update((r.name, r) for r in pre)
            if refusal is not None:
                notes.append(f"the run would stop before writing {step.object}")
                break
            _send(walk, step)
            after = projection.after(snap, step)
            waits += _waits(walk, module, step, snap, after, plan)
            snap = after
    if refusal is not None:
        walk.stopped = module.NUMBER
        walk.refusal = walk.refusal or f"phase {module.NUMBER}: {refusal}"
        return _view(module, rec, assemble.changes_of(plan.steps), gates.values(), notes,
                     plan.blocked, outcome=WOULD_STOP, waits=waits)
    for step in plan.checks:  # already true, no write: the run still waits for these
        if _live(snap, step) is not None:
            waits += [f"{r.name}: {r.detail}" for r in
                      g.failed(module.after_write(walk.context(snap), step))]
    if plan.steps or plan.checks:
        waits += _baselines(plan)
    walk.projected = snap
    return _view(module, rec, assemble.changes_of(plan.steps), gates.values(), notes, plan.blocked,
                 outcome=WOULD_RUN, waits=waits)


def _live(snap: Snapshot, step: Step) -> Obj | None:
    source = snap.daemonsets if step.kind == kinds.DAEMONSET else snap.services
    found = source.get(step.name)
    return dict(found) if found is not None else None


def _revisit(plan: PhasePlan, rec: PhaseRecord | None, snap: Snapshot) -> list[Step]:
    """Recorded writes (intent or done) the plan leaves out because the object shows them:
    the runner waits for their post-gates again before going on (`Runner._revisit`)."""
    if rec is None:
        return []
    planned = {s.id for s in plan.steps}
    out = []
    for r in rec.steps:
        if r.status in ("intent", "done") and r.id not in planned:
            step = from_record(r.step)
            if step.satisfied(_live(snap, step)):
                out.append(step)
    return out


def _send(walk: _Walk, step: Step) -> None:
    """Queue the step's server-side dry-run write when the API server can take it now: its
    object exists, or the write creates it. A pod-by-pod step deletes pods: not sent."""
    if step.pod_by_pod:
        return
    if step.creates or _live(walk.live, step) is not None:
        walk.writes.append(step)
        return
    walk.unsent.append(f"{step.object} ({step.type}) not sent as a dry-run write: it "
                               "exists only once an earlier phase has created it")


def _waits(walk: _Walk, module: Phase, step: Step, before: Snapshot, after: Snapshot,
           plan: PhasePlan) -> list[str]:
    """What the runner would wait for after this step: only the run can show these."""
    out = []
    ds = before.daemonsets.get(step.rollout_of() or "")
    labels = ", ".join(f"{k}={v}" if v is not None else f"no {k}"
                       for k, v in step.pod_labels().items())
    if step.pod_by_pod and step.name in before.daemonsets:
        pods = [p for p in before.pods_of(step.name) if not p.deleting]
        out.append(f"DaemonSet/{step.name}'s {len(pods)} old pods deleted one node at a time, "
                   "each after the previous node's new pod is Ready (--roll-on-delete)")
    elif ds is not None and o.update_strategy(ds) == "OnDelete":
        return []  # the template change rolls nothing (`afterwrite.wait`)
    elif ds is not None and step.rolls_pods():
        desired = g.rollout_counts(ds)[2]
        out.append(f"the rollout of DaemonSet/{step.name}: {desired} pods replaced, at most "
                   f"{o.max_unavailable(ds, desired)} unavailable at a time")
    for r in module.after_write(walk.context(after), step):
        check, _, name = r.name.partition("/")
        if check == "rollout-complete":
            continue  # the rollout line above
        if check == "pods-labelled":
            out.append(f"every pod of DaemonSet/{name} to carry {labels}" if labels else
                       f"every pod of DaemonSet/{name} to carry its new template's labels")
        elif check == "endpointslices":
            ready = after.endpoints_of(name).ready_total
            out.append(f"the EndpointSlices of Service/{name} to list exactly its {ready} "
                       "Ready pods")
        else:
            out.append(f"{r.name}: {r.detail}")
    return out


def _baselines(plan: PhasePlan) -> list[str]:
    """The no-loss gates the runner checks after every write of the phase."""
    out = []
    for base in plan.guarded:
        budget = plan.tolerance.get(base.service, 0)
        where = " per node" if base.local else ""
        out.append(f"Service/{base.service} to keep its {base.total} ready endpoints{where} "
                   + (f"(at most {budget} missing while pods roll)" if budget
                      else "(none lost)"))
    return out
