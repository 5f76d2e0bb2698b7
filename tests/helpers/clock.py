"""The one fake clock of the tests: time moves only when a test (or a sleep) moves it.

It is a `migrator.engine.clock.Clock` (now / monotonic / sleep): the clock the runner, the
waiter, the state document and the state store all take.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds
