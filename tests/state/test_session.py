"""The run session (engine/state/store.py): the lock around a run, saves on the version last
seen, the lock heartbeat on the injected clock, and the ConfigMap's name and label taken from
the catalog (plans/common.yaml)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from migrator.engine.progress import Listener
from migrator.engine.state import State
from migrator.engine.state import lock as locking
from migrator.engine.state.store import LOCK_TTL_SECONDS, RunSession
from migrator.errors import StateConflict, StateCorrupt
from migrator.model.stacks import Label, load_catalog
from tests.helpers.clock import FakeClock
from tests.helpers.memorystate import MemoryConfigMap, MemoryStateStore

HOLDER = "tester@host pid 1"


class Said(Listener):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def session(store: MemoryStateStore, clock: FakeClock, *,
            version: str | None = None, listener: Listener | None = None) -> RunSession:
    return RunSession(store, version=version, holder=HOLDER, clock=clock,
                      listener=listener or Listener())


def _annotations(cm: MemoryConfigMap) -> dict[str, str]:
    obj = cm.object
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


def _fresh() -> tuple[FakeClock, MemoryConfigMap, MemoryStateStore, State]:
    """A clock, an empty ConfigMap, the store on it and a new state document."""
    clock, cm = FakeClock(), MemoryConfigMap()
    return clock, cm, MemoryStateStore(cm, clock=clock), State("ns", clock=clock)


def test_the_lock_is_held_inside_and_released_after_even_on_failure() -> None:
    clock, cm = FakeClock(), MemoryConfigMap()
    store = MemoryStateStore(cm, clock=clock)
    with pytest.raises(RuntimeError), session(store, clock) as run:
        assert _annotations(cm)[locking.HOLDER] == HOLDER
        run.save(State("ns", clock=clock))
        raise RuntimeError("the run failed")
    assert locking.HOLDER not in _annotations(cm)
    loaded = store.load()
    assert loaded is not None and loaded.document["namespace"] == "ns"


def test_saves_follow_the_version_last_seen_and_refuse_another_writer() -> None:
    clock, cm, store, state = _fresh()
    with session(store, clock) as run:
        run.save(state)
        state.stack = "gpucluster"
        run.save(state)  # on the version the first save returned, not a stale one
        cm.edit(lambda obj: obj["data"].update({"state.json": "{}", "state.sha256":
                                                  obj["data"]["state.sha256"]}))
        with pytest.raises(StateCorrupt):
            run.save(state)
    other = MemoryStateStore(MemoryConfigMap(), clock=clock)
    with session(other, clock) as run:
        run.save(state)
        replaced = State("ns", stack="clusterpolicy", clock=clock).to_document()
        saved = other.load()
        assert saved is not None
        other.save(replaced, expected_version=saved.version)
        with pytest.raises(StateConflict):
            run.save(state)


def test_the_heartbeat_renews_only_after_a_quarter_of_the_ttl() -> None:
    clock, cm = FakeClock(), MemoryConfigMap()
    store = MemoryStateStore(cm, clock=clock)
    with session(store, clock) as run:
        first = _annotations(cm)[locking.EXPIRES]
        writes = cm.writes
        clock.advance(LOCK_TTL_SECONDS / 4)
        run.heartbeat()
        assert cm.writes == writes  # not yet: exactly a quarter has passed
        clock.advance(1)
        run.heartbeat()
        assert cm.writes == writes + 1
        assert _annotations(cm)[locking.EXPIRES] > first
        run.heartbeat()
        assert cm.writes == writes + 1  # renewed just now


def _saved_stack(store: MemoryStateStore) -> object:
    loaded = store.load()
    return None if loaded is None else loaded.document.get("stack")


def test_a_confirmation_rides_on_the_next_save_or_is_written_by_flush() -> None:
    clock, cm, store, state = _fresh()
    with session(store, clock) as run:
        run.save(state)
        writes = cm.writes
        state.stack = "gpucluster"
        run.save(state, later=True)
        assert (cm.writes, _saved_stack(store)) == (writes, "none")  # kept back
        state.stack_change = {"to": "gpucluster"}
        run.save(state)  # the next save carries both
        assert (cm.writes, _saved_stack(store)) == (writes + 1, "gpucluster")
        run.flush()
        assert cm.writes == writes + 1  # nothing kept back: flush writes nothing
        state.stack = "clusterpolicy"
        run.save(state, later=True)
        run.flush()
        assert (cm.writes, _saved_stack(store)) == (writes + 2, "clusterpolicy")


def test_a_kept_back_confirmation_is_written_at_a_lock_renewal_and_when_the_run_ends() -> None:
    clock, cm, store, state = _fresh()
    with session(store, clock) as run:
        run.save(state)
        state.stack = "gpucluster"
        run.save(state, later=True)
        run.heartbeat()  # no renewal due: nothing written
        assert _saved_stack(store) == "none"
        clock.advance(LOCK_TTL_SECONDS / 4 + 1)
        run.heartbeat()  # renewed, and `status` sees the confirmation from now on
        assert _saved_stack(store) == "gpucluster"
    loaded = store.load()
    assert loaded is not None
    with pytest.raises(RuntimeError), session(store, clock, version=loaded.version) as run:
        state.stack = "clusterpolicy"
        run.save(state, later=True)
        raise RuntimeError("the run failed")
    assert _saved_stack(store) == "clusterpolicy"
    assert locking.HOLDER not in _annotations(cm)


def test_taking_over_an_expired_lock_is_said() -> None:
    clock, cm = FakeClock(), MemoryConfigMap()
    MemoryStateStore(cm, clock=clock).acquire_lock("dead@host pid 2", 60)
    clock.advance(61)
    said = Said()
    with session(MemoryStateStore(cm, clock=clock), clock, listener=said):
        pass
    # when it expired and when it was last renewed: the takeover says why it is not a live
    # holder's lock
    assert said.lines == ["took over the expired lock of dead@host pid 2 (expired "
                          "2025-03-01T12:01:00Z, last renewed 2025-03-01T12:00:00Z: not renewed "
                          "since, so its run is gone)"]


def test_a_lock_with_an_unreadable_expiry_is_not_called_expired() -> None:
    clock, cm = FakeClock(), MemoryConfigMap()
    MemoryStateStore(cm, clock=clock).acquire_lock("dead@host pid 2", 60)
    cm.edit(lambda obj: obj["metadata"]["annotations"].update({locking.EXPIRES: "soon"}))
    said = Said()
    with session(MemoryStateStore(cm, clock=clock), clock, listener=said):
        pass
    assert said.lines == ["took over the lock of dead@host pid 2, whose expiry could not be "
                          "read (counted as expired)"]


def test_renewals_are_recorded_and_tell_a_renewing_holder_from_a_silent_one() -> None:
    clock, cm = FakeClock(), MemoryConfigMap()
    store = MemoryStateStore(cm, clock=clock)
    with session(store, clock) as run:
        taken = locking.read(_annotations(cm))
        assert taken is not None and taken.renewed == clock.now()  # taking it is a renewal
        clock.advance(LOCK_TTL_SECONDS / 4 + 1)
        run.heartbeat()
        info = locking.read(_annotations(cm))
        assert info is not None and info.renewed == clock.now()
        assert _annotations(cm)[locking.RENEWED] == locking.format_time(clock.now())
        assert info.renewing(clock.now())
        clock.advance(locking.RENEWING_SECONDS + 1)  # no renewal since: a silent holder
        assert info.live(clock.now()) and not info.renewing(clock.now())


def test_the_configmap_name_and_label_come_from_the_catalog() -> None:
    common = replace(load_catalog().common, state_configmap="migration-state",
                     managed_by=Label("example.com/owner", "migrator"))
    store = MemoryStateStore(clock=FakeClock(), common=common)
    store.save({"schema": 1}, expected_version=None)
    obj = store.configmap.object
    assert obj is not None
    assert obj["metadata"]["name"] == "migration-state"
    assert obj["metadata"]["labels"] == {"example.com/owner": "migrator"}
    shipped = MemoryStateStore(clock=FakeClock())
    assert shipped.configmap.name == load_catalog().common.state_configmap == "dcgm-migrate-state"
