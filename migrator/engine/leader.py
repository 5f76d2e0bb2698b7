"""One attempt at leader election on a Lease, as client-go's `tryAcquireOrRenew` (with the
leader's optimistic fast path) and `release` make it; the renewing thread is `engine/elector.py`.
Expiry is judged on the candidate's own clock from when it saw the record change, and every
write carries the read `resourceVersion`, so two candidates never both win.
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


def microtime(at: datetime) -> str:
    """metav1.MicroTime's RFC 3339 form with microseconds."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseLock:
    """One candidate for one Lease. Attempts and release come from the elector's thread;
    `ensure` and the properties may be used from another (a reference swapped whole)."""

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
        """The Lease, created with no holder if there is none yet (what the shared slices
        belong to even when no replica leads, `guard --once`)."""
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
        """One attempt: create the Lease, renew it, or take it over once expired. Whether this
        candidate leads now; API errors count as not leading (retried next period)."""
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
        except ClusterError:  # a 409 included: someone else wrote first, read again next period
            self.is_leader = False
            return False
        self.is_leader = True
        return True

    def _renewed_optimistically(self, now: datetime) -> bool:
        """Upstream's fast path: a leader whose lease is valid on its own clock renews the
        record it last observed without reading it first; any failure falls back to a read."""
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
