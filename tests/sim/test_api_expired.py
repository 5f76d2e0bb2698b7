"""The event window (`sim serve --watch-window N`) and the two 410 Expired answers it causes, as on
a real cluster (docs/architecture.md, "The simulated cluster": 410 Expired): a watch from a
resourceVersion older than the window gets an ERROR event with a 410 Status in a 200 stream
(`cacher.Watch`), and a list continue token (or an exact-version list) older than it gets an HTTP
410 with etcd3's message."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dcgm_sim import writes
from dcgm_sim.serve import ServeOptions, build
from dcgm_sim.server import ApiServer
from dcgm_sim.statuses import CONTINUE_TOO_OLD, LIST_TOO_OLD
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Raw, make_client

WINDOW = 4


@pytest.fixture
def small() -> Iterator[tuple[Store, ApiServer]]:
    """A store keeping the last WINDOW events, with six ConfigMaps, served over HTTP."""
    store = Store(event_log_size=WINDOW)
    writes.create(store, kinds.NAMESPACE, {"metadata": {"name": "default"}})
    writes.create(store, kinds.NAMESPACE, {"metadata": {"name": NS}})
    for i in range(6):
        writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": f"cm{i}"}}, namespace=NS)
    with ApiServer(store) as server:
        yield store, server


def _churn(store: Store, count: int) -> None:
    """`count` writes elsewhere: each pushes the oldest event out of the window."""
    for i in range(count):
        writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": f"churn-{i}"}},
                      namespace="default")


def _path(**query: str) -> str:
    return f"/api/v1/namespaces/{NS}/configmaps?{urllib.parse.urlencode(query)}"


def test_watch_window_keeps_exactly_the_last_n_events(small: tuple[Store, ApiServer]) -> None:
    store, server = small
    current = store.resource_version
    assert store.horizon() == current - WINDOW
    assert not store.expired(current - WINDOW)
    assert store.expired(current - WINDOW - 1)
    # The oldest version still in the window replays; one older gets the real error text.
    code, body, _ = Raw(server.url)("GET", _path(watch="1", timeoutSeconds="1",
                                                  resourceVersion=str(current - WINDOW)))
    assert code == 200
    replayed = [json.loads(line) for line in body.splitlines()]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in replayed] == [
        ("ADDED", f"cm{i}") for i in range(2, 6)]
    code, body, _ = Raw(server.url)("GET", _path(watch="1", timeoutSeconds="1",
                                                  resourceVersion=str(current - WINDOW - 1)))
    assert code == 200  # a watch answers 200 and reports the error in the stream
    assert body["type"] == "ERROR"
    assert body["object"] == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {current - WINDOW - 1} ({current - WINDOW})",
        "reason": "Expired", "code": 410}


def test_official_client_watch_raises_410_gone(small: tuple[Store, ApiServer]) -> None:
    _, server = small
    with make_client(server.url) as api:
        core = client.CoreV1Api(api)
        with pytest.raises(ApiException) as raised:
            for _ in watch.Watch().stream(core.list_namespaced_config_map, NS,
                                          resource_version="2", timeout_seconds=2):
                pass
    assert raised.value.status == 410
    assert "too old resource version: 2" in str(raised.value)


def test_continue_token_older_than_the_window_is_410_with_etcds_message(
        small: tuple[Store, ApiServer]) -> None:
    store, server = small
    raw = Raw(server.url)
    code, first, _ = raw("GET", _path(limit="2"))
    assert code == 200 and [i["metadata"]["name"] for i in first["items"]] == ["cm0", "cm1"]
    token = first["metadata"]["continue"]
    _churn(store, WINDOW + 1)  # the first page's version just left the window
    code, status, _ = raw("GET", _path(limit="2", **{"continue": token}))
    assert code == 410
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Expired", 410)
    assert status["message"] == CONTINUE_TOO_OLD
    assert status["message"].startswith("The provided continue parameter is too old to "
                                        "display a consistent list result.")
    # The Status carries a token that continues at the latest version (inconsistent list).
    code, rest, _ = raw("GET", _path(limit="10", **{"continue": status["metadata"]["continue"]}))
    assert code == 200
    assert [i["metadata"]["name"] for i in rest["items"]] == ["cm2", "cm3", "cm4", "cm5"]
    assert rest["metadata"]["resourceVersion"] == str(store.resource_version)


def test_continue_token_inside_the_window_still_works(small: tuple[Store, ApiServer]) -> None:
    store, server = small
    raw = Raw(server.url)
    _, first, _ = raw("GET", _path(limit="2"))
    _churn(store, WINDOW)  # the first page's version is the oldest one still in the window
    code, second, _ = raw("GET", _path(limit="2", **{"continue": first["metadata"]["continue"]}))
    assert code == 200
    assert [i["metadata"]["name"] for i in second["items"]] == ["cm2", "cm3"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_official_client_sees_the_expired_continue_as_410(small: tuple[Store, ApiServer]) -> None:
    store, server = small
    with make_client(server.url) as api:
        core = client.CoreV1Api(api)
        first = core.list_namespaced_config_map(NS, limit=3)
        _churn(store, WINDOW + 2)
        assert first.metadata is not None
        with pytest.raises(ApiException) as raised:
            core.list_namespaced_config_map(NS, limit=3, _continue=first.metadata._continue)
    assert raised.value.status == 410 and raised.value.body is not None
    assert json.loads(raised.value.body)["message"] == CONTINUE_TOO_OLD


@pytest.mark.parametrize("query", [
    {"resourceVersion": "2", "limit": "2"},
    {"resourceVersion": "2", "resourceVersionMatch": "Exact"},
])
def test_exact_list_older_than_the_window_is_410(small: tuple[Store, ApiServer],
                                                  query: dict[str, str]) -> None:
    _, server = small
    code, status, _ = Raw(server.url)("GET", _path(**query))
    assert code == 410
    assert (status["reason"], status["message"]) == ("Expired", LIST_TOO_OLD)


@pytest.mark.parametrize("query", [
    {"resourceVersion": "2"},  # not older than: served from the latest state
    {"resourceVersion": "2", "resourceVersionMatch": "NotOlderThan", "limit": "2"},
    {"resourceVersion": "0", "limit": "2"},
])
def test_lists_that_accept_a_newer_state_are_never_410(small: tuple[Store, ApiServer],
                                                        query: dict[str, str]) -> None:
    _, server = small
    code, body, _ = Raw(server.url)("GET", _path(**query))
    assert code == 200 and body["items"]


def test_serve_watch_window_sizes_the_event_log() -> None:
    sim = build(ServeOptions(nodes=1, watch_window=7))
    assert sim.store.event_log_size == 7
    assert build(ServeOptions(nodes=1)).store.event_log_size == Store().event_log_size
