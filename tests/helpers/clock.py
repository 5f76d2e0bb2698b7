"""The one fake clock of the tests: time moves only when a test (or a sleep) moves it.

It is a `migrator.engine.clock.Clock` (now / monotonic / sleep / wait_for): the clock the
runner, the waiter, the run's cache, the state document, the state store, the guard and its
Lease election all take. `SeenClock` is the real one, for a loop on its own thread that a test
must see live through a span of time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from migrator.engine.clock import SystemClock

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    """`sleep(s)` returns at once and moves both clocks by `s`; `slept` lists every sleep."""

    def __init__(self, start: datetime = T0, monotonic: float = 1000.0) -> None:
        self.wall = start
        self.mono = monotonic
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"asked to sleep {seconds} s"
        self.slept.append(seconds)
        self.advance(seconds)

    def wait_for(self, condition: threading.Condition, ready: Callable[[], bool],
                 seconds: float) -> bool:
        """What another thread makes ready is real: wait for its notify in real time, at most
        `seconds` (no fake clock makes a watch deliver sooner). Moves no time."""
        return condition.wait_for(ready, timeout=seconds)

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


class SeenClock(SystemClock):
    """The real clock, remembering the latest time the code under test read from it: a test
    waits until that code has itself lived through a span (`lived_through`), so a starved
    thread makes the test wait longer instead of letting it pass having proved nothing (a
    real-time sleep proves nothing about a thread that did not run)."""

    def __init__(self) -> None:
        self.latest = 0.0
        self._cond = threading.Condition()

    def monotonic(self) -> float:
        now = super().monotonic()
        with self._cond:
            self.latest = max(self.latest, now)
            self._cond.notify_all()
        return now

    def lived_through(self, seconds: float, timeout: float = 120.0) -> bool:
        """Wait (at most `timeout` real seconds) until the code read this clock `seconds`
        after the latest time it had read so far."""
        with self._cond:
            target = self.latest + seconds
            return self._cond.wait_for(lambda: self.latest >= target, timeout)
