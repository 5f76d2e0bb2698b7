"""ConfigMapStateStore against the simulated API server over HTTP: round trip, threads racing
for the lock, expired-lock takeover, force unlock, tampered and foreign ConfigMaps, and a 409
on save (another client edits the ConfigMap between load and save) handled by re-reading."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from typing import Any

import pytest

from dcgm_sim import writes
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from migrator.engine.state import ConfigMapStateStore
from migrator.engine.state import lock as locking
from migrator.errors import LockHeld, StateConflict, StateCorrupt
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds
from tests.helpers.clock import FakeClock as Clock

NS = "gpu-operator"
NAME = "dcgm-migrate-state"
DOC = {"schemaVersion": 1, "stack": "clusterpolicy", "phases": {"1": {"status": "completed"}}}


@pytest.fixture
def clock() -> Clock:
    return Clock()


def kube(empty_api: ApiServer) -> Kube:
    return Kube.for_server(empty_api.url, ADMIN_TOKEN, retry=RetryPolicy(sleep=lambda s: None))


def store(empty_api: ApiServer, clock: Clock) -> ConfigMapStateStore:
    return ConfigMapStateStore(kube(empty_api), NS, clock=clock)


def stored_cm(empty_api: ApiServer) -> dict[str, Any]:
    return empty_api.store.get(kinds.CONFIGMAP, NS, NAME)


def settled_writes(empty_api: ApiServer, since: int, count: int) -> list[Any]:
    """Successful writes after `since`, once `count` are logged (the sim logs just after it
    answers)."""
    deadline = time.monotonic() + 5
    while True:
        found = [r for r in empty_api.log.since(since) if r.is_write]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.002)


def test_round_trip_through_the_configmap(empty_api: ApiServer, clock: Clock) -> None:
    s = store(empty_api, clock)
    assert s.load() is None
    saved = s.save(DOC, expected_version=None)
    cm = stored_cm(empty_api)
    assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dcgm-migrate"
    assert cm["metadata"]["resourceVersion"] == saved.version
    text = cm["data"]["state.json"]
    assert json.loads(text) == DOC
    assert cm["data"]["state.sha256"] == hashlib.sha256(text.encode()).hexdigest()
    loaded = store(empty_api, clock).load()
    assert loaded is not None and loaded.document == DOC and loaded.version == saved.version


def test_threads_racing_for_the_lock_exactly_one_wins(empty_api: ApiServer, clock: Clock) -> None:
    n = 6
    barrier = threading.Barrier(n)
    won: list[str] = []
    refused: list[LockHeld] = []
    errors: list[BaseException] = []

    def run(i: int) -> None:
        s = store(empty_api, clock)
        barrier.wait()
        try:
            s.acquire_lock(f"worker{i}@host pid {100 + i}", 60)
            won.append(f"worker{i}@host pid {100 + i}")
        except LockHeld as err:
            refused.append(err)
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(won) == 1 and len(refused) == n - 1
    assert all(won[0] in err.message and "2025-03-01T12:01:00Z" in err.message
               for err in refused)
    holder = locking.read(stored_cm(empty_api)["metadata"]["annotations"])
    assert holder is not None and holder.holder == won[0]


def test_lock_then_state_then_release(empty_api: ApiServer, clock: Clock) -> None:
    s = store(empty_api, clock)
    lock = s.acquire_lock("me@host pid 1", 60)
    assert s.load() is None  # the lock's ConfigMap holds "no state yet"
    saved = s.save(DOC, expected_version=None)
    clock.advance(30)
    lock = s.renew_lock(lock)
    s.save({**DOC, "step": 2}, expected_version=saved.version)
    annotations = stored_cm(empty_api)["metadata"]["annotations"]
    assert annotations["dcgm-migrate/lock-expires"] == "2025-03-01T12:01:30Z"
    s.release_lock(lock)
    assert locking.read(stored_cm(empty_api)["metadata"].get("annotations")) is None
    loaded = store(empty_api, clock).load()
    assert loaded is not None  # saved above
    assert loaded.document == {**DOC, "step": 2}


def test_expired_lock_is_taken_over_and_force_unlock(empty_api: ApiServer, clock: Clock) -> None:
    store(empty_api, clock).acquire_lock("alice@a pid 1", 30)
    with pytest.raises(LockHeld, match="alice@a pid 1"):
        store(empty_api, clock).acquire_lock("bob@b pid 2", 30)
    clock.advance(31)
    lock = store(empty_api, clock).acquire_lock("bob@b pid 2", 30)
    assert lock.taken_over_from == "alice@a pid 1"
    assert store(empty_api, clock).force_unlock() == "bob@b pid 2"
    assert store(empty_api, clock).force_unlock() is None
    assert store(empty_api, clock).acquire_lock("carol@c pid 3", 30).taken_over_from is None


def test_tampered_state_is_refused(empty_api: ApiServer, clock: Clock) -> None:
    store(empty_api, clock).save(DOC, expected_version=None)
    other = kube(empty_api)
    other.patch(kinds.CONFIGMAP, NAME, NS, {"data": {"state.json": json.dumps(
        {**DOC, "stack": "gpucluster"})}})
    with pytest.raises(StateCorrupt) as info:
        store(empty_api, clock).load()
    assert "does not match its checksum" in info.value.message
    assert f"kubectl -n {NS} get configmap {NAME} -o yaml" in info.value.hint


def test_a_foreign_configmap_is_refused_and_left_alone(empty_api: ApiServer, clock: Clock) -> None:
    kube(empty_api).create({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": NAME, "namespace": NS},
                      "data": {"state.json": "{}"}})
    before = stored_cm(empty_api)
    seq = settled_writes(empty_api, 0, 1)[-1].seq
    s = store(empty_api, clock)
    for call in (s.load, lambda: s.acquire_lock("me@h pid 1", 60), s.force_unlock,
                 lambda: s.save(DOC, expected_version=None)):
        with pytest.raises(StateCorrupt, match="not created by dcgm-migrate"):
            call()
    assert stored_cm(empty_api) == before
    assert settled_writes(empty_api, seq, 0) == []


def test_a_409_on_save_is_handled_by_re_reading(empty_api: ApiServer, clock: Clock) -> None:
    s = store(empty_api, clock)
    s.acquire_lock("me@host pid 1", 60)
    saved = s.save(DOC, expected_version=None)
    # A second client changes the ConfigMap (not the document) between load and save.
    kube(empty_api).patch(kinds.CONFIGMAP, NAME, NS, {"metadata": {"labels": {"team": "gpu"}}})
    seq = settled_writes(empty_api, 0, 3)[-1].seq
    again = s.save({**DOC, "step": 2}, expected_version=saved.version)
    puts = [r for r in empty_api.log.since(seq) if r.verb == "update"]
    assert [r.code for r in puts] == [409, 200]  # the stale PUT, then the PUT after re-reading
    cm = stored_cm(empty_api)
    assert cm["metadata"]["resourceVersion"] == again.version
    assert cm["metadata"]["labels"]["team"] == "gpu"
    assert json.loads(cm["data"]["state.json"])["step"] == 2


def test_a_state_change_by_another_run_is_a_conflict(empty_api: ApiServer, clock: Clock) -> None:
    mine, theirs = store(empty_api, clock), store(empty_api, clock)
    saved = mine.save(DOC, expected_version=None)
    loaded = theirs.load()
    assert loaded is not None
    theirs.save({**DOC, "by": "them"}, expected_version=loaded.version)
    with pytest.raises(StateConflict, match="changed by another run"):
        mine.save({**DOC, "by": "me"}, expected_version=saved.version)
    assert json.loads(stored_cm(empty_api)["data"]["state.json"])["by"] == "them"


def test_losing_the_lock_stops_the_next_save(empty_api: ApiServer, clock: Clock) -> None:
    slow = store(empty_api, clock)
    slow.acquire_lock("slow@a pid 1", 30)
    saved = slow.save(DOC, expected_version=None)
    clock.advance(40)
    store(empty_api, clock).acquire_lock("fast@b pid 2", 30)
    with pytest.raises(LockHeld, match="fast@b pid 2"):
        slow.save({**DOC, "late": True}, expected_version=saved.version)
    assert "late" not in json.loads(stored_cm(empty_api)["data"]["state.json"])


def _delete_held(empty_api: ApiServer) -> None:
    """Someone deletes the state ConfigMap while a finalizer holds it: Terminating."""
    writes.patch(empty_api.store, kinds.CONFIGMAP, writes.MERGE_PATCH,
                 {"metadata": {"finalizers": ["example.com/hold"]}}, namespace=NS, name=NAME)
    writes.delete(empty_api.store, kinds.CONFIGMAP, namespace=NS, name=NAME)
    assert stored_cm(empty_api)["metadata"]["deletionTimestamp"]


def test_a_terminating_state_configmap_is_never_locked(empty_api: ApiServer,
                                                       clock: Clock) -> None:
    store(empty_api, clock).save(DOC, expected_version=None)
    _delete_held(empty_api)
    before = stored_cm(empty_api)["metadata"]["resourceVersion"]
    s = store(empty_api, clock)
    assert s.load() is not None  # reading it is fine (status shows it)
    with pytest.raises(StateConflict, match="is being deleted") as err:
        s.acquire_lock("me@host pid 1", 60)
    assert "example.com/hold" in err.value.message
    assert stored_cm(empty_api)["metadata"]["resourceVersion"] == before  # nothing written


def test_a_state_configmap_deleted_during_the_run_stops_the_next_save(
        empty_api: ApiServer, clock: Clock) -> None:
    s = store(empty_api, clock)
    lock = s.acquire_lock("me@host pid 1", 60)
    saved = s.save(DOC, expected_version=None)
    _delete_held(empty_api)
    with pytest.raises(StateConflict, match="is being deleted"):
        s.save({**DOC, "late": True}, expected_version=saved.version)
    with pytest.raises(StateConflict, match="is being deleted"):
        s.renew_lock(lock)
    assert "late" not in json.loads(stored_cm(empty_api)["data"]["state.json"])
