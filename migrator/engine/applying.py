"""The apply back end of the loop: intent saved before each write, its confirmation written with
the next save or before a long wait (a killed run resumes from either), then waited for."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn

from migrator import phases
from migrator.engine import afterwrite, executor, inplace, interrupts, loop
from migrator.engine.loop import Decision, Direction, PhaseWork, Run
from migrator.engine.progress import PhaseEvent, StepEvent
from migrator.engine.reads import narrow, read_snapshot, with_nodes
from migrator.engine.state import PhaseRecord, PhaseStatus, State
from migrator.engine.waiting import Waiter
from migrator.errors import GateFailed
from migrator.model import gates as g
from migrator.model import kinds
from migrator.model.gates import GateResult, ServiceBaseline
from migrator.model.kinds import Kind
from migrator.model.planning import PlanContext
from migrator.model.retiring import HANDED_OVER
from migrator.model.snapshot import Snapshot
from migrator.model.steps import RelabelPods, Step, from_record


class Apply:
    """The back end of `apply` and `rollback`, and the `loop.Applier`."""

    def __init__(self, run: Run, state: State, target: int) -> None:
        self.run, self.state = run, state
        self.kube, self.namespace, self.catalog = run.kube, run.namespace, run.catalog
        self.settings, self.clock, self.listener = run.settings, run.clock, run.listener
        self.waiter = Waiter(run.kube, run.namespace, run.clock, run.session.heartbeat)
        self.result = loop.Tally()
        self.target = target  # the command's --phase, so `status` names the command resuming

    def snapshot(self) -> Snapshot:  # from the cache: at least as new as our last write
        return read_snapshot(self.kube, self.namespace, self.catalog, cache=self.run.cache,
                             clock=self.clock)

    def live(self, step: Step) -> dict[str, Any] | None:
        return self.kube.get(step.kind, step.name, self.namespace)

    def context(self, snap: Snapshot) -> PlanContext:
        return loop.context(self.catalog, self.settings.options, snap)

    def fresh(self, base: Snapshot) -> Snapshot:
        """What a step changes read again (the base's CRs and ServiceMonitors kept)."""
        names = [c.daemonset for c in self.catalog.components]
        return narrow(self.kube, base, self.catalog, daemonsets=names, cache=self.run.cache)

    def with_nodes(self, snap: Snapshot) -> Snapshot:
        """The read knowing the Nodes' names (kept a while in the run's cache)."""
        return with_nodes(self.kube, snap, self.run.cache, self.clock)

    def quiet(self, daemonset: str) -> contextlib.AbstractContextManager[None]:
        """The cache stops following this DaemonSet's rollout churn."""
        cache = self.run.cache
        comp = next((c for c in self.catalog.components if c.daemonset == daemonset), None)
        if cache is None or comp is None:
            return contextlib.nullcontext()
        return cache.quiet(comp.app_label)

    def save(self, *, later: bool = False) -> None:
        """`later`: a confirmation, written with the next save (`RunSession.save`)."""
        with interrupts.shielded():  # a state write in flight finishes before a signal stops us
            self.run.session.save(self.state, later=later)

    def flush(self) -> None:
        """What `later` kept back written now: before a wait that may be long."""
        with interrupts.shielded():
            self.run.session.flush()

    def record(self, work: PhaseWork, step: Step, status: str, *, later: bool = False) -> None:
        """The step's new status saved before a signal can stop the run (`later`: a
        confirmation of the intent saved before the write, written with the next save)."""
        with interrupts.shielded():
            work.mark(step, status)
            self.save(later=later)

    def until(self, check: Callable[[], list[GateResult]], wake_kind: Kind = kinds.ENDPOINTSLICE,
              fatal: Callable[[list[GateResult]], bool] | None = None,
              patience: float | None = None) -> list[GateResult]:
        """`check` waited for within --timeout from now (engine/waiting.py), saying what it
        waits for once that takes `patience` seconds (default: the waiter's)."""
        return self.waiter.until(check, self.clock.monotonic() + self.settings.timeout,
                                 wake_kind=wake_kind, fatal=fatal, patience=patience,
                                 waiting=lambda failed: self.listener.message(
                                     f"waiting: {g.describe(failed)}"))

    def stack(self, state: State, live: str, changed: bool) -> None:
        if changed:
            self.listener.warning(f"the GPU Operator stack changed from {state.stack} "
                                  f"(recorded) to {live}: completed phases are "
                                  f"re-planned for {live}")
            state.log("stack-changed", before=state.stack, after=live)
        state.stack = live

    def holds(self, decision: Decision) -> None:
        rec = decision.record
        if self._retire(decision):  # handed over: recorded so at once
            self.save()
        self.listener.phase(PhaseEvent(rec.number, decision.module.NAME,
                                       PhaseStatus.COMPLETED.value, message="still holds"))

    def begin(self, decision: Decision, direction: Direction) -> None:
        rec, plan = decision.record, decision.plan
        assert plan is not None
        if decision.action is loop.Action.RERUN:
            self.listener.phase(PhaseEvent(rec.number, decision.module.NAME, "drifted",
                                           gates=tuple(decision.drift),
                                           message=decision.reason))
            self.state.log("drift", phase=rec.number, detail=decision.reason)
            rec.status, rec.baselines = PhaseStatus.IN_PROGRESS, []
        self._retire(decision)
        rollback = direction is Direction.ROLLBACK
        handed = [r for r in rec.steps if r.status == HANDED_OVER] if rollback else []
        for r in handed:  # a rollback names each object it leaves to the operator, and why
            self.listener.warning(f"phase {rec.number} rollback: {from_record(r.step).object} "
                                  "was handed over to the GPU Operator, whose own reconciler "
                                  "manages it now; left alone")
        self.listener.phase(PhaseEvent(rec.number, decision.module.NAME, "planning", plan))
        if rollback:
            for warning in plan.warnings:
                self.listener.warning(f"phase {rec.number} rollback: {warning}")

    def start(self, decision: Decision, direction: Direction) -> PhaseWork:
        rec, plan = decision.record, decision.plan
        assert plan is not None
        rollback = direction is Direction.ROLLBACK
        taken = not rec.baselines or rollback  # now, or by the run this one resumes
        if taken:
            rec.baselines = [b.as_dict() for b in plan.guarded]
        rec.status = PhaseStatus.IN_PROGRESS
        if not rollback:
            rec.error = None
            if decision.action not in (loop.Action.RESUME, loop.Action.RERUN):
                rec.started = self.state.stamp()
        self.state.log("rollback-start" if rollback else "phase-start", phase=rec.number,
                       target=self.target, **self._options())
        self.save()  # baselines and originals are in the state before any write
        bases = plan.guarded if taken else tuple(ServiceBaseline.from_dict(b)
                                                 for b in rec.baselines)
        return PhaseWork(decision.module, rec, plan, bases, direction, decision.ctx.snapshot)

    def finish(self, work: PhaseWork) -> None:
        rec = work.rec
        rec.finished = self.state.stamp()
        restored = {}  # how many selectors a rollback restored (`settle_after_restore` asks)
        if work.rollback:
            if work.module.SWITCHES_SELECTORS:
                restored["selectors"] = sum(r.status in ("intent", "done") and (
                    s := from_record(r.step)).selector_change(s.name) is not None
                    for r in rec.undo)
            rec.status = PhaseStatus.ROLLED_BACK
            rec.steps, rec.undo, rec.baselines, rec.wrote_labels = [], [], [], False
        else:
            rec.status = PhaseStatus.COMPLETED
            # the baseline is spent; kept, it would grow every later save of the ConfigMap
            rec.baselines = []
        self.state.log(rec.status.value, phase=rec.number, **restored)
        self.save()
        self.listener.phase(PhaseEvent(rec.number, work.module.NAME, rec.status.value,
                                       work.plan))

    def refuse(self, rec: PhaseRecord, message: str, hint: str, step: Step | None = None,
               gates: list[GateResult] | None = None) -> NoReturn:
        rec.status, rec.error = PhaseStatus.FAILED, message
        self.state.last_error = message
        self.state.log(rec.status.value, phase=rec.number, error=message, **self._options())
        self.save()
        self.listener.phase(PhaseEvent(rec.number, rec.name, rec.status.value, message=message))
        raise GateFailed(message, hint)

    def _options(self) -> dict[str, list[str]]:
        """The plan-shaping options, for `status`'s `resume:`."""
        flags = self.settings.options.flags()
        return {"options": list(flags)} if flags else {}

    def _retire(self, decision: Decision) -> bool:
        """Record the walk's retirements, each warned and logged; True if any."""
        rec, statuses = decision.record, {r.step_id: r for r in decision.retire}
        hit = [(r, statuses[r.id]) for r in rec.steps
               if r.id in statuses and r.status in ("intent", "done")]
        for r, found in hit:
            r.status = found.status
            self.state.log("retired", phase=rec.number, step=r.id, reason=found.reason)
            self.listener.warning(found.reason)
        return bool(hit)

    def skip(self, work: PhaseWork, step: Step) -> None:
        recorded = {r.id: r.status for r in work.records}.get(step.id)
        if recorded != "done":
            if recorded == "intent" and step.labels_pods() and not work.rollback:
                work.rec.wrote_labels = True  # our write landed; the run died before "done"
            self.record(work, step, "done" if recorded == "intent" else "skipped", later=True)
        self.listener.step(StepEvent(work.rec.number, step, "skipped"))

    def wait_pre(self, work: PhaseWork, step: Step, base: Snapshot,
                 pre: list[GateResult]) -> list[GateResult]:
        """Pre-gates that heal by themselves: waited for on Service events, within --timeout,
        said at once."""
        def check() -> list[GateResult]:
            return list(work.module.before_write(self.context(self.fresh(base)), step))

        return self.until(check, kinds.SERVICE, patience=0.0,
                          fatal=lambda rs: not all(r.wait for r in g.failed(rs)))

    def write(self, work: PhaseWork, step: Step, pre: list[GateResult]) -> None:
        # a signal while the write is in flight stops the run once it is recorded
        with interrupts.shielded():
            self.record(work, step, "intent")
            self.listener.step(StepEvent(work.rec.number, step, "writing"))
            note = executor.execute(step, self.kube, self.namespace, self.catalog)
            self.result.writes += 1
            if note:
                self.listener.message(note)
            if step.labels_pods() and not work.rollback:
                work.rec.wrote_labels = True
            self.record(work, step, "done", later=True)
        self.listener.step(StepEvent(work.rec.number, step, "done"))

    def roll(self, work: PhaseWork, step: Step) -> None:
        (inplace.relabel if isinstance(step, RelabelPods) else inplace.roll)(self, work, step)

    def after(self, work: PhaseWork, step: Step, base: Snapshot | None, wrote: bool) -> None:
        afterwrite.wait(self, work, step, base)

    def check(self, work: PhaseWork, step: Step) -> None:
        afterwrite.wait(self, work, step, None)

    def settle_after_restore(self, state: State) -> None:
        """`--settle` for kube-proxy after the selectors were restored, counted from the
        recorded finish (a killed run waits only the rest)."""
        rec = state.phase(phases.selector_phase().NUMBER)
        last: dict[str, Any] = next((e for e in reversed(state.history)
                                     if e.get("event") == PhaseStatus.ROLLED_BACK.value
                                     and e.get("phase") == rec.number), {})
        if rec.status is not PhaseStatus.ROLLED_BACK or not rec.finished or \
                last.get("selectors") == 0:
            return  # no selector was restored: nothing for kube-proxy to program
        finished = datetime.strptime(rec.finished, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        elapsed = (self.clock.now() - finished).total_seconds()
        remaining = self.settings.settle - max(0.0, elapsed)
        if remaining > 0:
            self.waiter.settle(remaining, self.listener.settle)
