"""The simulated cluster's clock: simulated seconds that run `1/time_scale` times faster.

Every delay in the sim (pod start, graceful termination, minReadySeconds, the operator's
reconcile period) is stated in simulated seconds, so a test can run a 30-second rollout in
milliseconds by choosing a small `time_scale`, while the behaviour (the order of events, the
gates' view of it) stays the same. Object timestamps stay wall-clock, as a real server's are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class SimClock:
    """Real seconds = simulated seconds x `time_scale` (1.0 real time, 0.01 is 100x faster)."""

    time_scale: float = 1.0
    monotonic: Callable[[], float] = time.monotonic
    _start: float = field(init=False)

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale!r}")
        self._start = self.monotonic()

    def now(self) -> float:
        """Simulated seconds since the clock started (monotonic)."""
        return (self.monotonic() - self._start) / self.time_scale

    def to_real(self, sim_seconds: float) -> float:
        """How many real seconds a simulated duration takes."""
        return max(0.0, sim_seconds) * self.time_scale

    def to_sim(self, real_seconds: float) -> float:
        """How many simulated seconds a real duration is."""
        return real_seconds / self.time_scale

    def sleep(self, sim_seconds: float) -> None:
        time.sleep(self.to_real(sim_seconds))

    def wait(self, event: threading.Event, sim_seconds: float) -> bool:
        """Wait on `event` for at most `sim_seconds` of simulated time; True when it was set."""
        return event.wait(self.to_real(sim_seconds))
