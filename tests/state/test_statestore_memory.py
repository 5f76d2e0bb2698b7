"""State store logic on the in-memory ConfigMap: checksum/tamper detection, foreign ConfigMaps,
resourceVersion-guarded saves and re-reads after a 409, and the lock (contention, expiry,
takeover, renew, release, unlock), with an injected clock."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from migrator.engine.state import lock as liveness
from migrator.engine.state import lock as locking
from migrator.engine.state.configmap import StoredState
from migrator.engine.state.lock import HolderCheck
from migrator.errors import LockHeld, StateConflict, StateCorrupt, exit_code_for
from tests.helpers.clock import T0
from tests.helpers.clock import FakeClock as Clock
from tests.helpers.memorystate import MemoryConfigMap, MemoryStateStore


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cm() -> MemoryConfigMap:
    return MemoryConfigMap()


def store(cm: MemoryConfigMap, clock: Clock) -> MemoryStateStore:
    return MemoryStateStore(cm, clock=clock)


DOC: dict[str, Any] = {"schemaVersion": 1, "stack": "gpucluster", "phases": {"1": "completed"},
                       "note": "ünïcode"}


def test_round_trip_with_canonical_json_and_checksum(cm: MemoryConfigMap, clock: Clock) -> None:
    s = store(cm, clock)
    assert s.load() is None
    saved = s.save(DOC, expected_version=None)
    obj = cm.object
    assert obj is not None
    text = obj["data"]["state.json"]
    assert text == json.dumps(DOC, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert obj["data"]["state.sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "dcgm-migrate"}
    assert store(cm, clock).load() == StoredState(DOC, saved.version)
    again = s.save({**DOC, "stack": "clusterpolicy"}, expected_version=saved.version)
    assert int(again.version) > int(saved.version)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda o: o["data"].__setitem__("state.json", o["data"]["state.json"].replace(
            "completed", "pending")), "does not match its checksum"),
        (lambda o: o["data"].update({"state.json": "{nope", "state.sha256":
                                     hashlib.sha256(b"{nope").hexdigest()}), "invalid JSON"),
        (lambda o: o["data"].update({"state.json": "[1]", "state.sha256":
                                     hashlib.sha256(b"[1]").hexdigest()}), "not an object"),
        (lambda o: o["data"].pop("state.json"), "has no state.json"),
        (lambda o: o["data"].pop("state.sha256"), "does not match its checksum"),
    ],
)
def test_tampered_state_is_refused_with_a_way_out(
    cm: MemoryConfigMap, clock: Clock, change: Any, words: str
) -> None:
    store(cm, clock).save(DOC, expected_version=None)
    cm.edit(change)
    with pytest.raises(StateCorrupt) as info:
        store(cm, clock).load()
    assert words in info.value.message
    assert "gpu-operator/dcgm-migrate-state" in info.value.message
    assert "kubectl -n gpu-operator get configmap dcgm-migrate-state -o yaml" in info.value.hint
    # Deleting alone leads to a lost state that apply and rollback refuse: the way out named
    # is putting the backup in its place, as commands that work as written.
    assert "delete the ConfigMap to start over" not in info.value.hint
    for command in ("kubectl -n gpu-operator delete configmap dcgm-migrate-state",
                    "kubectl -n gpu-operator create configmap dcgm-migrate-state "
                    "--from-file=state.json --from-file=state.sha256",
                    "kubectl -n gpu-operator label configmap dcgm-migrate-state "
                    "app.kubernetes.io/managed-by=dcgm-migrate"):
        assert f"`{command}`" in info.value.hint
    assert exit_code_for(info.value) == 3


def test_a_foreign_configmap_is_never_read_or_written(cm: MemoryConfigMap, clock: Clock) -> None:
    cm.create({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": cm.name, "namespace": cm.namespace},
               "data": {"state.json": "{}"}})
    before = cm.object
    s = store(cm, clock)
    for call in (s.load, lambda: s.acquire_lock("a", 60), s.force_unlock,
                 lambda: s.save(DOC, expected_version=None)):
        with pytest.raises(StateCorrupt, match="not created by dcgm-migrate"):
            call()
    assert cm.object == before and cm.writes == 1


def test_a_stale_version_is_a_conflict_when_the_document_changed(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    a, b = store(cm, clock), store(cm, clock)
    first = a.save(DOC, expected_version=None)
    assert b.load() == first
    a.save({**DOC, "stack": "x"}, expected_version=first.version)
    with pytest.raises(StateConflict, match="changed by another run") as info:
        b.save({**DOC, "stack": "y"}, expected_version=first.version)
    assert exit_code_for(info.value) == 4
    obj = cm.object
    assert obj is not None  # saved above: the ConfigMap exists
    assert json.loads(obj["data"]["state.json"])["stack"] == "x"


def test_saving_over_state_the_caller_did_not_know_is_a_conflict(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    a, b = store(cm, clock), store(cm, clock)
    assert b.load() is None
    a.save(DOC, expected_version=None)
    with pytest.raises(StateConflict):
        b.save({"other": 1}, expected_version=None)


def test_a_409_from_a_metadata_change_is_retried_on_the_new_version(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    s = store(cm, clock)
    lock = s.acquire_lock("me@host pid 1", 60)
    loaded = s.save(DOC, expected_version=None)
    cm.edit(lambda o: o["metadata"].setdefault("labels", {}).update({"team": "gpu"}))
    saved = s.save({**DOC, "stack": "y"}, expected_version=loaded.version)
    obj = cm.object
    assert obj is not None and obj["metadata"]["resourceVersion"] == saved.version
    assert obj["metadata"]["labels"]["team"] == "gpu"  # the other client's change is kept
    assert locking.is_ours(locking.read(obj["metadata"]["annotations"]), lock)
    assert json.loads(obj["data"]["state.json"])["stack"] == "y"


def test_own_lock_writes_do_not_cost_a_conflict(cm: MemoryConfigMap, clock: Clock) -> None:
    s = store(cm, clock)
    lock = s.acquire_lock("me@host pid 1", 60)
    assert s.load() is None  # the lock's ConfigMap holds "no state yet"
    saved = s.save(DOC, expected_version=None)
    clock.advance(20)
    lock = s.renew_lock(lock)
    writes = cm.writes
    s.save({**DOC, "n": 2}, expected_version=saved.version)
    assert cm.writes == writes + 1  # straight PUT on the renewed version, no 409 round
    s.release_lock(lock)
    obj = cm.object
    assert obj is not None  # saved above: the ConfigMap exists
    assert locking.read(obj["metadata"].get("annotations")) is None
    loaded = store(cm, clock).load()
    assert loaded is not None  # saved above
    assert loaded.document == {**DOC, "n": 2}


def test_second_run_gets_lock_held_naming_holder_and_expiry(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    store(cm, clock).acquire_lock("alice@gpu-box pid 42", 90)
    with pytest.raises(LockHeld) as info:
        store(cm, clock).acquire_lock("bob@laptop pid 7", 90)
    assert "alice@gpu-box pid 42" in info.value.message
    assert "2025-03-01T12:01:30Z" in info.value.message
    assert "dcgm-migrate unlock" in info.value.hint
    assert exit_code_for(info.value) == 4


def test_an_expired_lock_is_taken_over_and_the_old_holder_loses(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    old, new = store(cm, clock), store(cm, clock)
    old_lock = old.acquire_lock("alice@a pid 1", 30)
    state = old.save(DOC, expected_version=None)
    clock.advance(31)
    lock = new.acquire_lock("bob@b pid 2", 30)
    assert lock.taken_over_from == "alice@a pid 1"
    with pytest.raises(LockHeld, match="taken over by bob@b pid 2"):
        old.renew_lock(old_lock)
    with pytest.raises(LockHeld, match="bob@b pid 2"):
        old.save({**DOC, "late": True}, expected_version=state.version)
    old.release_lock(old_lock)  # not ours any more: left alone
    obj = cm.object
    assert obj is not None  # saved and locked: the ConfigMap exists, with the lock
    held = locking.read(obj["metadata"]["annotations"])
    assert held is not None
    assert held.holder == "bob@b pid 2"


def _exited_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def _on_this_host(pid: int, started: int | None) -> HolderCheck:
    """A store whose run is `pid` (started at `started`) of this very host."""
    here = liveness.this_process()
    return HolderCheck(here=locking.Process(here.host, pid, started, here.boot, here.pidns))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc on this system")
def test_a_killed_run_on_this_host_is_taken_over_at_once(
    cm: MemoryConfigMap, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lease has two minutes to run, but its process is gone: the next run takes the lock
    at once and says whose and why. Nothing is signalled (on Windows `os.kill(pid, 0)` would
    send the process Ctrl+C): /proc is read."""

    def no_signals(pid: int, sig: int) -> None:
        raise AssertionError(f"the store signalled pid {pid}")

    monkeypatch.setattr(os, "kill", no_signals)
    dead = _exited_pid()
    MemoryStateStore(cm, clock=clock, holders=_on_this_host(dead, 12345)).acquire_lock(
        f"ci@{socket.gethostname()} pid {dead}", 120)
    clock.advance(1)
    lock = store(cm, clock).acquire_lock(locking.default_holder(), 120)
    assert lock.taken_over_from == f"ci@{socket.gethostname()} pid {dead}"
    said = locking.takeover_message(lock)
    assert said is not None and said.startswith(
        f"took over the lock of ci@{socket.gethostname()} pid {dead} at once: its process "
        f"(pid {dead} on {socket.gethostname()}) no longer runs, so its run is gone (its "
        "lease ran until 2025-03-01T12:02:00Z)"), said


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc on this system")
def test_a_reused_pid_is_not_the_holder_and_a_live_one_is_refused(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    """The pid runs, but a later process than the one that took the lock: gone. The same pid
    and start time: alive, refused until its lease runs out."""
    me = liveness.this_process()
    assert me.started is not None
    MemoryStateStore(cm, clock=clock, holders=_on_this_host(me.pid, me.started - 1)
                     ).acquire_lock("old@here pid 1", 120)
    lock = store(cm, clock).acquire_lock("new@here pid 2", 120)
    assert lock.gone == f"pid {me.pid} on {me.host} is another process now (started after " \
                        "the holder's)"
    store(cm, clock).force_unlock()
    alive = MemoryStateStore(cm, clock=clock, holders=_on_this_host(os.getppid(), None))
    alive.acquire_lock("parent@here pid 3", 120)
    with pytest.raises(LockHeld, match="parent@here pid 3"):
        store(cm, clock).acquire_lock("new@here pid 2", 120)


def test_a_holder_on_another_host_is_judged_by_its_lease(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    """No process of another host can be looked at: its lock holds until it expires."""
    elsewhere = HolderCheck(here=locking.Process("other-host", 1, 1, "b", "pid:[1]"))
    MemoryStateStore(cm, clock=clock, holders=elsewhere).acquire_lock("a@other-host pid 1", 120)
    clock.advance(119)
    with pytest.raises(LockHeld):
        store(cm, clock).acquire_lock(locking.default_holder(), 120)
    clock.advance(1)
    assert store(cm, clock).acquire_lock(locking.default_holder(), 120).gone is None


def test_a_holder_that_keeps_renewing_is_never_taken_over(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    """Alive is renewing: an hour of renewals every 30 s keeps a 120 s lock; once they stop,
    the lock is taken over 120 s after the last one."""
    holder = store(cm, clock)
    lock = holder.acquire_lock("alice@a pid 1", 120)
    for _ in range(120):
        clock.advance(30)
        lock = holder.renew_lock(lock)
        with pytest.raises(LockHeld, match="alice@a pid 1"):
            store(cm, clock).acquire_lock("bob@b pid 2", 120)
    assert lock.expires == clock.now() + timedelta(seconds=120)
    clock.advance(119.9)
    with pytest.raises(LockHeld):
        store(cm, clock).acquire_lock("bob@b pid 2", 120)
    clock.advance(0.1)
    assert store(cm, clock).acquire_lock("bob@b pid 2", 120).taken_over_from == "alice@a pid 1"
    with pytest.raises(LockHeld, match="taken over by bob@b pid 2"):
        holder.renew_lock(lock)


def test_renew_extends_and_force_unlock_reports_the_holder(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    s = store(cm, clock)
    assert s.force_unlock() is None
    lock = s.acquire_lock("alice@a pid 1", 60)
    clock.advance(45)
    renewed = s.renew_lock(lock)
    assert renewed.expires == T0 + timedelta(seconds=105) and renewed.acquired == lock.acquired
    assert store(cm, clock).force_unlock() == "alice@a pid 1"
    assert store(cm, clock).force_unlock() is None
    with pytest.raises(LockHeld, match="was removed"):
        s.renew_lock(renewed)
    assert store(cm, clock).acquire_lock("bob@b pid 2", 60).taken_over_from is None


def test_threads_racing_for_the_lock_exactly_one_wins(cm: MemoryConfigMap, clock: Clock) -> None:
    n = 8
    barrier = threading.Barrier(n)
    won: list[str] = []
    refused: list[LockHeld] = []

    def run(i: int) -> None:
        s = store(cm, clock)
        barrier.wait()
        try:
            s.acquire_lock(f"worker{i}@h pid {i}", 60)
            won.append(f"worker{i}@h pid {i}")
        except LockHeld as err:
            refused.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == n - 1
    assert all(won[0] in err.message for err in refused)


def test_load_then_lock_and_save_with_the_same_store(cm: MemoryConfigMap, clock: Clock) -> None:
    """A command loads, locks and saves with one store: its own lock write moved the
    ConfigMap's version on, and the save still lands on the version it loaded."""
    first = store(cm, clock).save(DOC, expected_version=None)
    runner = store(cm, clock)
    loaded = runner.load()
    assert loaded is not None
    runner.acquire_lock("me@h pid 1", 60)
    writes = cm.writes
    saved = runner.save({**DOC, "n": 1}, expected_version=loaded.version)
    assert cm.writes == writes + 1 and int(saved.version) > int(first.version)


def test_a_version_another_store_handed_out_holds_only_while_exact(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    """A version this store did not hand out is taken at that exact resourceVersion only:
    once anything moved it (here the lock), the save refuses rather than guess."""
    loaded = store(cm, clock).save(DOC, expected_version=None)
    exact = store(cm, clock).save({**DOC, "n": 1}, expected_version=loaded.version)
    runner = store(cm, clock)
    runner.acquire_lock("me@h pid 1", 60)
    with pytest.raises(StateConflict):
        runner.save({**DOC, "n": 2}, expected_version=exact.version)


def test_a_change_between_load_and_lock_is_still_a_conflict(
    cm: MemoryConfigMap, clock: Clock
) -> None:
    loaded = store(cm, clock).save(DOC, expected_version=None)
    store(cm, clock).save({**DOC, "by": "someone else"}, expected_version=loaded.version)
    runner = store(cm, clock)
    runner.acquire_lock("me@h pid 1", 60)
    with pytest.raises(StateConflict):
        runner.save({**DOC, "n": 1}, expected_version=loaded.version)
