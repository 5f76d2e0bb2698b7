"""What `status` says about runs (`$defs/run` in docs/output.schema.json), pure: `running` or
`rolling-back` (a live lock whose holder is not provably gone), `interrupted` (the last run did
not finish; with the `resume` command), else `idle`."""

from __future__ import annotations

from datetime import datetime

from migrator import phases
from migrator.engine.reports import LockView, RollbackPhase, RollbackStep, RunView
from migrator.engine.state import PhaseRecord, PhaseStatus, State, unfinished
from migrator.engine.state.lock import LockInfo, format_time
from migrator.engine.state.runs import STARTS
from migrator.model import stackchange as sc
from migrator.model.steps import from_record


def _rollback_steps(state: State, target: int | None) -> tuple[RollbackPhase, ...]:
    """Per phase the rollback undoes (newest first), each step's inverse and whether it is done."""
    out = []
    for number in sorted(phases.numbers(), reverse=True):
        rec = state.phase(number)
        if not rec.status.applied or (target is not None and number < target):
            continue
        undone = {r.id: r.status for r in rec.undo}
        inverses = [i for s in reversed(rec.done_steps()) if (i := s.inverse()) is not None]
        steps = [RollbackStep(i.object, i.type, undone.get(i.id, "to-do"), tuple(i.changes()))
                 for i in inverses]
        for r in rec.undo:  # recorded by the rollback itself (e.g. a pod roll), not an inverse
            step = from_record(r.step)
            if not any(s.object == step.object and s.type == step.type for s in steps):
                steps.append(RollbackStep(step.object, step.type, r.status,
                                          tuple(step.changes())))
        out.append(RollbackPhase(number, phases.by_number(number).NAME, rec.status,
                                 tuple(steps)))
    return tuple(out)


def waits_for(record: PhaseRecord | None, rollback: bool) -> str | None:
    """What a live run of this phase waits for, from its newest step record."""
    records = (record.undo if rollback else record.steps) if record is not None else []
    if not records:
        return None
    last = records[-1]
    step = from_record(last.step)
    if last.status == "intent":
        return f"the write of {step.object} ({step.type}) and the checks after it"
    if last.status != "done":
        return None
    daemonset = step.rollout_of()
    if daemonset:
        return (f"the rollout of DaemonSet/{daemonset}: every pod Ready on the new template, "
                "within the DaemonSet's own unavailability budget")
    service = step.object.split("/", 1)[-1]
    if step.selector_change(service) is not None:
        return (f"the EndpointSlices of {step.object} under the new selector, with no endpoint "
                "lost, then the settle time")
    return f"the post-gates of {step.object} ({step.type}): its endpoints caught up"


def _resume(state: State, operation: str, target: int, namespace: str) -> str:
    """The command that resumes, with the options the interrupted run recorded (start event
    or a pre-gate's failure), so it plans as it did."""
    flags: list[str] = []
    for event in reversed(state.history):
        name = str(event.get("event"))
        if STARTS.get(name) == operation or name == PhaseStatus.FAILED.value:
            options = event.get("options")
            flags = [str(o) for o in options] if isinstance(options, list) else []
            break
    return " ".join([f"dcgm-migrate {operation} --phase {target}", *flags, f"-n {namespace}"])


def describe(state: State | None, lock: LockInfo | None, now: datetime,
             namespace: str, gone: str | None = None) -> RunView:
    """The `run` of `status`. `gone`: why the lock's holder is provably gone, or None. An
    unfinished `change-stack` is the run, its phases included: only it goes on with them."""
    live = lock is not None and lock.live(now) and gone is None
    operation, target, pending = unfinished(state) if state else (None, None, [])
    change = state.stack_change if state and sc.unfinished(state.stack_change) else None
    active = [r for r in pending if r.status.unfinished]
    rollback = operation == "rollback" and change is None
    # the phase in progress, else the one the run goes on with
    current = (max if rollback else min)(pending, key=lambda r: r.number) if pending else None
    if live:
        run = "rolling-back" if rollback and active else "running"
    elif pending or change:
        run = "interrupted"
    else:
        run = "idle"
    if not pending:  # idle, or a run that has not recorded its start yet
        operation = target = None
    if change is not None:
        operation, target = "change-stack", None
    history = state.history if state else []
    resume = None
    if state is not None and run == "interrupted":
        resume = (sc.resume_command(change, namespace) if change is not None else
                  _resume(state, operation, target, namespace) if operation and target else None)
    waits = None
    if run in ("running", "rolling-back"):
        waits = waits_for(current, rollback) or (sc.waits_for(change) if change else None)
    return RunView(
        state=run, operation=operation, target=target,
        phase=current.number if current else None,
        lock=None if lock is None else LockView(
            lock.holder, lock.acquired or None,
            format_time(lock.expires) if lock.expires else None, lock.live(now), gone),
        resume=resume,
        last_event=history[-1] if history else None,
        waits_for=waits,
        rollback=(_rollback_steps(state, target)
                  if state is not None and rollback and run != "idle" and pending else None),
    )
