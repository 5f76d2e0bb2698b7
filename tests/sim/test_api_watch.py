"""Simulated API server: watch streams (ADDED/MODIFIED/DELETED, resume from a resourceVersion,
410 Expired, label/field-filtered watches, timeoutSeconds, stop() ending open watches)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any, cast

from kubernetes import client, watch

from dcgm_sim import writes
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, make_client, pod


def _raw_events(url: str, path: str, count: int | None = None) -> list[dict[str, Any]]:
    """The stream's events: the first `count`, or all of them until the server ends it."""
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    events: list[dict[str, Any]] = []
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Transfer-Encoding"] == "chunked"
        for line in resp:
            if line.strip():
                events.append(json.loads(line))
            if count is not None and len(events) == count:
                break
    return events


def test_watch_sees_added_modified_deleted(core: client.CoreV1Api) -> None:
    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    # a plain-dict body: the official client sends a dict as it is
    core.create_namespaced_config_map(NS, cast(client.V1ConfigMap, {"metadata": {"name": "first"}}))
    for event in w.stream(core.list_namespaced_config_map, NS, timeout_seconds=10):
        obj = event["object"]
        seen.append((event["type"], obj.metadata.name))
        if len(seen) == 1:  # the synthetic ADDED for what exists; now change things
            core.patch_namespaced_config_map("first", NS, {"data": {"k": "v"}})
        elif len(seen) == 2:
            assert obj.data == {"k": "v"}
            core.delete_namespaced_config_map("first", NS)
        elif len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "first"), ("MODIFIED", "first"), ("DELETED", "first")]


def test_watch_resumes_after_a_resource_version(store: Store, server: ApiServer) -> None:
    writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "before"}}, namespace=NS)
    start = store.resource_version
    writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "after"}}, namespace=NS)
    writes.patch(store, kinds.CONFIGMAP, "application/merge-patch+json", {"data": {"a": "1"}},
                 namespace=NS, name="after")
    events = _raw_events(server.url, f"/api/v1/namespaces/{NS}/configmaps?watch=1"
                         f"&resourceVersion={start}", count=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "after"), ("MODIFIED", "after")]
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) == store.resource_version


def test_too_old_resource_version_gets_a_410_expired_error_event() -> None:
    store = Store(event_log_size=3)
    writes.create(store, kinds.NAMESPACE, {"metadata": {"name": NS}})
    for i in range(6):
        writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": f"cm{i}"}}, namespace=NS)
    with ApiServer(store) as server:
        events = _raw_events(server.url,
                             f"/api/v1/namespaces/{NS}/configmaps?watch=true&resourceVersion=2")
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["kind"], status["code"], status["reason"]) == ("Status", 410, "Expired")
    assert status["message"].startswith("too old resource version: 2")


def test_label_filtered_watch_reports_leaving_as_deleted(store: Store,
                                                         core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, cast(client.V1Pod, pod("p1", labels={"app": "a"})))
    w = watch.Watch()
    seen: list[tuple[str, dict[str, str]]] = []
    for event in w.stream(core.list_namespaced_pod, NS, label_selector="app=a",
                          timeout_seconds=10):
        seen.append((event["type"], dict(event["object"].metadata.labels)))
        if len(seen) == 1:
            core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"app": "b"}}})
            core.patch_namespaced_pod("p1", NS, {"metadata": {"labels": {"app": "a"}}})
        elif len(seen) == 3:
            w.stop()
    # Leaving the selector is DELETED (with the last matching state), coming back is ADDED.
    assert seen == [("ADDED", {"app": "a"}), ("DELETED", {"app": "a"}), ("ADDED", {"app": "a"})]


def test_field_selector_watch_on_one_name(store: Store, server: ApiServer) -> None:
    start = store.resource_version
    for name in ("x", "y", "x", "y"):
        if store.find(kinds.CONFIGMAP, NS, name) is None:
            writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": name}}, namespace=NS)
        else:
            writes.patch(store, kinds.CONFIGMAP, "application/merge-patch+json",
                         {"data": {"a": "1"}}, namespace=NS, name=name)
    events = _raw_events(server.url, f"/api/v1/namespaces/{NS}/configmaps?watch=1"
                         f"&fieldSelector=metadata.name%3Dy&resourceVersion={start}", count=2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "y"), ("MODIFIED", "y")]


def test_initial_events_end_bookmark(store: Store, server: ApiServer) -> None:
    writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "x"}}, namespace=NS)
    events = _raw_events(server.url, f"/api/v1/namespaces/{NS}/configmaps?watch=1"
                         "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                         "&allowWatchBookmarks=true", count=2)
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    bookmark = events[1]["object"]["metadata"]
    assert bookmark["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["resourceVersion"] == str(store.resource_version)


def test_allow_watch_bookmarks_gets_periodic_bookmarks(store: Store) -> None:
    writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "x"}}, namespace=NS)
    server = ApiServer(store, bookmark_seconds=0.2)
    server.start()
    try:
        path = f"/api/v1/namespaces/{NS}/configmaps?watch=1&allowWatchBookmarks=true"
        events = _raw_events(server.url, path, count=2)
        rv = str(store.resource_version)
        writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "y"}}, namespace=NS)
        assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
        assert events[1]["object"] == {"kind": "ConfigMap", "apiVersion": "v1",
                                       "metadata": {"resourceVersion": rv}}
        resumed = _raw_events(server.url, path + f"&resourceVersion={rv}", count=2)
        assert [e["type"] for e in resumed] == ["ADDED", "BOOKMARK"]
        assert resumed[1]["object"]["metadata"] == {"resourceVersion": str(store.resource_version)}
        # timeoutSeconds: a last bookmark as the watch ends (none without allowWatchBookmarks:
        # test_timeout_seconds_ends_an_idle_stream)
        ended = _raw_events(server.url, "/api/v1/nodes?watch=1&allowWatchBookmarks=true"
                            "&timeoutSeconds=1")
        assert ended and {e["type"] for e in ended} == {"BOOKMARK"}
    finally:
        server.stop()


def test_timeout_seconds_ends_an_idle_stream(server: ApiServer) -> None:
    events = _raw_events(server.url, "/api/v1/nodes?watch=1&timeoutSeconds=1")
    assert events == []
    assert server.log.find(verb="watch", resource="nodes")[0].code == 200


def test_stop_ends_open_watches(store: Store) -> None:
    server = ApiServer(store)
    server.start()
    api = make_client(server.url)
    core = client.CoreV1Api(api)
    ended = threading.Event()
    seen: list[str] = []

    def consume() -> None:
        try:
            for event in watch.Watch().stream(core.list_namespaced_config_map, NS):
                seen.append(event["type"])
        except Exception:  # the connection is cut under the client: that ends it too
            pass
        ended.set()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "x"}}, namespace=NS)
    deadline = time.monotonic() + 10  # the watch is open (it saw the ConfigMap) before the stop
    while "ADDED" not in seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "ADDED" in seen, "the watch never delivered the ConfigMap"
    server.stop()
    assert ended.wait(10), "the watch did not end when the server stopped"
    api.close()
