"""One attempt at leader election on a `coordination.k8s.io/v1` Lease, as client-go makes it
(staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go, `tryAcquireOrRenew` with
its optimistic fast path for the leader, and `release`; resourcelock/leaselock.go).

- The record is the Lease's spec: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
  `renewTime`, `leaseTransitions`.
- Expiry is judged on the candidate's own clock from when it last *observed the record change*,
  not from `renewTime` (upstream's `observedTime`), so clock skew between pods does not matter.
- Every write is a create or an update carrying the last-read `resourceVersion`: two candidates
  racing for an expired Lease cannot both win (the loser gets a 409 Conflict).
- Acquiring from another holder sets `acquireTime` and increments `leaseTransitions`; renewing
  keeps both. Release writes an empty `holderIdentity` with `leaseDurationSeconds: 1`, so a
  standby takes over at once instead of waiting out the lease.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock, SystemClock
from migrator.errors import APIConflict, ClusterError
from migrator.model import kinds
from migrator.model import objects as o

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def microtime(at: datetime) -> str:
    """metav1.MicroTime's RFC 3339 form with microseconds."""
    return at.astimezone(UTC).strftime(MICROTIME)


class LeaseLock:
    """One candidate for one Lease. Its attempts and release come from one thread (the
    elector's, `engine/elector.py`); `ensure` and the read-only properties may be used from
    another (a reference swapped whole, never a record half written)."""

    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, *,
                 lease_seconds: int = 15, clock: Clock | None = None,
                 labels: dict[str, str] | None = None) -> None:
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.labels = dict(labels or {})
        self._clock: Clock = clock or SystemClock()  # the wall time of the record's stamps
        self._observed: str | None = None  # the record (spec) as last read, canonical JSON
        self._observed_at: datetime | None = None
        self._lease: Obj | None = None
        self.is_leader = False

    @property
    def lease(self) -> Obj | None:
        """The Lease as last read or written (None before the first attempt)."""
        return self._lease

    def _new(self, spec: Obj) -> Obj:
        return {"apiVersion": kinds.LEASE.api_version, "kind": kinds.LEASE.kind,
                "metadata": {"name": self.name, "namespace": self.namespace,
                             **({"labels": dict(self.labels)} if self.labels else {})},
                "spec": spec}

    def _labelled(self, lease: Obj) -> Obj:
        meta = o.meta(lease)
        have = meta.get("labels") or {}
        if all(have.get(k) == v for k, v in self.labels.items()):
            return lease
        return {**lease, "metadata": {**meta, "labels": {**have, **self.labels}}}

    def ensure(self) -> Obj:
        """The Lease, created with no holder if there is none yet: what the guard's shared
        slices belong to even when no replica leads (`guard --once`)."""
        lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
        if lease is None:
            try:
                lease = self.kube.create(self._new({}))
            except APIConflict:
                lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
        if lease is None:
            raise ClusterError(f"Lease/{self.name} vanished while it was created")
        self._lease = lease
        return lease

    @property
    def holder(self) -> str:
        """Who holds the Lease as last observed ('' for nobody)."""
        return str(o.dig(self._lease, "spec", "holderIdentity") or "")

    def _observe(self, lease: Obj, now: datetime) -> None:
        record = json.dumps(lease.get("spec") or {}, sort_keys=True)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self._lease = lease

    def _record(self, now: datetime, spec: Obj | None) -> Obj:
        spec = spec or {}
        mine = spec.get("holderIdentity") == self.identity
        transitions = int(spec.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": spec.get("acquireTime") if mine and spec.get("acquireTime")
            else microtime(now),
            "renewTime": microtime(now),
            "leaseTransitions": transitions if mine or not spec else transitions + 1,
        }

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create the Lease, renew it, or take it over once expired. Returns
        whether this candidate leads now; API errors count as not leading (retried next
        period), as upstream does."""
        now = self._clock.now()
        if self._renewed_optimistically(now):
            return True
        try:
            lease = self.kube.get(kinds.LEASE, self.name, self.namespace)
            if lease is None:
                self._observe(self.kube.create(self._new(self._record(now, None))), now)
                self.is_leader = True
                return True
            self._observe(lease, now)
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            duration = int(spec.get("leaseDurationSeconds") or self.lease_seconds)
            assert self._observed_at is not None
            expired = self._observed_at + timedelta(seconds=duration) <= now
            if holder and holder != self.identity and not expired:
                self.is_leader = False
                return False
            updated = {**self._labelled(lease), "spec": {**spec, **self._record(now, spec)}}
            self._observe(self.kube.replace(updated), now)
            self.is_leader = True
            return True
        except APIConflict:
            self.is_leader = False  # someone else wrote first: read again next period
            return False
        except ClusterError:
            self.is_leader = False
            return False

    def _renewed_optimistically(self, now: datetime) -> bool:
        """Upstream's fast path: a leader whose lease is still valid on its own clock renews
        the record it last observed, at that record's resourceVersion, without reading it
        first (one request per renewal instead of two). Any failure, a 409 from a record
        changed meanwhile included, falls back to the read-then-decide path."""
        lease = self._lease
        if not (self.is_leader and lease is not None and self._observed_at is not None
                and self._observed_at + timedelta(seconds=self.lease_seconds) > now):
            return False
        spec = lease.get("spec") or {}
        try:
            self._observe(self.kube.replace({**self._labelled(lease),
                                             "spec": {**spec, **self._record(now, spec)}}), now)
        except ClusterError:
            return False
        return True

    def release(self) -> bool:
        """Give the Lease up if this candidate holds it (on shutdown). Returns whether it did."""
        if not self.is_leader:
            return False
        self.is_leader = False
        now = self._clock.now()
        if self._renewed_optimistically(now):
            return True
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
