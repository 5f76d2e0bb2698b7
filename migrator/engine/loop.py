"""The one loop: the walk's pure decision per phase (`decide`, `undo`), then gate → write →
record → gate, one step at a time, through a back end (`applying.Apply`, or `projecting`'s,
which persist nothing). Resume, skip-if-satisfied, self-healing pre-gates are written once."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from migrator import phases
from migrator.engine.clock import Clock
from migrator.engine.informer import Informer
from migrator.engine.progress import Listener
from migrator.engine.state import PhaseRecord, PhaseStatus, RunSession, State
from migrator.engine.waiting import Waiter
from migrator.model import gates as g
from migrator.model.discovery import discover
from migrator.model.gates import GateKind, GateResult, ServiceBaseline
from migrator.model.kinds import Kind
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.retiring import HANDED_OVER, reasked, retired
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import Step, from_record
from migrator.phases import Phase

if TYPE_CHECKING:
    from migrator.engine.state.document import StepRecord
    from migrator.kube.client import Kube

Obj = dict[str, Any]


class Action(Enum):
    HOLDS = "holds"  # completed, and it still holds: left alone
    RUN = "run"  # pending or rolled back: planned from scratch
    RESUME = "resume"  # in progress or failed: re-planned from the recorded originals
    RERUN = "rerun"  # completed, but drifted or planned for another stack: run again
    UNDO = "undo"  # rolled back from what it wrote


@dataclass(frozen=True)
class Retirement:
    """A recorded step the cluster no longer describes, kept with `status` (model/retiring.py)."""

    step_id: str
    status: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """What a run does with one phase, and the context it decided in."""

    module: Phase
    record: PhaseRecord
    action: Action
    ctx: PlanContext  # the cluster and the originals the plan (or verification) used
    gates: tuple[GateResult, ...]  # completed: its verification now; else the plan's gates
    plan: PhasePlan | None  # what the run writes (None when it holds)
    retire: tuple[Retirement, ...] = ()  # recorded steps the run retires before planning
    reason: str = ""  # RERUN: why the phase runs again

    @property
    def drift(self) -> list[GateResult]:
        """A completed phase's failed verification gates."""
        return g.failed(self.gates) if self.record.status is PhaseStatus.COMPLETED else []


def _retirements(ctx: PlanContext, rec: PhaseRecord, only: str | None
                 ) -> tuple[tuple[Retirement, ...], set[str]]:
    """The recorded steps retired now (`only`: of that status), and their ids."""
    found = [(s.id, retired(ctx, s)) for s in rec.done_steps()]
    out = tuple(Retirement(step_id, *why) for step_id, why in found
                if why is not None and (only is None or why[0] == only))
    return out, {r.step_id for r in out}


def _replanned(ctx: PlanContext, rec: PhaseRecord) -> tuple[PlanContext, tuple[Retirement, ...]]:
    """The context with the recorded originals, less those of the steps retired now."""
    retire, gone = _retirements(ctx, rec, None)
    return replace(ctx, recorded={k: v for k, v in rec.recorded().items()
                                  if k not in gone}), retire


def _kept(ctx: PlanContext, rec: PhaseRecord) -> tuple[list[Step], tuple[Retirement, ...]]:
    """What the phase wrote, less what an operator release manages now (handed over)."""
    handed, gone = _retirements(ctx, rec, HANDED_OVER)
    return [s for s in rec.done_steps() if s.id not in gone], handed


def decide(module: Phase, rec: PhaseRecord, ctx: PlanContext, *,
           new_stack: str | None = None) -> Decision:
    """One phase of `apply` on `ctx` (no originals); `new_stack`: set when the stack changed
    (every completed phase runs again)."""
    if rec.status is PhaseStatus.COMPLETED:
        kept, handed = _kept(ctx, rec)
        gates = tuple(module.verify(ctx, kept) + reasked(rec.reverted_steps(), ctx.options))
        drift = g.failed(gates)
        if not drift and new_stack is None:
            return Decision(module, rec, Action.HOLDS, ctx, gates, None, handed)
        reason = g.describe(drift) if drift else f"stack changed to {new_stack}"
        plan_ctx, retire = _replanned(ctx, rec)
        return Decision(module, rec, Action.RERUN, plan_ctx, gates, module.plan(plan_ctx),
                        retire, reason)
    if rec.status.unfinished:
        plan_ctx, retire = _replanned(ctx, rec)
        plan = module.plan(plan_ctx)
        return Decision(module, rec, Action.RESUME, plan_ctx, tuple(plan.gates), plan, retire)
    plan = module.plan(ctx)
    return Decision(module, rec, Action.RUN, ctx, tuple(plan.gates), plan)


def undo(module: Phase, rec: PhaseRecord, ctx: PlanContext) -> Decision:
    """One phase of `rollback`: what it wrote undone, less what was handed over."""
    wrote, handed = _kept(ctx, rec)
    plan = module.rollback(ctx, wrote)
    return Decision(module, rec, Action.UNDO, ctx, tuple(plan.gates), plan, handed)


@dataclass
class RunSettings:
    timeout: float = 600.0  # progress deadline: seconds a wait may go without any progress
    settle: float = 30.0  # seconds after a selector change before removing what it needed
    options: Options = field(default_factory=Options)


@dataclass(frozen=True)
class Run:
    """One apply or rollback as `commands` builds it, passed down to every read, save, wait."""

    kube: Kube
    namespace: str
    catalog: Catalog
    cache: Informer | None  # the run's cache (engine/informer.py); None: read the API server
    session: RunSession  # the lock, the state document's saves, the heartbeat
    clock: Clock
    listener: Listener
    settings: RunSettings = field(default_factory=RunSettings)


@dataclass
class Tally:
    """What the apply back end has done so far: the report's `RunOutcome` is built from it."""

    writes: int = 0
    lowest: dict[str, tuple[int, int]] = field(default_factory=dict)  # svc → (lowest, baseline)
    notes: list[str] = field(default_factory=list)  # what happened that did not stop the run


class Direction(Enum):
    FORWARD = "forward"  # `apply`: the phase's plan, recorded in the record's steps
    ROLLBACK = "rollback"  # `rollback`: its inverse, progress recorded in the record's undo


@dataclass(frozen=True)
class PhaseWork:
    """One phase as the loop runs it: which way, and its no-loss baselines."""

    module: Phase
    rec: PhaseRecord
    plan: PhasePlan
    bases: tuple[ServiceBaseline, ...]
    direction: Direction
    decided: Snapshot  # what the phase was decided on: its CRs serve every step's gates

    @property
    def rollback(self) -> bool:
        return self.direction is Direction.ROLLBACK

    @property
    def records(self) -> list[StepRecord]:  # rollback keeps its own (`undo`)
        return self.rec.undo if self.rollback else self.rec.steps

    def mark(self, step: Step, status: str) -> None:
        self.rec.mark(step, status, undo=self.rollback)


class Backend(Protocol):
    """Every effect of the loop. `refuse` stops the run; `after`/`check` wait for the post-gates
    of a step written (`wrote`: now, or by a killed run) / already true."""

    catalog: Catalog
    settings: RunSettings

    def snapshot(self) -> Snapshot: ...
    def fresh(self, base: Snapshot) -> Snapshot: ...
    def context(self, snap: Snapshot) -> PlanContext: ...
    def live(self, step: Step) -> Obj | None: ...
    def stack(self, state: State, live: str, changed: bool) -> None: ...
    def holds(self, decision: Decision) -> None: ...
    def begin(self, decision: Decision, direction: Direction) -> None: ...
    def start(self, decision: Decision, direction: Direction) -> PhaseWork: ...
    def refuse(self, rec: PhaseRecord, message: str, hint: str, step: Step | None = None,
               gates: list[GateResult] | None = None) -> NoReturn: ...
    def skip(self, work: PhaseWork, step: Step) -> None: ...
    def wait_pre(self, work: PhaseWork, step: Step, base: Snapshot,
                 pre: list[GateResult]) -> list[GateResult]: ...
    def write(self, work: PhaseWork, step: Step, pre: list[GateResult]) -> None: ...
    def roll(self, work: PhaseWork, step: Step) -> None: ...
    def after(self, work: PhaseWork, step: Step, base: Snapshot | None,
              wrote: bool) -> None: ...
    def check(self, work: PhaseWork, step: Step) -> None: ...
    def finish(self, work: PhaseWork) -> None: ...
    def settle_after_restore(self, state: State) -> None: ...


def context(catalog: Catalog, options: Options, snap: Snapshot) -> PlanContext:
    """The phases' view of a snapshot (no recorded originals)."""
    return PlanContext(snap, catalog, discover(snap, catalog).components, options, {})


class Stopped(Exception):
    """A projected run stops at a gate here (the apply back end raises `GateFailed`)."""


class Loop:
    """The one loop over the phases of `state`, its effects through `backend`."""

    def __init__(self, backend: Backend, state: State) -> None:
        self.backend = backend
        self.state = state

    def apply(self, upto: int) -> None:
        b = self.backend
        snap = b.snapshot()
        live_stack = discover(snap, b.catalog).stack
        changed = self.state.stack_changed(live_stack)
        b.stack(self.state, live_stack, changed)
        for number in [n for n in phases.numbers() if n <= upto]:
            decision = decide(phases.by_number(number), self.state.phase(number),
                              b.context(snap), new_stack=live_stack if changed else None)
            if decision.action is Action.HOLDS:
                b.holds(decision)
                continue
            self._phase(decision, Direction.FORWARD)
            snap = b.snapshot()

    def rollback(self, downto: int) -> None:
        """Newest first; `--settle` once the selectors are restored."""
        b = self.backend
        snap = b.snapshot()
        settled = False
        switching = phases.selector_phase().NUMBER
        for number in sorted(phases.numbers(), reverse=True):
            rec = self.state.phase(number)
            if number < downto or not rec.status.applied:
                continue
            if number < switching and not settled:
                b.settle_after_restore(self.state)
                settled = True
                snap = b.snapshot()
            self._phase(undo(phases.by_number(number), rec, b.context(snap)),
                        Direction.ROLLBACK)
            snap = b.snapshot()

    def _phase(self, decision: Decision, direction: Direction) -> None:
        b = self.backend
        plan, rec = decision.plan, decision.record
        assert plan is not None
        b.begin(decision, direction)
        if plan.refusal:
            b.refuse(rec, plan.refusal, plan.fix or _refusal_hint(plan))
        work = b.start(decision, direction)
        revisit = self._revisit(work)
        again = {s.id for s in revisit}
        for step in revisit + list(plan.steps):  # inline: the write's stack is short
            if step.pod_by_pod:
                b.roll(work, step)
                continue
            base: Snapshot | None = None
            if step.satisfied(b.live(step)):  # resume: no double write
                b.skip(work, step)
            else:
                base = b.fresh(work.decided)
                pre = list(work.module.before_write(b.context(base), step))
                if g.failed(pre) and all(r.wait for r in g.failed(pre)):
                    pre = b.wait_pre(work, step, base, pre)
                if g.failed(pre):
                    b.refuse(work.rec, f"{step.object}: {g.describe(pre)}",
                             _hint_for(work, step, g.failed(pre)), step, pre)
                b.write(work, step, pre)
            b.after(work, step, base, base is not None or step.id in again)
        if not work.rollback:
            for step in plan.checks:  # no write needed: still gated
                if step.id not in again and b.live(step) is not None:
                    b.check(work, step)
        b.finish(work)

    def _revisit(self, work: PhaseWork) -> list[Step]:
        """Steps written (or intended) that the plan leaves out as already true: a killed run's
        write still gets its post-gates, first."""
        planned = {s.id for s in work.plan.steps}
        wrote = [from_record(r.step) for r in work.records
                 if r.status in ("intent", "done") and r.id not in planned]
        return [s for s in wrote if s.satisfied(self.backend.live(s))]


def _refusal_hint(plan: PhasePlan) -> str:
    failed = [r.name.partition("/")[0] for r in plan.gates if not r.ok]
    row = f"its {failed[0]} row" if failed else "the gate's row"
    return (f"nothing was written; fix what the gate names ({row} in docs/runbook.md, 'Gate "
            "failures', says how), then run the same command again")


def _hint_for(work: PhaseWork, step: Step, failed: list[GateResult]) -> str:
    if any(r.kind is GateKind.CHANGED_MEANWHILE for r in failed):
        return ("someone else (often an operator reconcile) changed this Service since it was "
                "read; nothing was written to it: run `dcgm-migrate status` to see its owner and "
                "selector, then the same command again")
    return step.stop_hint(work.rollback)


class Applier(Backend, Protocol):
    """The apply back end (`applying.Apply`) as `afterwrite` and `inplace` use it."""

    kube: Kube
    namespace: str
    listener: Listener
    waiter: Waiter
    result: Tally

    def quiet(self, daemonset: str) -> contextlib.AbstractContextManager[None]: ...
    def with_nodes(self, snap: Snapshot) -> Snapshot: ...
    def record(self, work: PhaseWork, step: Step, status: str, *,
               later: bool = False) -> None: ...
    def flush(self) -> None: ...
    def until(self, check: Callable[[], list[GateResult]], wake_kind: Kind = ...,
              fatal: Callable[[list[GateResult]], bool] | None = None,
              patience: float | None = None) -> list[GateResult]: ...
