"""Time, injected: the one Clock the commands hand down with the run (`loop.Run`) to the
apply back end, its waiter, the run's cache and the state session, and that the guard and its Lease
election take.

Nothing in the engine reads the real clock directly, so tests of timeouts, settle countdowns,
cache fences and lease expiry can drive a fake clock and take no real time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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

    def wait_for(self, condition: threading.Condition, ready: Callable[[], bool],
                 seconds: float) -> bool:
        """With `condition` held: wait until `ready()` holds (another thread notifies the
        condition) or `seconds` of this clock's time pass; the last `ready()`."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait_for(self, condition: threading.Condition, ready: Callable[[], bool],
                 seconds: float) -> bool:
        return condition.wait_for(ready, timeout=seconds)
