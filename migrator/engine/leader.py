"""Leader election on a Lease as client-go makes it: `LeaseLock` is one attempt (expiry judged on
the candidate's own clock; every write carries the read `resourceVersion`), `LeaderElector` the
thread renewing it until `renew_deadline` passes without a good renewal; `leading()` asks the
clock, so the fence closes even while an attempt hangs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock, SystemClock
from migrator.errors import APIConflict, ClusterError
from migrator.model import kinds
from migrator.model import objects as o

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
JITTER_FACTOR = 1.2  # upstream's: a renew deadline must exceed 1.2 retry periods


def microtime(at: datetime) -> str:
    """metav1.MicroTime's RFC 3339 form with microseconds."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLock:
    """One candidate for one Lease; attempts and release come from the elector's thread."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *,
                 lease_seconds: int = 15, clock: Clock | None = None,
                 labels: dict[str, str] | None = None) -> None:
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.lease_seconds = lease_seconds
        self.labels = dict(labels or {})
        self._clock: Clock = clock or SystemClock()  # the wall time of the record's stamps
        self._observed: str | None = None  # the record (spec) as last read, canonical JSON
        self._observed_at: datetime | None = None
        self.lease: Obj | None = None  # as last read or written (None before the first attempt)
        self.is_leader = False

    def _new(self, spec: Obj) -> Obj:
        return {"apiVersion": kinds.LEASE.api_version, "kind": kinds.LEASE.kind,
                "metadata": {"name": self.name, "namespace": self.namespace,
                             **({"labels": dict(self.labels)} if self.labels else {})},
                "spec": spec}

    def ensure(self) -> Obj:
        """The Lease, created with no holder if there is none yet (the shared slices' owner)."""
        lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
        if lease is None:
            try:
                lease = self.kube.create(self._new({}))
            except APIConflict:
                lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
        if lease is None:
            raise ClusterError(f"Lease/{self.name} vanished while it was created")
        self.lease = lease
        return lease

    @property
    def holder(self) -> str:
        """Who holds the Lease as last observed ('' for nobody)."""
        return str(o.dig(self.lease, "spec", "holderIdentity") or "")

    def _observe(self, lease: Obj, now: datetime) -> None:
        record = json.dumps(lease.get("spec") or {}, sort_keys=True)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self.lease = lease

    def _record(self, now: datetime, spec: Obj) -> Obj:
        mine = spec.get("holderIdentity") == self.identity
        transitions = int(spec.get("leaseTransitions") or 0)
        return {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime")
                else microtime(now), "renewTime": microtime(now),
                "leaseTransitions": transitions if mine or not spec else transitions + 1}

    def _renew(self, lease: Obj, now: datetime) -> None:
        """Write this candidate's record over `lease` (labels added where missing)."""
        meta, spec = o.meta(lease), lease.get("spec") or {}
        labels = {**(meta.get("labels") or {}), **self.labels}
        if labels != (meta.get("labels") or {}):
            lease = {**lease, "metadata": {**meta, "labels": labels}}
        self._observe(self.kube.replace({**lease, "spec": {**spec, **self._record(now, spec)}}),
                      now)

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create, renew or take over (once expired) the Lease. Whether it leads."""
        now = self._clock.now()
        if self._renewed_optimistically(now):
            return True
        try:
            lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
            if lease is None:
                self._observe(self.kube.create(self._new(self._record(now, {}))), now)
            else:
                self._observe(lease, now)
                spec = lease.get("spec") or {}
                holder = str(spec.get("holderIdentity") or "")
                duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
                assert self._observed_at is not None
                if (holder and holder != self.identity
                        and self._observed_at + timedelta(seconds=duration) > now):
                    self.is_leader = False
                    return False
                self._renew(lease, now)
            self.is_leader = True
        except APIConflict:  # someone else wrote first: read again next period
            self.is_leader = False
        except ClusterError:  # not leading, and the elector counts the API error
            self.is_leader = False
            raise
        return self.is_leader

    def _renewed_optimistically(self, now: datetime) -> bool:
        """Upstream's fast path: a leader valid on its own clock renews the record it last
        observed without reading it first; any failure falls back to a read."""
        if not (self.is_leader and self.lease is not None and self._observed_at is not None
                and self._observed_at + timedelta(seconds=self.lease_seconds) > now):
            return False
        try:
            self._renew(self.lease, now)
        except ClusterError:
            return False
        return True

    def release(self) -> bool:
        """Give the Lease up if this candidate holds it (on shutdown). Whether it did."""
        if not self.is_leader:
            return False
        self.is_leader = False
        now = self._clock.now()
        try:
            lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
            spec = (lease or {}).get("spec") or {}
            if lease is None or spec.get("holderIdentity") != self.identity:
                return False
            released = {**lease, "spec": {**spec, "holderIdentity": "",
                                          "leaseDurationSeconds": 1,
                                          "acquireTime": microtime(now),
                                          "renewTime": microtime(now)}}
            self._observe(self.kube.replace(released), now)
            return True
        except ClusterError:
            return False


@dataclass(frozen=True)
class Timing:
    """client-go's LeaseDuration, RenewDeadline and RetryPeriod, checked as upstream does."""

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
    """One replica's election on `lock`, on a thread of its own; `stop` gives the Lease up."""

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
        self._valid_until = float("-inf")  # monotonic: the fence closes here (-inf: not leading)
        self._thread: threading.Thread | None = None
        self.attempts = 0  # attempts on the Lease so far
        self.released = False  # gave the Lease up on the way out

    def leading(self) -> bool:
        """Holds the Lease, renewed less than `renew_deadline` ago: the writers' fence."""
        with self._cond:
            return self.clock.monotonic() < self._valid_until

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

    def _stop_leading(self) -> None:
        with self._cond:
            self._valid_until = float("-inf")

    def run(self) -> None:
        """Acquire, renew until a renewal misses its deadline, and again, until `stop`."""
        try:
            while self._acquire():
                self.on_started()
                self._renew()
                self._stop_leading()
                self.on_stopped()
        finally:
            self._stop_leading()
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
