"""Leader election on a coordination.k8s.io/v1 Lease (engine/leader.py) against the sim's API
server: the sim serves Leases (discovery, CRUD, watch, 409 on a stale resourceVersion); two
candidates, one leads; the other takes over only after the lease expires on its own clock, or
at once after a clean release; leaseTransitions counts the hand-overs."""

from __future__ import annotations

from dcgm_sim.server import ApiServer
from migrator.engine.leader import LeaseLock
from migrator.errors import APIConflict
from migrator.kube.client import Kube
from migrator.model import kinds
from tests.helpers.clock import FakeClock

NS = "gpu-operator"


def _lease(kube: Kube) -> dict[str, object]:
    lease = kube.get(kinds.LEASE, "guard", NS)
    assert lease is not None
    spec: dict[str, object] = lease["spec"]
    return spec


def test_the_sim_serves_leases_with_optimistic_concurrency(empty_api: ApiServer) -> None:
    kube = Kube.for_server(empty_api.url)
    assert kube.has_kind(kinds.LEASE)
    listed = kube.list(kinds.LEASE, NS)
    created = kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                           "metadata": {"name": "guard", "namespace": NS},
                           "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    events = kube.watch(kinds.LEASE, NS, resource_version=listed.resource_version,
                        timeout_seconds=2)
    etype, obj = next(iter(events))
    assert (etype, obj["spec"]["holderIdentity"]) == ("ADDED", "a")
    kube.replace({**created, "spec": {**created["spec"], "holderIdentity": "b"}})
    try:
        kube.replace({**created, "spec": {**created["spec"], "holderIdentity": "c"}})
        raise AssertionError("a stale resourceVersion must be refused")
    except APIConflict:
        pass
    assert _lease(kube)["holderIdentity"] == "b"


def test_one_of_two_candidates_leads_and_the_other_takes_over_after_expiry(
        empty_api: ApiServer) -> None:
    clock = FakeClock()
    kube = Kube.for_server(empty_api.url)
    a = LeaseLock(kube, NS, "guard", "a", lease_seconds=15, clock=clock)
    b = LeaseLock(kube, NS, "guard", "b", lease_seconds=15, clock=clock)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    first = _lease(kube)
    assert first["holderIdentity"] == "a" and first["leaseTransitions"] == 0
    assert first["acquireTime"] == first["renewTime"] == "2025-03-01T12:00:00.000000Z"

    clock.advance(10)
    assert a.try_acquire_or_renew() is True  # renewal keeps acquireTime and the count
    renewed = _lease(kube)
    assert renewed["acquireTime"] == first["acquireTime"]
    assert renewed["renewTime"] == "2025-03-01T12:00:10.000000Z"
    assert renewed["leaseTransitions"] == 0

    clock.advance(2)  # b polls and sees the renewal: its clock for expiry restarts now
    assert b.try_acquire_or_renew() is False and b.holder == "a"
    clock.advance(14)  # the record has not changed for 14 s on b's clock: a still leads
    assert b.try_acquire_or_renew() is False
    clock.advance(1)  # 15 s without a change: expired, judged on b's own observation
    assert b.try_acquire_or_renew() is True
    taken = _lease(kube)
    assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
    assert taken["acquireTime"] == "2025-03-01T12:00:27.000000Z"
    assert a.try_acquire_or_renew() is False and a.is_leader is False


def test_a_clean_release_hands_over_at_once(empty_api: ApiServer) -> None:
    clock = FakeClock()
    kube = Kube.for_server(empty_api.url)
    a = LeaseLock(kube, NS, "guard", "a", clock=clock)
    b = LeaseLock(kube, NS, "guard", "b", clock=clock)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    assert a.release() is True
    released = _lease(kube)
    assert released["holderIdentity"] == "" and released["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew() is True  # no waiting out the 15 s
    assert _lease(kube)["leaseTransitions"] == 1
    assert a.release() is False  # not the holder any more: nothing written


def test_two_candidates_racing_for_an_expired_lease_cannot_both_win(
        empty_api: ApiServer) -> None:
    clock = FakeClock()
    kube = Kube.for_server(empty_api.url)
    a = LeaseLock(kube, NS, "guard", "a", clock=clock)
    assert a.try_acquire_or_renew()
    b = LeaseLock(kube, NS, "guard", "b", clock=clock)
    c = LeaseLock(kube, NS, "guard", "c", clock=clock)
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.advance(16)
    # Both read the expired record; b writes first, c's update carries a stale version.
    stale = kube.get(kinds.LEASE, "guard", NS)
    assert b.try_acquire_or_renew() is True
    original_get = kube.get
    kube.get = lambda *args, **kw: stale  # type: ignore[method-assign]  # patched for this one test
    try:
        assert c.try_acquire_or_renew() is False
    finally:
        kube.get = original_get  # type: ignore[method-assign]  # patched for this one test
    assert _lease(kube)["holderIdentity"] == "b"
