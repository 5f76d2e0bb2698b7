"""What `status` says about runs, from a state document and the lock (engine/runstatus.py),
as plain data: a run killed between two phases leaves every phase completed or rolled back,
and only the history's last start and its target tell it did not finish — an apply whose
target phase is not completed, a rollback whose target phase is not rolled back; a finished
run, a later run in the other direction, and a lock whose holder is provably gone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from migrator.engine import runstatus
from migrator.engine.state.document import State
from migrator.engine.state.lock import LockInfo
from migrator.model.phasestatus import PhaseStatus
from migrator.model.planning import Options

NS = "gpu-operator"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _state(statuses: tuple[str, str, str], *events: tuple[str, int, int | None]) -> State:
    state = State(NS)
    for number, status in enumerate(statuses, 1):
        state.phase(number).status = PhaseStatus(status)
    for event, phase, target in events:
        state.log(event, phase=phase, **({"target": target} if target else {}))
    return state


def _run(state: State, lock: LockInfo | None = None, gone: str | None = None) -> tuple[
        str, str | None, int | None, int | None, str | None]:
    run = runstatus.describe(state, lock, NOW, NS, gone)
    return run.state, run.operation, run.target, run.phase, run.resume


def test_an_apply_killed_between_two_phases_is_interrupted() -> None:
    state = _state(("completed", "pending", "pending"),
                   ("phase-start", 1, 3), ("completed", 1, None))
    assert _run(state) == ("interrupted", "apply", 3, 2,
                           f"dcgm-migrate apply --phase 3 -n {NS}")


def test_the_resume_command_repeats_the_interrupted_runs_options() -> None:
    """An `apply --phase 3 --rolling --prepare-for R` stopped in phase 2 resumes with the same
    options, so the resumed run plans as the stopped one did; a later rollback's own options
    (none) do not leak into an apply's resume line."""
    state = _state(("completed", "failed", "pending"))
    state.log("phase-start", phase=2, target=3,
              options=["--rolling", "--prepare-for", "v26.10"])
    assert _run(state)[4] == (f"dcgm-migrate apply --phase 3 --rolling --prepare-for v26.10 "
                              f"-n {NS}")
    plain = _state(("completed", "failed", "pending"), ("phase-start", 2, 3))
    assert _run(plain)[4] == f"dcgm-migrate apply --phase 3 -n {NS}"
    # stopped by a pre-gate, before its start event: the failure recorded the options
    refused = _state(("completed", "completed", "failed"), ("phase-start", 2, 2))
    refused.log("failed", phase=3, error="a gate", options=["--rolling"])
    assert _run(refused)[4] == f"dcgm-migrate apply --phase 3 --rolling -n {NS}"


def test_options_give_back_their_command_line_flags() -> None:
    assert Options().flags() == ()
    every = Options(include_operator_owned=True, roll_on_delete=True,
                    allow_foreign_pods=True, prepare_for="v26.10", rolling=True)
    assert every.flags() == ("--include-operator-owned", "--roll-on-delete", "--rolling",
                             "--allow-foreign-pods", "--prepare-for", "v26.10")


def test_a_rollback_killed_between_two_phases_is_interrupted() -> None:
    state = _state(("completed", "completed", "rolled-back"),
                   ("phase-start", 3, 3), ("completed", 3, None),
                   ("rollback-start", 3, 1), ("rolled-back", 3, None))
    assert _run(state) == ("interrupted", "rollback", 1, 2,
                           f"dcgm-migrate rollback --phase 1 -n {NS}")
    run = runstatus.describe(state, None, NOW, NS)
    assert run.rollback is not None
    assert [p.phase for p in run.rollback] == [2, 1]  # what is left to undo


def test_finished_runs_are_idle() -> None:
    applied = _state(("completed",) * 3, ("phase-start", 3, 3), ("completed", 3, None))
    assert _run(applied)[0] == "idle"
    rolled = _state(("completed", "completed", "rolled-back"),
                    ("rollback-start", 3, 3), ("rolled-back", 3, None))
    assert _run(rolled)[0] == "idle"  # rollback --phase 3 is done; 1 and 2 stay applied
    partial = _state(("completed", "pending", "pending"),
                     ("phase-start", 1, 1), ("completed", 1, None))
    assert _run(partial)[0] == "idle"  # apply --phase 1 is done


def test_a_later_run_in_the_other_direction_decides() -> None:
    state = _state(("rolled-back", "rolled-back", "rolled-back"),
                   ("phase-start", 1, 3), ("completed", 1, None),
                   ("rollback-start", 1, 1), ("rolled-back", 1, None))
    assert _run(state)[0] == "idle"


def test_a_live_lock_is_a_run_unless_its_holder_is_gone() -> None:
    state = _state(("completed", "pending", "pending"),
                   ("phase-start", 1, 3), ("completed", 1, None))
    lock = LockInfo("ci@host pid 7", "2025-03-01T11:59:00Z", NOW + timedelta(seconds=90),
                    NOW - timedelta(seconds=5))
    assert _run(state, lock)[:4] == ("running", "apply", 3, 2)
    gone = "its process (pid 7 on host) no longer runs"
    assert _run(state, lock, gone) == ("interrupted", "apply", 3, 2,
                                       f"dcgm-migrate apply --phase 3 -n {NS}")
    view = runstatus.describe(state, lock, NOW, NS, gone).lock
    assert view is not None and view.live is True and view.gone == gone
