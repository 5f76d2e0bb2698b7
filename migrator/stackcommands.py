"""`change-stack` as plain functions the CLI calls (as `commands` is for the phases): the change
planned (model/stackchange.py), carried out with its record in the state
(engine/stackchange.py), the new stack's phases run by `commands.apply`, and its undo."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from migrator import commands
from migrator.commands import RunRequest, Session
from migrator.engine.gaps import GapMeter
from migrator.engine.loop import RunSettings
from migrator.engine.permissions import NODES_LISTED, Permission, require_for_run
from migrator.engine.reads import read_snapshot
from migrator.engine.reports import RunReport
from migrator.engine.stackchange import (
    COMPLETED,
    IN_PROGRESS,
    StackRun,
    begin,
    execute,
    finish,
    rollback,
)
from migrator.engine.state import RunSession, State
from migrator.errors import APIInvalid, UsageError
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model import stackchange as sc
from migrator.model.planning import Options
from migrator.model.snapshot import Snapshot


@dataclass(frozen=True)
class StackRequest:
    """What `change-stack` was asked (bounds in seconds)."""

    target: str
    new_cr: Mapping[str, Any] | None  # None: the unfinished change's recorded CR
    delete_cr: str | None
    timeout: float
    max_gap: float
    settle: float


@dataclass(frozen=True)
class StackOutcome:
    """A change's plan, its record, and the new stack's report when it stopped at a gate."""

    change: sc.ChangePlan
    record: dict[str, Any] | None
    stopped: RunReport | None = None


def _state(session: Session) -> tuple[State, str | None]:
    state, version = commands.load_state(session)
    return (state or State(session.namespace, clock=session.clock)), version


def _stack_run(session: Session, held: RunSession, state: State, timeout: float,
               max_gap: float) -> StackRun:
    """A stack run under the run lock `held`, saving `state` as it goes and renewing the lock
    while it waits."""
    return StackRun(session.kube, session.namespace, session.catalog, session.clock,
                    session.listener, state, held.save, timeout=timeout, max_gap=max_gap,
                    heartbeat=held.heartbeat)


@contextlib.contextmanager
def _running(session: Session, loaded: tuple[State, str | None], timeout: float,
             max_gap: float) -> Iterator[StackRun]:
    """A stack run under the run lock, saving `loaded`'s state as it goes."""
    state, version = loaded
    with session.run_session(version) as held:
        yield _stack_run(session, held, state, timeout, max_gap)


def plan(session: Session, request: StackRequest) -> StackOutcome:
    """The change as it would run now, with what a stopped run did (not `observe`: a resumed
    change may find no DaemonSet)."""
    recorded = _state(session)[0].stack_change
    if sc.undoing(recorded):  # the steps it undid still read done: going on would skip them
        raise UsageError(
            f"An undo of the change to the {(recorded or {}).get('to')} stack (started "
            f"{(recorded or {}).get('rollback')}) has not finished, so the change's record no "
            "longer says what stands.",
            f"finish the undo first: `{sc.undo_command(session.namespace)}`")
    new_cr = (dict(request.new_cr) if request.new_cr is not None
              else sc.recorded_cr(recorded, request.target))
    snap = read_snapshot(session.kube, session.namespace, session.catalog, clock=session.clock)
    change = sc.plan(snap, session.catalog, request.target, new_cr, request.delete_cr)
    _admitted(session, snap, change.new_cr)
    return StackOutcome(change, recorded if (recorded or {}).get("to") == change.target else None)


def _admitted(session: Session, snap: Snapshot, new_cr: Mapping[str, Any]) -> None:
    """The API server's own judgement of -f before any write: a server-side dry-run create
    (the CRD's schema and validation rules, such as the one name a GPUCluster may have), so
    a manifest it refuses stops the change before the old CR is deleted."""
    kind = kinds.BY_KIND[str(new_cr.get("kind"))]
    if any(o.name(cr) == o.name(new_cr) for cr in snap.crs(kind.kind)):
        return  # created already: a resumed change
    try:
        session.kube.create(sc.clean_cr(new_cr), kind=kind, dry_run=True)
    except APIInvalid as err:
        raise UsageError(f"The API server refuses the {kind.kind} in -f: {err}",
                         "fix the manifest, then run change-stack again (nothing was written)"
                         ) from err


def _cr_writes(steps: Iterable[Mapping[str, str]], made: str, deleted: str) -> list[Permission]:
    """A change's writes beyond a run's, from its `steps`: a CR of the kind the step `made`
    creates, and the CR the step `deleted` deletes, by name (a rollback undoes a CREATE by a
    delete, and a DELETE by a create)."""
    by_action = {s["action"]: s for s in steps}
    create, delete = by_action.get(made), by_action.get(deleted)
    return [*([Permission("create", kinds.BY_KIND[create["kind"]], namespaced=False)]
              if create else []),
            *([Permission("delete", kinds.BY_KIND[delete["kind"]], delete["name"],
                          namespaced=False)] if delete else [])]


def change_stack(session: Session, request: StackRequest,
            confirm: Callable[[sc.ChangePlan], bool]) -> StackOutcome:
    """Carry the change out (resuming a stopped one), then run the new stack's phases 1-3;
    every permission it and those phases use is asked before the question and the lock."""
    change = plan(session, request).change
    require_for_run(session.kube, session.namespace, [NODES_LISTED, *_cr_writes(
        map(dataclasses.asdict, change.steps), made=sc.CREATE, deleted=sc.DELETE)])
    if not confirm(change):
        raise UsageError("Aborted at the question.", commands.ABORTED_HINT)
    state, version = _state(session)
    # One lock from the first write to the last: the new stack's phases run under it, so no
    # other run can start between the change's steps and its phases.
    with session.run_session(version) as held:
        run = _stack_run(session, held, state, request.timeout, request.max_gap)
        with GapMeter.watching(session.kube, session.namespace,
                               sc.stable_names(session.catalog), session.clock) as run.meter:
            record = begin(state, change, state.stamp())
            run.meter.nodes.update({k: set(v) for k, v in (record.get("baseline") or {}).items()})
            run.meter.sample()
            record["baseline"] = {k: sorted(v) for k, v in run.meter.nodes.items()}
            run.save(state)
            execute(run, change)
        held.flush()  # the phases load the state as saved
        report = commands.apply(session, request=RunRequest(phase=3, settings=RunSettings(
            timeout=request.timeout, settle=request.settle, options=Options()), asked=True,
            held=held))
        if not report.ok:
            return StackOutcome(change, state.stack_change, stopped=report)
        run = _stack_run(session, held, _state(session)[0], request.timeout, request.max_gap)
        if run.state.stack_change and run.state.stack_change.get("status") == IN_PROGRESS:
            finish(run, change)
    return StackOutcome(change, run.state.stack_change)


def rollback_stack(session: Session, timeout: float, max_gap: float
                   ) -> tuple[list[str], str | None]:
    """Undo the recorded change: what was undone, and the stack it went back to."""
    loaded = _state(session)
    recorded = loaded[0].stack_change or {}
    if recorded.get("status") not in (IN_PROGRESS, COMPLETED):
        raise UsageError("No stack change is recorded here, so there is nothing to roll back.",
                         "`dcgm-migrate status` shows the state")
    require_for_run(session.kube, session.namespace, _cr_writes(
        (recorded.get("steps") or {}).values(), made=sc.DELETE, deleted=sc.CREATE))
    with _running(session, loaded, timeout, max_gap) as run:
        done = rollback(run)
    return done, recorded.get("from")
