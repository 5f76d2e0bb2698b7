"""The simulated cluster's clock: simulated seconds that run `1/time_scale` times faster.

Every delay in the sim (pod start, graceful termination, minReadySeconds, the operator's
reconcile period) is stated in simulated seconds, so a test can run a 30-second rollout in
milliseconds by choosing a small `time_scale`, while the behaviour (the order of events, the
gates' view of it) stays the same. Object timestamps stay wall-clock, as a real server's are.

`held()` stops simulated time while the sim does work that a real control plane would not
make anyone wait for: the API server's own handling of a write when its latency is modelled
(`apilatency.py`). Simulated time then runs behind real time by every held stretch (their
union: overlapping holds count once).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class SimClock:
    """Real seconds = simulated seconds x `time_scale` (1.0 real time, 0.01 is 100x faster)."""

    time_scale: float = 1.0
    monotonic: Callable[[], float] = time.monotonic
    _start: float = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)
    _holders: int = field(init=False, default=0)
    _held_since: float = field(init=False, default=0.0)
    _held: float = field(init=False, default=0.0)  # real seconds of finished holds

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale!r}")
        self._start = self.monotonic()

    def now(self) -> float:
        """Simulated seconds since the clock started (monotonic; stands still while held)."""
        with self._lock:
            real = self.monotonic()
            held = self._held + (real - self._held_since if self._holders else 0.0)
        return (real - self._start - held) / self.time_scale

    def held_seconds(self) -> float:
        """Real seconds simulated time has stood still so far (`held`)."""
        with self._lock:
            return self._held + (self.monotonic() - self._held_since if self._holders else 0.0)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Simulated time stands still for the block (and while any other hold lasts)."""
        with self._lock:
            if not self._holders:
                self._held_since = self.monotonic()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if not self._holders:
                    self._held += self.monotonic() - self._held_since

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
