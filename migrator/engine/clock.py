"""Time, injected: the one Clock the commands hand down to the runner and its waiter.

Nothing in the engine reads the real clock directly, so tests of timeouts, settle countdowns
and the read-reuse window can drive a fake clock and take no real time.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Wall time for what is recorded, monotonic time for deadlines, and a way to wait."""

    def now(self) -> datetime:
        """The wall time, timezone-aware UTC (timestamps compared with recorded ones)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (deadlines, ages of reads)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
