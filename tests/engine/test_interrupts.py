"""A signal stops a run even when Python dropped its exception (engine/interrupts.py).

A signal handler runs wherever the main thread is. When that is a finalizer (`__del__`, a
generator closed as it is collected), Python prints "Exception ignored in ..." and goes on: the
run would carry on to its end as if no signal had come (a SIGTERM in the settle countdown of a
rollback was lost this way). The signal is kept until it has stopped the run: the next wait pass
or write raises it, and `status --watch` ends at the refresh that dropped it. In-process,
through the CLI's own handlers, on the main thread (where pytest and its xdist workers run
tests); the waits on a fake clock.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from typing import Any, cast

import pytest
import typer

from dcgm_sim.cluster import SimCluster
from migrator import commands
from migrator.cli.failures import handles_errors
from migrator.commands import Session
from migrator.engine import interrupts
from migrator.engine.reports import StatusReport
from migrator.engine.waiting import Waiter
from migrator.errors import Interrupted
from migrator.kube.client import Kube
from tests.helpers import cli
from tests.helpers.clock import FakeClock


class SignalledWhileCollected:
    """An object that receives a signal in its finalizer, as a response or a generator being
    collected on the main thread would when the signal lands at that moment."""

    def __init__(self, signum: signal.Signals) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal.raise_signal(self.signum)  # the handler runs here: its exception is dropped


def collected_while_signalled(signum: signal.Signals = signal.SIGTERM) -> None:
    """`signum` lands while such an object is collected (at once: its last reference goes)."""
    obj: Any = SignalledWhileCollected(signum)
    del obj


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BaseException]]:
    """The exceptions Python dropped in finalizers ("Exception ignored in ...")."""
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: seen.append(u.exc_value) if u.exc_value else None)
    yield seen
    interrupts.forget()


def _waiter(clock: FakeClock) -> Waiter:
    return Waiter(cast(Kube, None), "ns", clock)  # a settle countdown reads no API


def test_a_signal_dropped_in_a_finalizer_stops_the_next_wait(
        dropped: list[BaseException]) -> None:
    clock = FakeClock()
    countdown: list[float] = []

    @handles_errors
    def run() -> None:
        collected_while_signalled()
        _waiter(clock).settle(60.0, countdown.append)

    with pytest.raises(typer.Exit) as stopped:
        run()
    assert [type(e) for e in dropped] == [Interrupted], dropped  # Python did drop it
    assert stopped.value.exit_code == 143  # SIGTERM's exit code, not the run's own end
    assert clock.slept == [] and countdown == [60.0]  # at the countdown's first pass


def test_a_signal_dropped_in_a_finalizer_stops_the_run_before_its_next_write(
        dropped: list[BaseException]) -> None:
    wrote: list[str] = []

    @handles_errors
    def run() -> None:
        collected_while_signalled()
        with interrupts.shielded():  # every write and state save enters one
            wrote.append("write")

    with pytest.raises(typer.Exit) as stopped:
        run()
    assert len(dropped) == 1 and stopped.value.exit_code == 143
    assert wrote == []


def test_a_signal_that_stopped_the_run_is_not_raised_again_by_its_cleanup() -> None:
    """The usual case: the handler's exception unwinds the run; a `finally` that saves or
    waits on the way out is not cut short by the same signal a second time."""
    cleaned: list[str] = []
    clock = FakeClock()
    with pytest.raises(Interrupted):
        try:
            interrupts.interrupt(Interrupted(signal.SIGTERM, "SIGTERM"))
        finally:
            with interrupts.shielded():
                cleaned.append("saved")
            _waiter(clock).settle(2.0, lambda _: None)
            cleaned.append("waited")
    assert cleaned == ["saved", "waited"] and clock.slept == [1.0, 1.0]
    interrupts.forget()
    interrupts.check()  # forgotten once the command is over: the next one starts clean


def test_a_signal_during_a_write_is_raised_once_the_write_is_recorded() -> None:
    steps: list[str] = []
    with pytest.raises(Interrupted), interrupts.shielded():
        interrupts.interrupt(Interrupted(signal.SIGTERM, "SIGTERM"))  # held
        steps.append("write answered and recorded")
    assert steps == ["write answered and recorded"]
    interrupts.forget()


def test_status_watch_ends_at_the_refresh_that_dropped_a_ctrl_c(
        sim: SimCluster, dropped: list[BaseException], monkeypatch: pytest.MonkeyPatch) -> None:
    real = commands.status
    refreshes: list[int] = []

    def status(session: Session) -> StatusReport:
        refreshes.append(len(refreshes) + 1)
        if len(refreshes) == 3:  # still watching after the dropped Ctrl-C: end it here
            raise Interrupted(signal.SIGINT, "SIGINT")
        report = real(session)
        if len(refreshes) == 2:
            collected_while_signalled(signal.SIGINT)
        return report

    monkeypatch.setattr(commands, "status", status)
    result = cli.run(sim.kubeconfig, "status", "--watch", "--interval", "1")
    assert [type(e) for e in dropped] == [Interrupted]
    assert result.code == 130 and refreshes == [1, 2], (result.code, refreshes)
