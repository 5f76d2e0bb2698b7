"""Time, injected: the one Clock the commands hand down, so tests drive a fake clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """UTC wall time to record, monotonic time for deadlines; `wait_for` holds `condition` until
    `ready()` or `seconds` pass, and returns `ready()`."""

    def now(self) -> datetime: ...
    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...
    def wait_for(self, condition: threading.Condition, ready: Callable[[], bool],
                 seconds: float) -> bool: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait_for(self, condition: threading.Condition, ready: Callable[[], bool],
                 seconds: float) -> bool:
        return condition.wait_for(ready, timeout=seconds)
