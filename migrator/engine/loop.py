"""The one loop: the walk's decision per phase, then gate → write → record → gate, one step at a
time. What a step *does* is its back end's (Alembic runs the walk `upgrade` runs and lets
`as_sql` choose what a step does; Helm decides its dry run in one place, `DryRunStrategy`):

    Backend      the effects of the loop: `applying.Apply` writes, records and waits;
                 `projecting.Project` projects the cluster as it would be and writes nothing
                 (`report`), and `projecting.ServerDryRun` also sends each write with
                 `dryRun=All` (`--dry-run`: no waits, no state)
    Loop         the loop itself, the same for every back end: `apply(N)` runs phases 1..N
                 that do not hold, `rollback(N)` undoes phases down to N, newest first
    Run          one apply or rollback as `commands` builds it (the connection, namespace,
                 catalog, the run's cache, its state session, the clock, the listener, the
                 settings): passed down, never found by registry
    PhaseWork    the phase the loop works on: its module, record, plan, baselines, direction
    Applier      the apply back end as `afterwrite` and `ondelete` use it

So resume, skip-if-satisfied, the pre-gates that heal by themselves, the revisit of a write a
killed run made and the post-gates of steps already true are written once, here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from migrator import phases
from migrator.engine import walk
from migrator.engine.clock import Clock
from migrator.engine.informer import Informer
from migrator.engine.progress import Listener
from migrator.engine.state import PhaseRecord, RunSession, State
from migrator.engine.waiting import Waiter
from migrator.engine.walk import Action, Decision
from migrator.model import gates as g
from migrator.model.discovery import discover
from migrator.model.gates import GateKind, GateResult, ServiceBaseline
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import Step, from_record
from migrator.phases import Phase

if TYPE_CHECKING:
    from migrator.engine.state.document import StepRecord
    from migrator.kube.client import Kube

Obj = dict[str, Any]


@dataclass
class RunSettings:
    timeout: float = 600.0  # progress deadline: seconds a wait may go without any progress
    settle: float = 30.0  # seconds after a selector change before removing what it needed
    options: Options = field(default_factory=Options)


@dataclass(frozen=True)
class Run:
    """One apply or rollback: built once by `commands`, handed to the back end, and from it to
    every read (the cache), save (the session) and wait (the clock) of the run."""

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
    """One phase as the loop runs it: which way, and what its steps' waits hold it to (the
    no-loss baselines and the plan's tolerances)."""

    module: Phase
    rec: PhaseRecord
    plan: PhasePlan
    bases: tuple[ServiceBaseline, ...]
    direction: Direction
    # what the phase was decided on: its CRs, monitors and Leases serve every step's gates
    # (no step changes them); the namespace is read afresh for each (`fresh`)
    decided: Snapshot

    @property
    def rollback(self) -> bool:
        return self.direction is Direction.ROLLBACK

    @property
    def records(self) -> list[StepRecord]:
        """The step records of this direction: rollback keeps its own (`undo`)."""
        return self.rec.undo if self.rollback else self.rec.steps

    def mark(self, step: Step, status: str) -> None:
        self.rec.mark(step, status, undo=self.rollback)


class Backend(Protocol):
    """What a step does: the loop calls these and nothing else with an effect.

    snapshot / live     the cluster (as read, or as it would be) / the step's object now
    fresh               the namespace read again onto a base, its cluster-scoped objects kept
    stack               the stack running now (`changed`: not the completed phases' one)
    holds               a completed phase that still holds: left alone
    begin / start       a phase worked on: its retirements and plan / recorded as started
                        (baselines and originals before any write)
    refuse              a gate stops the run (apply: `GateFailed`; a projection: `Stopped`),
                        before `step` when one of its pre-gates (`gates`) refuses
    skip / write / roll the step already true / its write / pod by pod (`RollPods`)
    wait_pre            pre-gates that heal by themselves: waited for (or said), rest returned
    after / check       a step's post-gates (`wrote`: now, or by a run killed before them) /
                        those of a step already true (an operator's own rollout)
    finish              the phase completed (or rolled back)
    settle_after_restore  `--settle` after the selectors are restored
    """

    catalog: Catalog
    settings: RunSettings

    def snapshot(self) -> Snapshot: ...
    def fresh(self, base: Snapshot) -> Snapshot: ...
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
    """The phases' view of a snapshot (no recorded originals): what every back end plans and
    gates on."""
    return PlanContext(snap, catalog, discover(snap, catalog).components, options, {})


class Stopped(Exception):
    """A projected run stops at a gate here (the apply back end raises `GateFailed`)."""


class Loop:
    """The one loop over the phases of `state`, its effects through `backend`."""

    def __init__(self, backend: Backend, state: State) -> None:
        self.backend = backend
        self.state = state

    def apply(self, upto: int) -> None:
        """Phases 1..upto, each as the walk decides it (engine/walk.py)."""
        b, catalog = self.backend, self.backend.catalog
        snap = b.snapshot()
        live_stack = discover(snap, catalog).stack
        changed = self.state.stack_changed(live_stack)
        b.stack(self.state, live_stack, changed)
        for number in [n for n in phases.numbers() if n <= upto]:
            decision = walk.decide(phases.by_number(number), self.state.phase(number), snap,
                                   catalog, discover(snap, catalog).components,
                                   b.settings.options, new_stack=live_stack if changed else None)
            if decision.action is Action.HOLDS:
                b.holds(decision)
                continue
            self._phase(decision, Direction.FORWARD)
            snap = b.snapshot()

    def rollback(self, downto: int) -> None:
        """Phases downto.. undone, newest first; `--settle` after the selectors are restored,
        before anything the old selectors needed is removed."""
        b, catalog = self.backend, self.backend.catalog
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
            self._phase(walk.undo(phases.by_number(number), rec, snap, catalog,
                                  discover(snap, catalog).components, b.settings.options),
                        Direction.ROLLBACK)
            snap = b.snapshot()

    def _phase(self, decision: Decision, direction: Direction) -> None:
        b = self.backend
        plan, rec = decision.plan, decision.record
        assert plan is not None and rec is not None
        b.begin(decision, direction)
        if plan.refusal:
            b.refuse(rec, plan.refusal, plan.fix or _refusal_hint(plan))
        work = b.start(decision, direction)
        revisit = self._revisit(work)
        again = {s.id for s in revisit}
        for step in revisit + list(plan.steps):  # one step (inline: the write's stack is short)
            if step.pod_by_pod:
                b.roll(work, step)
                continue
            base: Snapshot | None = None
            if step.satisfied(b.live(step)):  # resume: no double write
                b.skip(work, step)
            else:
                base = b.fresh(work.decided)
                pre = list(work.module.before_write(
                    context(b.catalog, b.settings.options, base), step))
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
        """Steps this phase wrote (or may have: intent) that the plan leaves out because the
        live object already shows their effect. A run killed between such a write and the end
        of its gates (rollout, endpoints) must still mark it done and wait for those gates
        before going on; they come first, as they did before the kill."""
        planned = {s.id for s in work.plan.steps}
        out: list[Step] = []
        for r in work.records:
            if r.status not in ("intent", "done") or r.id in planned:
                continue
            step = from_record(r.step)
            if step.satisfied(self.backend.live(step)):
                out.append(step)
        return out


def _refusal_hint(plan: PhasePlan) -> str:
    """A gate of the plan refuses before the phase's first write: where the runbook says what
    that gate means and what to do, by its name."""
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


class Applier(Protocol):
    """The apply back end as `afterwrite` and `ondelete` use it (`applying.Apply` is it): the
    snapshot from the run's cache (as new as the tool's last write), `fresh` (what a step
    changes read again onto `base`), the phases' `context`, `quiet` (the cache stops following
    a rolling DaemonSet), `save` (the state, shielded from signals) and `refuse` (the phase
    recorded failed, `GateFailed`)."""

    kube: Kube
    namespace: str
    catalog: Catalog
    settings: RunSettings
    clock: Clock
    listener: Listener
    waiter: Waiter
    result: Tally

    def snapshot(self) -> Snapshot: ...
    def fresh(self, base: Snapshot) -> Snapshot: ...
    def context(self, snap: Snapshot) -> PlanContext: ...
    def quiet(self, daemonset: str) -> contextlib.AbstractContextManager[None]: ...
    def save(self) -> None: ...
    def refuse(self, rec: PhaseRecord, message: str, hint: str, step: Step | None = None,
               gates: list[GateResult] | None = None) -> NoReturn: ...
