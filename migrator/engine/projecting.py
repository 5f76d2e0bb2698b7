"""The back ends of the one loop (engine/loop.py) that write nothing persistent:

- `Project` (the report of a run before it runs; pure): each phase the loop reaches is run
  against the cluster *as it would be* after the earlier writes (`model/projection.py`): its
  changes, the gates it can evaluate with their result — the plan's, and each step's pre-gates
  on the cluster as it would be just before that step — and, for what only the run itself can
  show, the waits it would go through (`wouldWaitFor`: a rollout, an alias's EndpointSlices,
  the no-loss baselines). A gate that refuses stops it there (`would-stop`; the phases after
  it `not-reached`), as it would stop the run before its write.
- `ServerDryRun` (`apply --dry-run`, `rollback --dry-run`): `Project`, and every write the API
  server can take now (its object exists, or the write creates it) sent with `dryRun=All`
  (the strategy is on the request: `Kube` writes take `dry_run`), so the server validates
  it. No lock, no state write, no wait.

A phase's `status` stays what the state records: a projection records nothing (the loop
itself never writes the state; only `applying.Apply` does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from migrator import phases
from migrator.engine import executor
from migrator.engine.loop import Direction, Loop, PhaseWork, RunSettings, Stopped, context
from migrator.engine.reports import PhasePreview, PhaseView, PlanReport
from migrator.engine.state import PhaseRecord, PhaseStatus, State
from migrator.engine.walk import Action, Decision, decide
from migrator.engine.warned import merged
from migrator.model import gates as g
from migrator.model import kinds, projection
from migrator.model import objects as o
from migrator.model.discovery import discover
from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.stepbase import Change
from migrator.model.steps import Step
from migrator.model.wording import counted

if TYPE_CHECKING:
    from migrator.kube.client import Kube

WOULD_RUN = "would-run"  # the run would plan and write this phase (or only wait, if nothing)
HOLDS = "holds"  # completed, and it still holds: the run would leave it alone
WOULD_STOP = "would-stop"  # a gate refuses: the run would stop before this phase's write
NOT_REACHED = "not-reached"  # an earlier phase would stop the run first

Obj = dict[str, Any]


@dataclass(frozen=True)
class Preview:
    """What a projected run would do: the report (its phases carry `preview`), the writes it
    would send (sent with `dryRun=All` by `ServerDryRun`), those it cannot send yet."""

    report: PlanReport
    writes: tuple[Step, ...]
    unsent: tuple[str, ...]  # steps whose object exists only after an earlier phase
    refusal: str | None  # what would stop the run, or None


@dataclass
class _Phase:
    """What the projection collects for the phase the loop is on."""

    decision: Decision
    gates: dict[str, GateResult]
    notes: list[str]
    waits: list[str]
    before: Snapshot


def changes_of(steps: tuple[Step, ...] | list[Step]) -> tuple[Change, ...]:
    """What the steps would change, field by field."""
    return tuple(c for step in steps for c in step.changes())


class Project:
    """The report back end: the loop's writes projected onto the cluster, nothing written."""

    def __init__(self, snapshot: Snapshot, catalog: Catalog, settings: RunSettings) -> None:
        self.catalog = catalog
        self.settings = settings
        self.now = snapshot  # the cluster as read: which objects a dry-run write can reach
        self.projected = snapshot  # as it would be after the writes projected so far
        self.views: dict[int, PhaseView] = {}
        self.writes: list[Step] = []
        self.unsent: list[str] = []
        self.warnings: list[str] = []
        self.refusal: str | None = None
        self.stopped: int | None = None
        self._on: _Phase | None = None
        self._settle: list[str] = []

    # ---- reads -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self.projected

    def fresh(self, base: Snapshot) -> Snapshot:
        return self.projected

    def live(self, step: Step) -> Obj | None:
        return _live(self.projected, step)

    def context(self, snap: Snapshot) -> PlanContext:
        return context(self.catalog, self.settings.options, snap)

    # ---- phases ----------------------------------------------------------------------------

    def stack(self, state: State, live: str, changed: bool) -> None:
        """The report says the stack change (engine/assemble.py); nothing is recorded."""

    def holds(self, decision: Decision) -> None:
        self.views[decision.module.NUMBER] = _view(decision, (), decision.gates, [], None,
                                                   HOLDS)

    def begin(self, decision: Decision, direction: Direction) -> None:
        plan = decision.plan
        assert plan is not None
        notes = list(plan.notes)
        if decision.action is Action.RERUN:
            reason = (f"it no longer holds ({g.describe(decision.drift)})" if decision.drift
                      else decision.reason.replace("stack changed", "the stack changed"))
            notes.insert(0, f"recorded completed, but {reason}: the run would run it again")
        if plan.blocked and plan.blocked not in notes:
            notes.append(plan.blocked)
        if direction is Direction.FORWARD:
            self.warnings += [f"the run would retire a recorded step: {r.reason}"
                              for r in decision.retire]
        else:
            self.warnings += [f"phase {decision.module.NUMBER} rollback: {w}"
                              for w in plan.warnings]
        self._on = _Phase(decision, {r.name: r for r in plan.gates}, notes,
                          list(self._settle), self.projected)
        self._settle = []

    def refuse(self, rec: PhaseRecord, message: str, hint: str, step: Step | None = None,
               gates: list[GateResult] | None = None) -> NoReturn:
        on = self._on
        assert on is not None
        on.gates.update((r.name, r) for r in gates or [])
        if step is not None:
            on.notes.append(f"the run would stop before writing {step.object}")
        self.stopped = rec.number
        self.refusal = self.refusal or f"phase {rec.number}: {message}"
        self._close(WOULD_STOP)
        raise Stopped(message)

    def start(self, decision: Decision, direction: Direction) -> PhaseWork:
        rec, plan = decision.record, decision.plan
        assert rec is not None and plan is not None
        return PhaseWork(decision.module, rec, plan, tuple(plan.guarded), direction,
                         decision.ctx.snapshot)

    def finish(self, work: PhaseWork) -> None:
        on = self._on
        assert on is not None
        if work.plan.steps or work.plan.checks:
            on.waits += _baselines(work.plan)
        self._close(WOULD_RUN)

    def _close(self, outcome: str) -> None:
        on = self._on
        assert on is not None and on.decision.plan is not None
        plan = on.decision.plan
        self.views[on.decision.module.NUMBER] = _view(
            on.decision, changes_of(plan.steps), on.gates.values(), on.notes, plan.blocked,
            outcome, on.waits)
        self._on = None

    # ---- steps -----------------------------------------------------------------------------

    def skip(self, work: PhaseWork, step: Step) -> None:
        """Already true: the run marks it skipped."""

    def wait_pre(self, work: PhaseWork, step: Step, base: Snapshot,
                 pre: list[GateResult]) -> list[GateResult]:
        """Heals by itself: the run would wait for it."""
        assert self._on is not None
        self._on.waits += [f"{r.name}, within --timeout: {r.detail}" for r in g.failed(pre)]
        return [r for r in pre if r.ok]

    def write(self, work: PhaseWork, step: Step, pre: list[GateResult]) -> None:
        assert self._on is not None
        self._on.gates.update((r.name, r) for r in pre)
        self.send(step)
        self._on.before = self.projected
        self.projected = projection.after(self.projected, step)

    def send(self, step: Step) -> None:
        """Keep the step as a dry-run write when the API server can take it now: its object
        exists, or the write creates it."""
        if step.creates or _live(self.now, step) is not None:
            self.writes.append(step)
            return
        self.unsent.append(f"{step.object} ({step.type}) not sent as a dry-run write: it "
                           "exists only once an earlier phase has created it")

    def roll(self, work: PhaseWork, step: Step) -> None:
        """Pods deleted one node at a time: never sent, only said."""
        assert self._on is not None
        before = self.projected
        self.projected = projection.after(before, step)
        self._on.waits += _waits(self, work, step, before, self.projected)

    def after(self, work: PhaseWork, step: Step, base: Snapshot | None, wrote: bool) -> None:
        assert self._on is not None
        if wrote:
            before = self._on.before if base is not None else self.projected
            self._on.waits += _waits(self, work, step, before, self.projected)

    def check(self, work: PhaseWork, step: Step) -> None:
        assert self._on is not None
        self._on.waits += [f"{r.name}: {r.detail}" for r in
                           g.failed(work.module.after_write(self.context(self.projected), step))]

    def settle_after_restore(self, state: State) -> None:
        if phases.selector_phase().NUMBER not in self.views:
            return  # no selector restored by this run
        self._settle.append(f"--settle {self.settings.settle:g}s after the selectors are "
                            "restored, before anything the old selectors need is removed")


class ServerDryRun(Project):
    """`Project`, and each write the API server can take now sent with `dryRun=All`."""

    def __init__(self, snapshot: Snapshot, catalog: Catalog, settings: RunSettings,
                 kube: Kube, say: Any) -> None:
        super().__init__(snapshot, catalog, settings)
        self.kube = kube
        self.say = say  # the listener's `message`

    def send(self, step: Step) -> None:
        sent = len(self.writes)
        super().send(step)
        if len(self.writes) > sent:
            executor.execute(step, self.kube, self.now.namespace, self.catalog, dry_run=True)
            self.say(f"dry run: {step.object} ({step.type}) accepted by the API server "
                     "(nothing persisted)")


def preview(backend: Project, state: State | None, report: PlanReport, upto: int, *,
            rollback: bool = False) -> Preview:
    """Run the one loop on a projecting back end: `apply --phase upto` (or `rollback`), as
    it would go, with `report` (the cluster as read) carrying the phases it shows."""
    walked = state or State(report.namespace)
    try:
        if rollback:
            Loop(backend, walked).rollback(upto)
        else:
            Loop(backend, walked).apply(upto)
    except Stopped:
        pass
    views = []
    for view in report.phases:
        asked = view.number >= upto if rollback else view.number <= upto
        if view.number in backend.views:
            views.append(backend.views[view.number])
        elif not rollback:
            views.append(unasked(backend, walked.phase(view.number), asked))
        elif asked and backend.stopped is not None:
            views.append(replace(view, preview=PhasePreview(NOT_REACHED, ())))
        else:
            views.append(view)
    return Preview(replace(report, phases=tuple(views),
                           warnings=merged(report.warnings, backend.warnings)),
                   tuple(backend.writes), tuple(backend.unsent), backend.refusal)


def _view(decision: Decision, changes: tuple[Change, ...], gates: Any, notes: list[str],
          blocked: str | None, outcome: str | None, waits: list[str] | None = None
          ) -> PhaseView:
    return PhaseView(decision.module.NUMBER, decision.module.NAME, decision.status, changes,
                     tuple(gates), tuple(notes), decision.record_error, blocked,
                     None if outcome is None else PhasePreview(outcome,
                                                               tuple(dict.fromkeys(waits or []))))


def unasked(b: Project, rec: PhaseRecord, asked: bool) -> PhaseView:
    """A phase past N (shown as the run's final report would show it), or one an earlier
    phase's refusal keeps the run from reaching."""
    module = phases.by_number(rec.number)
    decision = decide(module, rec, b.projected, b.catalog,
                      discover(b.now, b.catalog).components, b.settings.options)
    notes = [] if not asked else [f"not reached: phase {b.stopped} would stop the run first"]
    outcome = NOT_REACHED if asked else None
    if decision.status is PhaseStatus.COMPLETED or decision.plan is None:
        return _view(decision, (), decision.gates, notes, None, outcome)
    plan = decision.plan
    notes = [*notes, *plan.notes]
    if plan.blocked and plan.blocked not in notes:
        notes.append(plan.blocked)
    return _view(decision, changes_of(plan.steps), plan.gates, notes, plan.blocked, outcome)


def _live(snap: Snapshot, step: Step) -> Obj | None:
    source = snap.daemonsets if step.kind == kinds.DAEMONSET else snap.services
    found = source.get(step.name)
    return dict(found) if found is not None else None


def _waits(b: Project, work: PhaseWork, step: Step, before: Snapshot, after: Snapshot
           ) -> list[str]:
    """What the run would wait for after this step: only the run can show these."""
    out = []
    ds = before.daemonsets.get(step.rollout_of() or "")
    labels = ", ".join(f"{k}={v}" if v is not None else f"no {k}"
                       for k, v in step.pod_labels().items())
    if step.pod_by_pod and step.name in before.daemonsets:
        pods = [p for p in before.pods_of(step.name) if not p.deleting]
        out.append(f"DaemonSet/{step.name}'s {counted(len(pods), 'pod')} relabelled in place, "
                   "none restarted" if step.type == "relabel-pods" else
                   f"DaemonSet/{step.name}'s {counted(len(pods), 'old pod')} deleted one node at "
                   "a time, each after the previous node's new pod is Ready (--roll-on-delete)")
    elif ds is not None and o.update_strategy(ds) == "OnDelete":
        return []  # the template change rolls nothing (`afterwrite.wait`)
    elif ds is not None and step.rolls_pods():
        desired = g.rollout_counts(ds)[2]
        out.append(f"the rollout of DaemonSet/{step.name}: {counted(desired, 'pod')} replaced, "
                   f"at most {o.max_unavailable(ds, desired)} unavailable at a time")
    for r in work.module.after_write(b.context(after), step):
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
    """The no-loss gates the run checks after every write of the phase."""
    out = []
    for base in plan.guarded:
        budget = plan.tolerance.get(base.service, 0)
        where = " per node" if base.local else ""
        out.append(f"Service/{base.service} to keep its {base.total} ready endpoints{where} "
                   + (f"(at most {budget} missing while pods roll)" if budget
                      else "(none lost)"))
    return out
