"""The one loop: gate → write → record → gate, one step at a time, state saved after each.

`Runner.apply(N)` runs phases 1..N that are not completed (re-running a completed phase whose
effect drifted away); `Runner.rollback(N)` undoes phases down to N, newest first, from what the
state recorded. A run killed at any instant resumes: intent is recorded before each write and
every step knows whether the live object already shows its effect.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NoReturn

from migrator import phases
from migrator.engine import afterwrite, executor, interrupts, ondelete, walk
from migrator.engine.clock import Clock
from migrator.engine.loop import Direction, PhaseWork, Run, RunResult, RunSettings
from migrator.engine.progress import Listener, PhaseEvent, StepEvent
from migrator.engine.reads import narrow, read_snapshot
from migrator.engine.state import PhaseRecord, PhaseStatus, State
from migrator.engine.waiting import Waiter
from migrator.engine.walk import Action
from migrator.errors import GateFailed
from migrator.model import gates as g
from migrator.model import kinds
from migrator.model.discovery import discover
from migrator.model.gates import GateKind, GateResult, ServiceBaseline
from migrator.model.planning import PlanContext
from migrator.model.retiring import HANDED_OVER
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component
from migrator.model.steps import Step, from_record
from migrator.phases import Phase

if TYPE_CHECKING:
    from migrator.kube.client import Kube

__all__ = ["Run", "RunResult", "RunSettings", "Runner"]


class Runner:
    """The run's loop over the `Run` that `commands` built: drives the phases, and is the
    `loop.Loop` that `afterwrite` and `ondelete` work through."""

    def __init__(self, run: Run, state: State) -> None:
        self.run = run
        self.state = state
        # What `Loop` promises, straight from the one Run.
        self.kube: Kube = run.kube
        self.namespace: str = run.namespace
        self.catalog: Catalog = run.catalog
        self.settings: RunSettings = run.settings
        self.clock: Clock = run.clock
        self.listener: Listener = run.listener
        self.waiter = Waiter(run.kube, run.namespace, run.clock, run.session.heartbeat)
        self.result = RunResult()
        self._target = 0  # the N of `apply --phase N` / `rollback --phase N`, for the history

    # ---- reads & context -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The namespace as the run's cache (engine/informer.py, opened by `commands`) holds
        it: at least as new as the tool's own last write, so no read is ever reused stale."""
        return read_snapshot(self.kube, self.namespace, self.catalog, cache=self.run.cache,
                             clock=self.clock)

    def _components(self, snap: Snapshot) -> tuple[Component, ...]:
        return discover(snap, self.catalog).components

    def context(self, snap: Snapshot, recorded: dict[str, Any] | None = None) -> PlanContext:
        return PlanContext(snap, self.catalog, self._components(snap), self.settings.options,
                           recorded or {})

    def fresh(self, base: Snapshot) -> Snapshot:
        """The DaemonSets, Services, pods and endpoints read again; the base's CRs and
        ServiceMonitors kept (no step changes them)."""
        names = [c.daemonset for c in self.catalog.components]
        return narrow(self.kube, base, self.catalog, daemonsets=names, cache=self.run.cache)

    def quiet(self, daemonset: str) -> contextlib.AbstractContextManager[None]:
        """The cache stops following what this DaemonSet's rollout churns until it is over
        (`Informer.quiet`); nothing reads it meanwhile."""
        cache = self.run.cache
        comp = next((c for c in self.catalog.components if c.daemonset == daemonset), None)
        if cache is None or comp is None:
            return contextlib.nullcontext()
        return cache.quiet(comp.app_label)

    def save(self) -> None:
        with interrupts.shielded():  # a state write in flight finishes before a signal stops us
            self.run.session.save(self.state)

    # ---- apply -----------------------------------------------------------------------------

    def apply(self, upto: int) -> RunResult:
        self._target = upto
        snap = self.snapshot()
        live_stack = discover(snap, self.catalog).stack
        changed = self.state.stack_changed(live_stack)
        if changed:
            self.listener.warning(f"the GPU Operator stack changed from {self.state.stack} "
                                  f"(recorded) to {live_stack}: completed phases are "
                                  f"re-planned for {live_stack}")
            self.state.log("stack-changed", before=self.state.stack, after=live_stack)
        self.state.stack = live_stack
        for number in range(1, upto + 1):
            module = phases.by_number(number)
            rec = self.state.phase(number)
            decision = walk.decide(module, rec, snap, self.catalog, self._components(snap),
                                   self.settings.options,
                                   new_stack=live_stack if changed else None)
            if decision.action is Action.HOLDS:
                if self._retire(rec, decision):  # handed over: recorded so at once
                    self.save()
                self.listener.phase(PhaseEvent(number, module.NAME,
                                               PhaseStatus.COMPLETED.value,
                                               message="still holds"))
                continue
            if decision.action is Action.RERUN:
                self.listener.phase(PhaseEvent(number, module.NAME, "drifted",
                                               gates=tuple(decision.drift),
                                               message=decision.reason))
                self.state.log("drift", phase=number, detail=decision.reason)
                rec.status, rec.baselines = PhaseStatus.IN_PROGRESS, []
            self._run_phase(decision, Direction.FORWARD)
            snap = self.snapshot()
        return self.result

    def _run_phase(self, decision: walk.Decision, direction: Direction) -> None:
        """Run the walk's decision for one phase: retire what it says, record the baselines
        and originals, then its steps one at a time."""
        module, plan = decision.module, decision.plan
        rec = decision.record
        assert rec is not None and plan is not None
        rollback = direction is Direction.ROLLBACK
        resuming = decision.action in (Action.RESUME, Action.RERUN)
        self._retire(rec, decision)  # before anything: no stale originals, nothing handed over
        if rollback:
            self._say_handed_over(rec)
        self.listener.phase(PhaseEvent(rec.number, module.NAME, "planning", plan))
        if rollback:
            for warning in plan.warnings:
                self.listener.warning(f"phase {rec.number} rollback: {warning}")
        if plan.refusal:
            self.fail(rec, plan.refusal, "nothing was written; docs/runbook.md explains this "
                      "gate and what to do")
        if not rec.baselines or rollback:
            rec.baselines = [b.as_dict() for b in plan.guarded]
        if rollback:
            rec.status = PhaseStatus.IN_PROGRESS
        else:
            rec.status, rec.error = PhaseStatus.IN_PROGRESS, None
            rec.started = rec.started if resuming else self.state.stamp()
        # `target`: the command's --phase, so `status` can name the exact command that resumes
        self.state.log("rollback-start" if rollback else "phase-start", phase=rec.number,
                       target=self._target)
        self.save()  # baselines and originals are in the state before any write
        run = PhaseWork(module, rec, plan,
                       tuple(ServiceBaseline.from_dict(b) for b in rec.baselines), direction)
        revisit = self._revisit(run)
        for step in revisit + list(plan.steps):
            self._run_step(run, step)
        self._check_settled(run, {s.id for s in revisit})
        if rollback:
            rec.status, rec.finished = PhaseStatus.ROLLED_BACK, self.state.stamp()
            rec.steps, rec.undo, rec.baselines, rec.wrote_labels = [], [], [], False
        else:
            rec.status, rec.finished = PhaseStatus.COMPLETED, self.state.stamp()
            # The baseline is spent: a drifted phase and a rollback record their own. Kept, a
            # per-node map per phase would grow every later save (and the 1 MiB ConfigMap).
            rec.baselines = []
        self.state.log(rec.status.value, phase=rec.number)
        self.save()
        self.listener.phase(PhaseEvent(rec.number, module.NAME, rec.status.value, plan))

    def _revisit(self, run: PhaseWork) -> list[Step]:
        """Steps this phase wrote (or may have: intent) that the plan leaves out because the
        live object already shows their effect. A run killed between such a write and the end
        of its gates (rollout, endpoints) must still mark it done and wait for those gates
        before going on; they come first, as they did before the kill."""
        planned = {s.id for s in run.plan.steps}
        out: list[Step] = []
        for r in run.records:
            if r.status not in ("intent", "done") or r.id in planned:
                continue
            step = from_record(r.step)
            if step.satisfied(self._live(step)):
                out.append(step)
        return out

    def _retire(self, rec: PhaseRecord, decision: walk.Decision) -> bool:
        """Record the walk's retirements (model/retiring.py): each warned and logged, kept
        for the record, no longer used as an original. True if it retired any."""
        statuses = {r.step_id: r for r in decision.retire}
        changed = False
        for r in rec.steps:
            found = statuses.get(r.id)
            if found is None or r.status not in ("intent", "done"):
                continue
            r.status = found.status
            self.state.log("retired", phase=rec.number, step=r.id, reason=found.reason)
            self.listener.warning(found.reason)
            changed = True
        return changed

    def _say_handed_over(self, rec: PhaseRecord) -> None:
        """A rollback names each object it leaves to the operator release, and why."""
        for r in rec.steps:
            if r.status == HANDED_OVER:
                self.listener.warning(f"phase {rec.number} rollback: "
                                      f"{from_record(r.step).object} was handed over to the "
                                      "GPU Operator, whose own reconciler manages it now; "
                                      "left alone")

    def _check_settled(self, run: PhaseWork, done: set[str]) -> None:
        """Steps that needed no write still have post-gates (an operator's own rollout of the
        labels, an alias's endpoints): the phase is completed only once they pass."""
        if run.rollback:
            return
        for step in run.plan.checks:
            if step.id not in done and self._live(step) is not None:
                afterwrite.wait(self, run, step, None)

    def fail(self, rec: PhaseRecord, message: str, hint: str) -> NoReturn:
        rec.status, rec.error = PhaseStatus.FAILED, message
        self.state.last_error = message
        self.state.log(rec.status.value, phase=rec.number, error=message)
        self.save()
        self.listener.phase(PhaseEvent(rec.number, rec.name, rec.status.value, message=message))
        raise GateFailed(message, hint)

    # ---- one step --------------------------------------------------------------------------

    def _live(self, step: Step) -> dict[str, Any] | None:
        return self.kube.get(step.kind, step.name, self.namespace)

    def _run_step(self, run: PhaseWork, step: Step) -> None:
        if step.pod_by_pod:
            ondelete.roll(self, run, step)
            return
        rec, rollback = run.rec, run.rollback
        recorded = {r.id: r.status for r in run.records}
        base: Snapshot | None = None
        if step.satisfied(self._live(step)):
            status = "done" if recorded.get(step.id) in ("intent", "done") else "skipped"
            if recorded.get(step.id) != "done":
                run.mark(step, status)
                if recorded.get(step.id) == "intent" and step.rolls_pods() and not rollback:
                    rec.wrote_labels = True  # our write landed; the run died before "done"
                self.save()
            self.listener.step(StepEvent(rec.number, step, "skipped"))
        else:
            base = self.snapshot()
            pre = run.module.before_write(self.context(base), step)
            if g.failed(pre) and all(r.wait for r in g.failed(pre)):
                pre = self._wait_pre(run.module, step, base, pre)
            if g.failed(pre):
                self.fail(rec, f"{step.object}: {g.describe(pre)}",
                          _hint_for(run, step, g.failed(pre)))
            # Intent, the write and its "done" go together: SIGTERM or Ctrl-C arriving while
            # the write is in flight stops the run only once it is recorded (interrupts.py).
            with interrupts.shielded():
                run.mark(step, "intent")
                self.save()
                self.listener.step(StepEvent(rec.number, step, "writing"))
                note = executor.execute(self.kube, self.namespace, self.catalog, step)
                self.result.writes += 1
                if note:
                    self.listener.message(note)
                run.mark(step, "done")
                if step.rolls_pods() and not rollback:
                    rec.wrote_labels = True
                self.save()
            self.listener.step(StepEvent(rec.number, step, "done"))
        afterwrite.wait(self, run, step, base)

    def _wait_pre(self, module: Phase, step: Step, base: Snapshot,
                  pre: list[GateResult]) -> list[GateResult]:
        """Pre-gates that heal by themselves (an old Service garbage collection is removing):
        wait for them on Service events, within --timeout, then write at once."""
        self.listener.message(f"waiting: {g.describe(pre)}")
        deadline = self.clock.monotonic() + self.settings.timeout

        def check() -> list[GateResult]:
            return list(module.before_write(self.context(self.fresh(base)), step))

        return self.waiter.until(check, deadline, wake_kind=kinds.SERVICE,
                                 fatal=lambda rs: not all(r.wait for r in g.failed(rs)))

    # ---- rollback ----------------------------------------------------------------------------

    def rollback(self, downto: int) -> RunResult:
        self._target = downto
        snap = self.snapshot()
        settled = False
        switching = phases.selector_phase().NUMBER
        for number in sorted(phases.numbers(), reverse=True):
            if number < downto:
                continue
            module = phases.by_number(number)
            rec = self.state.phase(number)
            if not rec.status.applied:
                continue
            if number < switching and not settled:  # phases the old selectors still needed
                self._settle_after_restore()
                settled = True
                snap = self.snapshot()
            self._run_phase(walk.undo(module, rec, snap, self.catalog, self._components(snap),
                                      self.settings.options), Direction.ROLLBACK)
            snap = self.snapshot()
        return self.result

    def _settle_after_restore(self) -> None:
        """Before removing what the old selectors needed, give kube-proxy `--settle` after the
        selectors were restored — measured from the recorded finish, so a run killed during
        the countdown waits only the rest of it when run again."""
        rec = self.state.phase(phases.selector_phase().NUMBER)
        if rec.status is not PhaseStatus.ROLLED_BACK or not rec.finished:
            return
        finished = datetime.strptime(rec.finished, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        elapsed = (self.clock.now() - finished).total_seconds()
        remaining = self.settings.settle - max(0.0, elapsed)
        if remaining > 0:
            self.waiter.settle(remaining, self.listener.settle)


def _hint_for(run: PhaseWork, step: Step, failed: list[GateResult]) -> str:
    if any(r.kind is GateKind.CHANGED_MEANWHILE for r in failed):
        return ("someone else (often an operator reconcile) changed this Service since it was "
                "read; nothing was written to it: run `dcgm-migrate status` to see its owner and "
                "selector, then the same command again")
    return step.stop_hint(run.rollback)
