"""The commands as plain functions: each takes a Session and options and returns a typed report
(engine/reports.py) for the CLI to render; no printing. Input is checked before any write."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import NoReturn

from migrator import phases
from migrator.engine import assemble, informer, locate, projecting, recovered, runstatus
from migrator.engine.applying import Apply
from migrator.engine.clock import Clock, SystemClock
from migrator.engine.informer import Informer
from migrator.engine.loop import Loop, Run, RunSettings
from migrator.engine.permissions import preflight_checks, require_for_run
from migrator.engine.planfile import check_plan_file
from migrator.engine.progress import Listener, Told
from migrator.engine.reads import read_snapshot
from migrator.engine.reports import (
    Lowest,
    PhaseView,
    PlanReport,
    PreflightReport,
    Question,
    RunOutcome,
    RunReport,
    StateDigest,
    StatusReport,
    Target,
    UnlockReport,
)
from migrator.engine.state import (
    ConfigMapStateStore,
    PhaseStatus,
    RunSession,
    State,
    StateStore,
    default_holder,
    holds,
)
from migrator.engine.state import lock as locking
from migrator.errors import APIForbidden, LockHeld, StateCorrupt, UsageError
from migrator.kube.client import Kube
from migrator.model import stackchange as sc
from migrator.model.planning import Options
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, load_catalog

ABORTED_HINT = "nothing was written; rerun and answer y, or pass --yes to skip the question"


@dataclass
class Session:
    """One connection to one namespace, with the state store and clock every command uses."""

    kube: Kube
    namespace: str
    listener: Listener = field(default_factory=Listener)
    catalog: Catalog = field(default_factory=load_catalog)
    clock: Clock = field(default_factory=SystemClock)
    store: StateStore = field(init=False)

    def __post_init__(self) -> None:
        self.store = ConfigMapStateStore(self.kube, self.namespace, self.catalog.common,
                                         self.clock)

    def run_session(self, version: str | None) -> RunSession:
        """One run's lock (this process its holder), heartbeat and saves, from `version`."""
        return RunSession(self.store, version=version, holder=default_holder(),
                          clock=self.clock, listener=self.listener)


def observe(session: Session, cache: Informer | None = None) -> Snapshot:
    """The namespace as the planner sees it; refused (UsageError) when it is missing or has no
    catalog DaemonSet, unless its state records steps (drift, rollback)."""
    try:
        snap = read_snapshot(session.kube, session.namespace, session.catalog, cache=cache,
                             clock=session.clock)
    except APIForbidden as denied:
        _refuse_denied_namespace(session, denied)
    if snap.namespace_exists and (snap.daemonsets or _records_steps(session)):
        return snap
    raise UsageError(*locate.wrong_namespace(session.kube, session.namespace, session.catalog,
                                             exists=snap.namespace_exists))


def _refuse_denied_namespace(session: Session, denied: APIForbidden) -> NoReturn:
    """A 403 on the first read: a wrong namespace when the DaemonSets run elsewhere, else the
    missing permission itself."""
    found = locate.denied_namespace(session.kube, session.namespace, session.catalog)
    if found is None:
        raise denied
    raise UsageError(*found) from denied


def _records_steps(session: Session) -> bool:
    state, _ = load_state(session)
    return state is not None and any(r.done_steps() for r in state.phases.values())


def _check_phase(phase: int) -> None:
    if phase not in phases.numbers():
        named = [f"{m.NUMBER} ({m.NAME})" for m in phases.PHASES]
        numbers = [str(n) for n in phases.numbers()]
        raise UsageError(f"There is no phase {phase}: phases are {', '.join(named[:-1])} and "
                         f"{named[-1]}.", f"pass --phase {', '.join(numbers[:-1])} or "
                         f"{numbers[-1]}")


def load_state(session: Session) -> tuple[State | None, str | None]:
    stored = session.store.load()
    if stored is None:
        return None, None
    where = (session.namespace, session.catalog.common.state_configmap)
    return State.from_document(stored.document, session.clock, where), stored.version


def plan(session: Session, options: Options) -> PlanReport:
    """What each phase would change, with every gate's status now."""
    snap = observe(session)
    state, _ = load_state(session)
    report = assemble.build(snap, session.catalog, state, options, objects=True)
    session.listener.command().say(report.warnings)
    return report


@dataclass
class RunRequest:
    phase: int
    settings: RunSettings = field(default_factory=RunSettings)  # with the plan options
    plan_file: Path | None = None
    confirm: Callable[[Question], bool] = lambda question: True
    dry_run: bool = False  # the server-dry-run back end: `dryRun=All` writes, no lock, no state
    asked: bool = False  # the run's permissions were asked already (`change-stack`, up front)
    held: RunSession | None = None  # the lock taken already (`change-stack`'s): run under it


@contextlib.contextmanager
def _applying(session: Session, cache: Informer, request: RunRequest, state: State,
              version: str | None) -> Iterator[Apply]:
    """The run session (lock, save, heartbeat) around the apply back end, or the one the
    request holds already; a run that wrote since `state` was loaded makes its first save
    (before any write) fail."""
    lock: contextlib.AbstractContextManager[RunSession] = (
        contextlib.nullcontext(request.held) if request.held is not None
        else session.run_session(version))
    with lock as held:
        yield Apply(Run(session.kube, session.namespace, session.catalog, cache, held,
                        session.clock, session.listener, request.settings), state, request.phase)


def _outcome(session: Session, told: Told, request: RunRequest, state: State,
             backend: Apply, operation: str) -> tuple[PlanReport, RunOutcome]:
    """The cluster after the run (with every warning `told` said) and what the run did."""
    final = assemble.build(backend.snapshot(), session.catalog, state, request.settings.options,
                          forward=operation == "apply", earlier=told.warnings)
    told.say(final.warnings)
    tally = backend.result
    return final, RunOutcome(operation, tally.writes, False,
                             {k: Lowest(*v) for k, v in tally.lowest.items()},
                             tuple(tally.notes))


@contextlib.contextmanager
def _run_cache(session: Session, request: RunRequest) -> Iterator[tuple[Informer, Snapshot]]:
    """The run's cache (engine/informer.py), serving every read of the run, and the namespace
    observed through it; the phase is checked first (bad input costs no request)."""
    _check_phase(request.phase)
    with contextlib.ExitStack() as stack:
        try:  # the cache's first lists are the namespace's first reads
            cache = stack.enter_context(informer.opened(session.kube, session.namespace,
                                                        session.catalog, session.clock))
        except APIForbidden as denied:
            _refuse_denied_namespace(session, denied)
        yield cache, observe(session, cache)


def apply(session: Session, request: RunRequest) -> RunReport:
    """Run phases 1..N that are not completed yet (docs/design.md, "Phases")."""
    with _run_cache(session, request) as (cache, snap):
        if request.plan_file is not None:
            check_plan_file(request.plan_file, snap, session.namespace, request.phase,
                            asdict(request.settings.options))
        state, version = load_state(session)
        if request.held is None:
            _refuse_unfinished_change(session, state, "apply")
        before = assemble.build(snap, session.catalog, state, request.settings.options)
        locate.require_stack(before.stack, bool(before.components), session.namespace)
        locate.require_operator_api(snap.nvidia_api, session.kube.server)
        if state is None:
            recovered.refuse_lost_state(snap, session.catalog, session.namespace)
        told = session.listener.command()
        if before.holds(request.phase) and session.store.lock_info() is None:
            told.say(before.warnings)
            session.listener.message(f"phases 1..{request.phase} are completed and still hold: "
                                     "nothing to do")
            # no lock, no state write: a repeated apply writes nothing at all
            return RunReport(before, RunOutcome("apply", 0, request.dry_run, {}), ok=True)
        if not request.dry_run:
            session.store.check_free()  # someone else's run: refused before warnings or question
            if not request.asked:
                require_for_run(session.kube, session.namespace)
        told.say(before.warnings)  # --yes and no TTY skip the question, not these
        if request.dry_run:  # no question, no lock, no state, nothing persisted
            return _dry_run(session, told, request, snap, state, before)
        _ask(session, request, before,
             lambda p: p.number <= request.phase and not holds(p.status))
        state = state or State(session.namespace, clock=session.clock)
        state.plan_fingerprint = snap.fingerprint()
        with _applying(session, cache, request, state, version) as backend:
            Loop(backend, state).apply(request.phase)
        final, result = _outcome(session, told, request, state, backend, "apply")
        # A ✗ gate on a phase it was asked to complete is never success, whatever the waits said.
        return RunReport(final, result, ok=final.holds(request.phase)
                         and not final.verdict.failures(request.phase))


def _refuse_unfinished_change(session: Session, state: State | None, command: str) -> None:
    """A stack change not finished is `change-stack`'s to go on with or undo: apply and
    rollback would plan the phases for a stack half changed. One running now: its lock."""
    record = state.stack_change if state is not None else None
    if record is None or not sc.unfinished(record):
        return
    session.store.check_free()
    raise UsageError(
        f"A change-stack to the {record.get('to')} stack (started {record.get('started')}) has "
        f"not finished, and {command} would plan the phases for a stack half changed.",
        f"finish it: `{sc.resume_command(record, session.namespace)}`, or undo it: "
        f"`{sc.undo_command(session.namespace)}`")


def _ask(session: Session, request: RunRequest, report: PlanReport,
         runs: Callable[[PhaseView], bool]) -> None:
    """The question before the first write: the phases this run writes, and where."""
    if not request.confirm(Question(
            replace(report, phases=tuple(p for p in report.phases if runs(p))),
            Target(session.kube.context or "(none)", session.kube.server, session.namespace))):
        raise UsageError("Aborted at the question.", ABORTED_HINT)


def _dry_run(session: Session, told: Told, request: RunRequest, snap: Snapshot,
             state: State | None, report: PlanReport, operation: str = "apply") -> RunReport:
    """`--dry-run`: the loop on the server-dry-run back end (engine/projecting.py), writes sent
    with `dryRun=All`; no lock, no state; not ok when a gate would stop the run."""
    backend = projecting.ServerDryRun(snap, session.catalog, request.settings, session.kube,
                                      session.listener.message)
    found = projecting.preview(backend, state, report, request.phase,
                               rollback=operation == "rollback")
    told.say(found.report.warnings)
    views = found.report.phases
    for view in reversed(views) if operation == "rollback" else views:  # in the run's order
        if view.preview is not None:
            session.listener.message(f"dry run: phase {view.number} ({view.name}) "
                                     f"{view.preview.outcome.replace('-', ' ')}")
    if found.refusal:
        session.listener.message(f"dry run: the run would stop: {found.refusal}")
    return RunReport(found.report, RunOutcome(operation, len(found.writes), True, {},
                                              found.unsent), ok=found.refusal is None)


def rollback(session: Session, request: RunRequest) -> RunReport:
    """Undo phases down to and including N, newest first, from the recorded originals."""
    with _run_cache(session, request) as (cache, snap):
        state, version = load_state(session)
        _refuse_unfinished_change(session, state, "rollback")
        if state is None:  # lost after phase 1: its marks say what to undo, else refused
            state = recovered.from_marks(snap, session.catalog, session.namespace, session.clock,
                                         session.listener.message)
            if state is None:
                recovered.refuse_lost_state(snap, session.catalog, session.namespace)
        applied = [n for n in phases.numbers() if state and n >= request.phase
                   and state.phase(n).status.applied]
        undone = [n for n in phases.numbers() if state and n >= request.phase
                  and state.phase(n).status is PhaseStatus.ROLLED_BACK]
        if state and not applied and request.phase == 1 and request.settings.options.roll_on_delete:
            applied = recovered.reopen_half_rolled(state, snap, session.catalog)
        if state is None or not (applied or undone):
            raise UsageError(f"Phase {request.phase} was never applied here, so there is nothing "
                             "to roll back.",
                             "run `dcgm-migrate status` to see which phases are done")
        if not request.dry_run:  # a dry run asks no question and takes no lock
            session.store.check_free()  # someone else's run: refused before the question
            require_for_run(session.kube, session.namespace)
        before = assemble.build(snap, session.catalog, state, request.settings.options,
                                forward=False)
        told = session.listener.command()
        if request.dry_run:  # nothing persisted
            told.say(before.warnings)
            return _dry_run(session, told, request, snap, state, before, "rollback")
        if not applied:
            # Run again after it finished (or was killed after its last state write): nothing
            # to undo is success; the lock is still taken over and released.
            session.listener.message(f"phases {', '.join(map(str, undone))} are already rolled "
                                     "back; nothing to do")
        else:
            _ask(session, request, before, lambda p: p.number in applied)
        with _applying(session, cache, request, state, version) as backend:
            Loop(backend, state).rollback(request.phase)
        final, result = _outcome(session, told, request, state, backend, "rollback")
        # Rolled back, and it broke nothing the phases kept below N answer for (a check of
        # theirs that failed before it ran is not the rollback's failure).
        broken_before = {f.name for f in before.verdict.failures(request.phase - 1)}
        return RunReport(final, result, ok=all(p.status is PhaseStatus.ROLLED_BACK
                                               for p in final.phases
                                               if p.number >= request.phase
                                               and p.status is not PhaseStatus.PENDING)
                         and not [f for f in final.verdict.failures(request.phase - 1)
                                  if f.name not in broken_before])


def status(session: Session) -> StatusReport:
    """State, live verification of completed phases, drift."""
    snap = observe(session)
    broken: StateCorrupt | None = None
    try:
        state, _ = load_state(session)
    except StateCorrupt as exc:  # the live verdict needs no state: shown, with the error
        state, broken = None, exc
    report = assemble.build(snap, session.catalog, state, Options(), forward=False,
                            state_unreadable=broken is not None)
    session.listener.command().say(report.warnings)
    digest = None if state is None else StateDigest(
        state.plan_fingerprint, state.updated, state.last_error, tuple(state.history[-10:]))
    lock = None if broken else session.store.lock_info()
    run = runstatus.describe(state, lock, session.clock.now(), session.namespace,
                             session.store.holder_gone(lock))
    if run.rollback is not None:  # a rollback in progress: its steps, not the forward diff
        undoing = {p.phase for p in run.rollback}
        report = replace(report, phases=tuple(
            replace(v, changes=(), notes=(*v.notes, "being rolled back: the rollback's steps "
                                          "are under `run.rollback`"))
            if v.number in undoing else v for v in report.phases))
    return StatusReport(report, digest, run, state_error=broken,
                        ok=not broken and not assemble.status_faults(report, run))


def unlock(session: Session, force: bool = False) -> UnlockReport:
    """Remove the run lock; a live run's (still renewed, holder not provably gone:
    engine/state/lock.py) is refused (LockHeld) unless `force`."""
    info = session.store.lock_info()
    now = session.clock.now()
    gone = session.store.holder_gone(info)
    renewing = info is not None and info.renewing(now) and gone is None
    if renewing and not force:
        assert info is not None and info.renewed is not None and info.expires is not None
        ago = (now - info.renewed).total_seconds()
        raise LockHeld(
            f"A live dcgm-migrate run holds the lock on {session.namespace}/"
            f"{session.catalog.common.state_configmap}: {info.holder}, acquired "
            f"{info.acquired or 'at an unknown time'}, last renewed "
            f"{locking.format_time(info.renewed)} ({ago:.0f}s ago), until "
            f"{locking.format_time(info.expires)}; unlocking it would let two runs write at "
            "once.",
            f"wait for that run to finish (`dcgm-migrate status -n {session.namespace}` shows "
            "it); only if you are sure it is dead, "
            f"`dcgm-migrate unlock --force -n {session.namespace}`")
    holder = session.store.force_unlock()
    return UnlockReport(session.namespace, holder, bool(renewing and holder is not None),
                        gone if holder is not None else None)


def preflight(session: Session) -> PreflightReport:
    """API reachable, CRDs present, the DCGM DaemonSets found, every permission held (SSAR)."""
    return PreflightReport(session.namespace, session.kube.server,
                           preflight_checks(session.kube, session.namespace, session.catalog))
