"""The loop's back ends that persist nothing: `Project` runs each phase on the cluster as the
earlier writes would leave it (model/projection.py); `ServerDryRun` (`--dry-run`) also sends each
write with `dryRun=All`; `Report` is every command's view of each phase (`walked`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

from migrator import phases
from migrator.engine import afterwrite, executor, loop
from migrator.engine.loop import Decision, Direction, Loop, PhaseWork, RunSettings, Stopped
from migrator.engine.progress import merged
from migrator.engine.reports import PhasePreview, PhaseView, PlanReport
from migrator.engine.state import PhaseRecord, PhaseStatus, State
from migrator.model import gates as g
from migrator.model import kinds, projection
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.retiring import HANDED_OVER
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import Step

if TYPE_CHECKING:
    from migrator.kube.client import Kube

WOULD_RUN = "would-run"  # the run would plan and write this phase (or only wait, if nothing)
WOULD_ROLL_BACK = "would-roll-back"  # `rollback`: the run would undo what this phase wrote
HOLDS = "holds"  # completed, and it still holds: the run would leave it alone
WOULD_STOP = "would-stop"  # a gate refuses: the run would stop before this phase's write
NOT_REACHED = "not-reached"  # an earlier phase would stop the run first
OWNED_AFTER_SWITCH = (
    "--include-operator-owned changes nothing now: phase 3 is completed, so {services} stay "
    "as they are; to switch them too, run `dcgm-migrate rollback --phase 3`, then "
    "`dcgm-migrate apply --phase 3 --include-operator-owned`"
)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Preview:
    """What a projected run would do: the report (phases carry `preview`) and its writes."""

    report: PlanReport
    writes: tuple[Step, ...]
    unsent: tuple[str, ...]  # steps whose object exists only after an earlier phase
    refusal: str | None  # what would stop the run, or None


@dataclass
class _Phase:  # what the projection collects for the phase the loop is on
    decision: Decision
    gates: dict[str, GateResult]
    notes: list[str]
    waits: list[str]
    before: Snapshot


class Project:
    """The report back end: the loop's writes projected onto the cluster, nothing written."""

    def __init__(self, snapshot: Snapshot, catalog: Catalog, settings: RunSettings) -> None:
        self.catalog, self.settings = catalog, settings
        self.now = self.projected = snapshot  # as read / as the writes so far would leave it
        self.base = self.context(snapshot)
        self.views: dict[int, PhaseView] = {}
        self.writes: list[Step] = []
        self.unsent: list[str] = []
        self.warnings: list[str] = []
        self.refusal: str | None = None
        self.stopped: int | None = None
        self._on: _Phase | None = None
        self._settle: list[str] = []

    def snapshot(self) -> Snapshot:
        return self.projected

    def fresh(self, base: Snapshot) -> Snapshot:
        return self.projected

    def live(self, step: Step) -> Obj | None:
        return _live(self.projected, step)

    def context(self, snap: Snapshot) -> PlanContext:
        return loop.context(self.catalog, self.settings.options, snap)

    def decide(self, rec: PhaseRecord) -> Decision:  # components as read
        return loop.decide(phases.by_number(rec.number), rec, replace(self.base,
                                                                  snapshot=self.projected))

    def stack(self, state: State, live: str, changed: bool) -> None:
        """The report says it (engine/assemble.py)."""

    def holds(self, decision: Decision) -> None:
        self.views[decision.module.NUMBER] = _view(decision, decision.gates, [], HOLDS)

    def begin(self, decision: Decision, direction: Direction) -> None:
        plan = decision.plan
        assert plan is not None
        notes = list(plan.notes)
        if decision.action is loop.Action.RERUN:
            reason = (f"it no longer holds ({g.describe(decision.drift)})" if decision.drift
                      else decision.reason.replace("stack changed", "the stack changed"))
            notes.insert(0, f"recorded completed, but {reason}: the run would run it again")
        if direction is Direction.FORWARD:
            self.warnings += [f"the run would retire a recorded step: {r.reason}"
                              for r in decision.retire]
        else:
            self.warnings += [f"phase {decision.module.NUMBER} rollback: {w}"
                              for w in plan.warnings]
        self._open(decision, plan, notes)

    def _open(self, decision: Decision, plan: PhasePlan, notes: list[str]) -> None:
        self._on = _Phase(decision, {r.name: r for r in plan.gates}, _blocked(plan, notes),
                          self._settle, self.projected)
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
        plan = decision.plan
        assert plan is not None
        return PhaseWork(decision.module, decision.record, plan, tuple(plan.guarded), direction,
                         decision.ctx.snapshot)

    def finish(self, work: PhaseWork) -> None:
        assert self._on is not None
        if work.plan.steps or work.plan.checks:
            self._on.waits += afterwrite.baselines_said(work.plan)
        self._close(WOULD_ROLL_BACK if work.rollback else WOULD_RUN)

    def _close(self, outcome: str | None) -> None:
        on = self._on
        assert on is not None and on.decision.plan is not None
        self.views[on.decision.module.NUMBER] = _view(
            on.decision, on.gates.values(), on.notes, outcome, on.waits, on.decision.plan)
        self._on = None

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

    def send(self, step: Step) -> bool:
        """A dry-run write when the API server can take it now (its object exists or it
        creates it); whether it is one."""
        if step.creates or _live(self.now, step) is not None:
            self.writes.append(step)
            return True
        self.unsent.append(f"{step.object} ({step.type}) not sent as a dry-run write: it "
                           "exists only once an earlier phase has created it")
        return False

    def roll(self, work: PhaseWork, step: Step) -> None:
        """Pods deleted one node at a time: never sent, only said."""
        before = self.projected
        self.projected = projection.after(before, step)
        self._said(work, step, before)

    def after(self, work: PhaseWork, step: Step, base: Snapshot | None, wrote: bool) -> None:
        assert self._on is not None
        if wrote:
            self._said(work, step, self._on.before if base is not None else self.projected)

    def _said(self, work: PhaseWork, step: Step, before: Snapshot) -> None:
        assert self._on is not None
        self._on.waits += afterwrite.said(self.context(self.projected), work, step, before,
                                          self.projected)

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
                 kube: Kube, say: Callable[[str], None]) -> None:
        super().__init__(snapshot, catalog, settings)
        self.kube, self.say = kube, say  # `say`: the listener's `message`

    def send(self, step: Step) -> bool:
        if not super().send(step):
            return False
        executor.execute(step, self.kube, self.now.namespace, self.catalog, dry_run=True)
        self.say(f"dry run: {step.object} ({step.type}) accepted by the API server "
                 "(nothing persisted)")
        return True


class Report(Project):
    """Each phase as reports show it: a completed one (even re-run) judged on the cluster as it
    is, the others' plans and gates."""

    def __init__(self, snapshot: Snapshot, catalog: Catalog, options: Options) -> None:
        super().__init__(snapshot, catalog, RunSettings(options=options))
        self.decisions: dict[int, Decision] = {}

    def _judged(self, decision: Decision) -> PhaseView:
        """A completed phase: its verification on the cluster as it is now."""
        module, rec = decision.module, decision.record
        if self.projected is not self.now:
            decision = loop.decide(module, rec, self.base)
        again = module.plan(replace(self.base, snapshot=self.projected))
        self.warnings += again.warnings  # e.g. operator-owned, still true
        notes = [r.reason for r in decision.retire if r.status == HANDED_OVER]
        if module.SWITCHES_SELECTORS and self.settings.options.include_operator_owned and \
                again.steps:
            notes.append(OWNED_AFTER_SWITCH.format(services=", ".join(
                s.object for s in again.steps)))
            self.warnings.append(notes[-1])
        return _view(decision, decision.gates, notes, None)

    def holds(self, decision: Decision) -> None:
        self.decisions[decision.module.NUMBER] = decision
        self.views[decision.module.NUMBER] = self._judged(decision)

    def begin(self, decision: Decision, direction: Direction) -> None:
        number = decision.module.NUMBER
        self.decisions[number] = decision
        plan = decision.plan
        assert plan is not None
        if decision.action is loop.Action.RERUN:
            self.views[number] = self._judged(decision)
        else:
            self.warnings += plan.warnings
        notes = list(plan.notes)
        earlier = [n for n, v in self.views.items() if v.status is not PhaseStatus.COMPLETED]
        if earlier and any(not r.ok for r in plan.gates):
            notes.append("gates show the cluster as the run would meet it after phase "
                         f"{', '.join(map(str, earlier))}")
        self._open(decision, plan, notes)

    def write(self, work: PhaseWork, step: Step, pre: list[GateResult]) -> None:
        super().write(work, step, [])  # the report shows the plan's gates only

    def after(self, work: PhaseWork, step: Step, base: Snapshot | None, wrote: bool) -> None:
        """The report shows no waits."""

    def check(self, work: PhaseWork, step: Step) -> None:
        """The report shows no waits."""

    def _close(self, outcome: str | None) -> None:
        assert self._on is not None
        if self._on.decision.module.NUMBER in self.views:  # a re-run shows its verification
            self._on = None
        else:
            super()._close(None)


def walked(snapshot: Snapshot, catalog: Catalog, state: State | None, options: Options
           ) -> tuple[tuple[PhaseView, ...], dict[int, Decision], list[str]]:
    """Every phase through the loop on the report back end: views, decisions, warnings. Past a
    gate that would stop the run, phases are shown as planned on the cluster as it would be."""
    backend = Report(snapshot, catalog, options)
    walking = state or State(snapshot.namespace)
    with contextlib.suppress(Stopped):
        Loop(backend, walking).apply(max(phases.numbers()))
    for number in (n for n in phases.numbers() if n not in backend.views):
        decision = backend.decisions[number] = backend.decide(walking.phase(number))
        if decision.plan is None:
            backend.holds(decision)
            continue
        backend.warnings += decision.plan.warnings
        backend.views[number] = unasked(backend, decision, False)
    return (tuple(backend.views[n] for n in phases.numbers()), backend.decisions,
            backend.warnings)


def preview(backend: Project, state: State | None, report: PlanReport, upto: int, *,
            rollback: bool = False) -> Preview:
    """`apply --phase upto` (or `rollback`) as it would go, on `report` (the cluster as read)."""
    walked = state or State(report.namespace)
    run = Loop(backend, walked)
    with contextlib.suppress(Stopped):
        (run.rollback if rollback else run.apply)(upto)
    views = []
    for view in report.phases:
        asked = view.number >= upto if rollback else view.number <= upto
        if view.number in backend.views:
            views.append(backend.views[view.number])
        elif not rollback:
            views.append(unasked(backend, backend.decide(walked.phase(view.number)), asked))
        elif asked and backend.stopped is not None:
            views.append(replace(view, preview=PhasePreview(NOT_REACHED, ())))
        else:
            views.append(view)
    return Preview(replace(report, phases=tuple(views),
                           warnings=merged(report.warnings, backend.warnings)),
                   tuple(backend.writes), tuple(backend.unsent), backend.refusal)


def _blocked(plan: PhasePlan, notes: list[str]) -> list[str]:
    """`notes`, then why the plan is blocked (once)."""
    return [*notes, plan.blocked] if plan.blocked and plan.blocked not in notes else notes


def _view(decision: Decision, gates: Iterable[GateResult], notes: list[str], outcome: str | None,
          waits: list[str] | None = None, plan: PhasePlan | None = None) -> PhaseView:
    """`plan`: what the phase would change, and why it is blocked."""
    return PhaseView(decision.module.NUMBER, decision.module.NAME, decision.record.status,
                     tuple(c for s in plan.steps for c in s.changes()) if plan is not None else (),
                     tuple(gates), tuple(notes), decision.record.error,
                     plan.blocked if plan is not None else None,
                     None if outcome is None else PhasePreview(outcome,
                                                               tuple(dict.fromkeys(waits or []))))


def unasked(b: Project, decision: Decision, asked: bool) -> PhaseView:
    """A phase past N, or one an earlier phase's refusal keeps the run from reaching."""
    notes = [] if not asked else [f"not reached: phase {b.stopped} would stop the run first"]
    outcome = NOT_REACHED if asked else None
    plan = decision.plan
    if decision.record.status is PhaseStatus.COMPLETED or plan is None:
        return _view(decision, decision.gates, notes, outcome)
    return _view(decision, plan.gates, _blocked(plan, [*notes, *plan.notes]), outcome, plan=plan)


def _live(snap: Snapshot, step: Step) -> Obj | None:
    source = snap.daemonsets if step.kind == kinds.DAEMONSET else snap.services
    found = source.get(step.name)
    return dict(found) if found is not None else None
