"""Leader election renewing the Lease on its own thread, as client-go's `LeaderElector` does; one
attempt is `engine/leader.py`'s. A failed renewal is retried until `renew_deadline` has passed
since the last good one began; `leading()` asks the clock, so the fence closes even while an
attempt hangs. Stopping gives the Lease up (upstream's `ReleaseOnCancel`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from migrator.engine.clock import Clock
from migrator.engine.leader import LeaseLock
from migrator.errors import ClusterError

JITTER_FACTOR = 1.2  # upstream's: a renew deadline must exceed 1.2 retry periods


@dataclass(frozen=True)
class Timing:
    """client-go's LeaseDuration, RenewDeadline and RetryPeriod, in seconds (15, 10, 2),
    checked as upstream's `NewLeaderElector` checks them."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("leaseDuration must be greater than renewDeadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("renewDeadline must be greater than retryPeriod*JitterFactor")
        if self.retry_period <= 0:
            raise ValueError("retryPeriod must be greater than zero")


class LeaderElector:
    """One replica's election on `lock`, on a thread of its own (`start`, `stop`: which
    gives the Lease up, upstream's `ReleaseOnCancel`), timed on the injected clock."""

    def __init__(self, lock: LeaseLock, timing: Timing, clock: Clock, *,
                 on_started: Callable[[], None] = lambda: None,
                 on_stopped: Callable[[], None] = lambda: None,
                 on_attempt: Callable[[bool], None] = lambda _: None,
                 on_error: Callable[[ClusterError], None] = lambda _: None) -> None:
        self.lock, self.timing, self.clock = lock, timing, clock
        self.on_started, self.on_stopped = on_started, on_stopped
        self.on_attempt, self.on_error = on_attempt, on_error
        self._cond = threading.Condition()
        self._stopping = False
        self._leading = False
        self._valid_until = float("-inf")  # monotonic: the fence closes here
        self._thread: threading.Thread | None = None
        self.attempts = 0  # attempts on the Lease so far
        self.released = False  # gave the Lease up on the way out

    def leading(self) -> bool:
        """Holds the Lease and its last successful renewal began less than `renew_deadline`
        ago: the fence the writers ask before every write."""
        with self._cond:
            return self._leading and self.clock.monotonic() < self._valid_until

    def start(self) -> None:
        with self._cond:
            self._stopping = False
        self._thread = threading.Thread(target=self.run, daemon=True, name="guard-elector")
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _set_leading(self, leading: bool) -> None:
        with self._cond:
            self._leading = leading

    def run(self) -> None:
        """Acquire, renew until a renewal misses its deadline, and again, until `stop`."""
        try:
            while self._acquire():
                self._set_leading(True)
                self.on_started()
                self._renew()
                self._set_leading(False)
                self.on_stopped()
        finally:
            self._set_leading(False)
            self.released = self.lock.release()

    def _stopped(self) -> bool:
        with self._cond:
            return self._stopping

    def _wait(self, seconds: float) -> None:
        """Wait `seconds` of the clock, or until `stop`."""
        with self._cond:
            self.clock.wait_for(self._cond, lambda: self._stopping, max(0.0, seconds))

    def _try(self) -> bool:
        """One attempt; whether it leads, the fence open until `renew_deadline` after it began."""
        began = self.clock.monotonic()
        try:
            ok = self.lock.try_acquire_or_renew()
        except ClusterError as exc:
            self.on_error(exc)
            ok = False
        with self._cond:
            self.attempts += 1
            if ok:
                self._valid_until = began + self.timing.renew_deadline
            self._cond.notify_all()
        ok = ok and self.clock.monotonic() < self._valid_until
        self.on_attempt(ok)
        return ok

    def _acquire(self) -> bool:
        """Try every retry period until leading (True) or stopped (False)."""
        while not self._stopped():
            if self._try():
                return True
            self._wait(self.timing.retry_period)
        return False

    def _renew(self) -> None:
        """Renew every retry period; return once a renewal misses its deadline or on stop."""
        while True:
            self._wait(self.timing.retry_period)
            while True:
                if self._stopped() or self.clock.monotonic() >= self._valid_until:
                    return  # past the deadline without a renewal: stop leading at once
                if self._try():
                    break
                self._wait(min(self.timing.retry_period,
                               self._valid_until - self.clock.monotonic()))
