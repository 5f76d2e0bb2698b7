"""Rollback's settle (docs/design.md, "Gates"): before phases 1-2 are undone, kube-proxy gets
`--settle` counted from when phase 3's selectors were restored, as recorded in the state, so a run
killed during the countdown waits only the rest of it when run again. On a fake clock: no real
time."""

from __future__ import annotations

from datetime import timedelta

import pytest

from migrator.engine.applying import Apply
from migrator.engine.loop import RunSettings
from migrator.engine.progress import Listener
from migrator.engine.state import PhaseStatus, State
from tests.helpers.builders import NS
from tests.helpers.clock import FakeClock
from tests.helpers.runs import offline_run


class Countdown(Listener):
    def __init__(self) -> None:
        self.left: list[float] = []

    def settle(self, seconds_left: float) -> None:
        self.left.append(seconds_left)


def apply_backend(clock: FakeClock, restored_ago: float | None, settle: float = 30.0, *,
           status: str = "rolled-back") -> tuple[Apply, State, Countdown]:
    state = State(NS)
    rec = state.phase(3)
    rec.status = PhaseStatus(status)
    if restored_ago is not None:
        rec.finished = (clock.now() - timedelta(seconds=restored_ago)).strftime(
            "%Y-%m-%dT%H:%M:%SZ")
    listener = Countdown()
    # The settle reads only the state and the clock: no API server is needed.
    run = offline_run(clock, settings=RunSettings(settle=settle), listener=listener)
    return Apply(run, state, 1), state, listener


@pytest.mark.parametrize(("restored_ago", "waited"), [
    (0.0, 30.0),  # just restored: the whole settle
    (12.0, 18.0),  # a run killed 12 s into the countdown waits the rest
    (30.0, 0.0),
    (3600.0, 0.0),
])
def test_the_settle_is_counted_from_the_recorded_restore(restored_ago: float,
                                                        waited: float) -> None:
    clock = FakeClock()
    backend, state, listener = apply_backend(clock, restored_ago)
    backend.settle_after_restore(state)
    assert sum(clock.slept) == pytest.approx(waited)
    if waited:
        assert listener.left[0] == pytest.approx(waited) and listener.left[-1] == 0.0
    else:
        assert listener.left == []


@pytest.mark.parametrize(("status", "restored_ago"), [
    ("completed", 0.0),  # phase 3 not rolled back (yet): nothing was restored
    ("rolled-back", None),  # no recorded finish
])
def test_no_settle_without_a_recorded_restore(status: str, restored_ago: float | None) -> None:
    clock = FakeClock()
    backend, state, listener = apply_backend(clock, restored_ago, status=status)
    backend.settle_after_restore(state)
    assert clock.slept == [] and listener.left == []
