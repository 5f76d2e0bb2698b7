"""Watches ask for bookmarks and use them, against the simulated API server: a BOOKMARK is
never handed to the caller but moves the reflector's resourceVersion on, so a re-watch starts
from it; a connection that goes silent (the sim's `stall_watches` fault: no event, no
bookmark, no close) is noticed within the idle bound (`watching.idle_seconds`: the bookmark
cadence plus a quarter), not after the watch's whole timeout, and watched again."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator.engine.informer import WATCH_SECONDS, Reflector
from migrator.kube import Kube, RetryPolicy, watching
from migrator.model import kinds

BOOKMARK = 0.4  # the sim's bookmark cadence here, real seconds


@pytest.fixture
def api() -> Iterator[ApiServer]:
    store = Store()
    store.create(kinds.NAMESPACE, {"metadata": {"name": "ns"}})
    server = ApiServer(store, bookmark_seconds=BOOKMARK)
    server.start()
    yield server
    server.stop()


def connect(api: ApiServer) -> Kube:
    return Kube.for_server(api.url, ADMIN_TOKEN,
                           retry=RetryPolicy(watch_bookmark_seconds=BOOKMARK))


def configmap(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": app}}}


def until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def watches(api: ApiServer, since: int) -> list[Any]:
    return list(api.log.find(since, verb="watch", resource="configmaps"))


def test_the_idle_bound_follows_the_bookmark_cadence() -> None:
    assert watching.idle_seconds(WATCH_SECONDS) == 75.0  # a minute's cadence, plus 15 s
    assert watching.idle_seconds(10) == 12.5  # a short watch: the server ends it first


def test_bookmarks_move_the_version_a_re_watch_starts_from(api: ApiServer) -> None:
    kube = connect(api)
    seq = api.log.last_seq
    cache = Reflector(kube, kinds.CONFIGMAP, "ns", lambda obj: obj, "app=mine")
    cache.start()
    try:
        assert until(lambda: len(watches(api, seq)) == 1)
        assert "allowWatchBookmarks=true" in watches(api, seq)[0].query
        for i in range(5):  # events the selector filters out: only a bookmark tells of them
            api.store.create(kinds.CONFIGMAP, configmap(f"other-{i}", "theirs"))
        latest = int(api.store.get(kinds.CONFIGMAP, "ns", "other-4")["metadata"][
            "resourceVersion"])
        assert until(lambda: cache.rv >= latest)
        assert cache.items() == []  # no event reached the cache, no BOOKMARK as an object
        api.faults.update(stall_watches=True)  # end this watch: the next starts from the mark
        assert until(lambda: len(watches(api, seq)) >= 2)
        api.faults.update(stall_watches=False)
        assert f"resourceVersion={latest}" in watches(api, seq)[1].query
        api.store.create(kinds.CONFIGMAP, configmap("mine", "mine"))
        assert until(lambda: [o["metadata"]["name"] for o in cache.items()] == ["mine"])
    finally:
        cache.stop()


def test_a_silent_connection_is_noticed_within_the_idle_bound(api: ApiServer) -> None:
    kube = connect(api)
    seq = api.log.last_seq
    cache = Reflector(kube, kinds.CONFIGMAP, "ns", lambda obj: obj, "app=mine")
    cache.start()
    try:
        assert until(lambda: len(watches(api, seq)) == 1)
        api.faults.update(stall_watches=True)
        stalled_at = time.monotonic()
        api.store.create(kinds.CONFIGMAP, configmap("held-back", "mine"))  # not sent
        assert until(lambda: len(watches(api, seq)) >= 2, timeout=30)
        noticed = time.monotonic() - stalled_at
        # noticed after the idle bound (0.5 s here), far from the watch's 300 s timeout
        assert noticed < WATCH_SECONDS / 10
        api.faults.update(stall_watches=False)
        assert until(lambda: [o["metadata"]["name"] for o in cache.items()] == ["held-back"])
    finally:
        cache.stop()
