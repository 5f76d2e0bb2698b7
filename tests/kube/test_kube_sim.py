"""The kube client against the simulated API server over HTTP: pagination, selectors, watch,
conflict/precondition/RBAC error mapping, dry run (proved from the request log), retries
through injected faults, and giving up on a closed port within the budget."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest

from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator.errors import (
    APIAlreadyExists,
    APIConflict,
    APIForbidden,
    APINotFound,
    APIUnreachable,
    APIWebhookDenied,
    WatchExpired,
)
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds
from tests.helpers.builders import daemonset

Api = Any  # the `api` fixture: a started dcgm_sim.server.ApiServer


def configmap(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
            "data": {"k": name}}


def logged(api: Api, since: int, count: int, **match: Any) -> list[Any]:
    """The log records matching `match` once `count` are there: the sim records a request just
    after answering it, so the last one may land a moment after the client has its answer."""
    deadline = time.monotonic() + 5
    while True:
        found = api.log.find(since, **match)
        if len(found) >= count or time.monotonic() > deadline:
            return list(found)
        time.sleep(0.002)


def connect(api: Api, sleeps: list[float] | None = None, **kw: Any) -> Kube:
    policy = RetryPolicy(sleep=(sleeps.append if sleeps is not None else lambda s: None),
                         **kw)
    return Kube.for_server(api.url, ADMIN_TOKEN, retry=policy)


def test_1200_configmaps_in_pages_of_500(api: Api) -> None:
    for i in range(1200):
        api.store.create(kinds.CONFIGMAP, configmap(f"cm-{i:04d}"))
    kube = connect(api)
    seq = api.log.last_seq
    pages = list(kube.pages(kinds.CONFIGMAP, "ns", page_size=500))
    assert [len(p.items) for p in pages] == [500, 500, 200]
    names = [o["metadata"]["name"] for p in pages for o in p.items]
    assert sorted(names) == [f"cm-{i:04d}" for i in range(1200)]  # every item exactly once
    assert len(set(names)) == 1200
    lists = logged(api, seq, 3, verb="list", resource="configmaps")
    assert len(lists) == 3 and all("limit=500" in r.query for r in lists)
    listed = kube.list(kinds.CONFIGMAP, "ns", page_size=500)
    assert len(listed.items) == 1200 and listed.resource_version
    assert listed.items[0]["kind"] == "ConfigMap" and listed.items[0]["apiVersion"] == "v1"


def test_label_and_field_selectors(api: Api) -> None:
    kube = connect(api)
    for i in range(6):
        kube.create(configmap(f"c{i}", {"tier": "gpu" if i % 2 else "cpu", "n": str(i)}))
    gpu = kube.list(kinds.CONFIGMAP, "ns", label_selector="tier=gpu,n notin (5)")
    assert sorted(o["metadata"]["name"] for o in gpu.items) == ["c1", "c3"]
    one = kube.list(kinds.CONFIGMAP, "ns", field_selector="metadata.name=c4")
    assert [o["metadata"]["name"] for o in one.items] == ["c4"]


def test_crud_and_error_mapping(api: Api) -> None:
    kube = connect(api)
    created = kube.create(configmap("a"))
    with pytest.raises(APIAlreadyExists) as exists:
        kube.create(configmap("a"))
    assert exists.value.reason == "AlreadyExists" and not exists.value.after_retry
    stale = dict(created, data={"k": "stale"})
    kube.patch(kinds.CONFIGMAP, "a", "ns", {"data": {"k": "patched"}})
    with pytest.raises(APIConflict) as conflict:
        kube.replace(stale)
    assert conflict.value.reason == "Conflict"
    fresh = kube.get(kinds.CONFIGMAP, "a", "ns")
    assert fresh is not None and fresh["data"] == {"k": "patched"}
    replaced = kube.replace(dict(fresh, data={"k": "replaced"}))
    assert replaced["metadata"]["resourceVersion"] != fresh["metadata"]["resourceVersion"]
    kube.patch(kinds.CONFIGMAP, "a", "ns", [{"op": "add", "path": "/data/j", "value": "1"}],
               patch_type="json")
    with pytest.raises(APIConflict):
        kube.delete(kinds.CONFIGMAP, "a", "ns", uid="not-the-uid")
    with pytest.raises(APIConflict):
        kube.delete(kinds.CONFIGMAP, "a", "ns", resource_version=fresh["metadata"][
            "resourceVersion"])
    kube.delete(kinds.CONFIGMAP, "a", "ns", uid=created["metadata"]["uid"])
    assert kube.get(kinds.CONFIGMAP, "a", "ns") is None
    with pytest.raises(APINotFound):
        kube.delete(kinds.CONFIGMAP, "a", "ns")


def test_rbac_refusal_names_verb_and_resource(api: Api) -> None:
    api.access.add_token("viewer-token", """
kind: Role
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: view, namespace: ns}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
""", user="viewer")
    kube = connect(api)
    kube.create(configmap("a"))
    viewer = Kube.for_server(api.url, "viewer-token", retry=RetryPolicy(sleep=lambda s: None))
    assert viewer.get(kinds.CONFIGMAP, "a", "ns") is not None
    with pytest.raises(APIForbidden) as info:
        viewer.patch(kinds.CONFIGMAP, "a", "ns", {"data": {"k": "x"}})
    assert 'cannot patch resource "configmaps"' in info.value.message
    assert not isinstance(info.value, APIWebhookDenied)  # a permission, not an admission refusal
    assert "viewer-token" not in str(info.value)
    assert viewer.can_i("get", kinds.CONFIGMAP, "ns")[0]
    allowed, reason = viewer.can_i("update", kinds.CONFIGMAP, "ns", "a")
    assert not allowed and isinstance(reason, str)


def test_watch_from_a_version_and_expiry() -> None:
    store = Store(event_log_size=5)
    store.create(kinds.NAMESPACE, {"metadata": {"name": "ns"}})
    with ApiServer(store) as server:
        kube = Kube.for_server(server.url, ADMIN_TOKEN)
        start = kube.list(kinds.CONFIGMAP, "ns").resource_version
        kube.create(configmap("w"))
        kube.patch(kinds.CONFIGMAP, "w", "ns", {"data": {"k": "2"}})
        kube.delete(kinds.CONFIGMAP, "w", "ns")
        seen = []
        for etype, obj in kube.watch(kinds.CONFIGMAP, "ns", resource_version=start,
                                     timeout_seconds=5):
            seen.append((etype, obj["metadata"]["name"], obj.get("data")))
            if len(seen) == 3:
                break
        assert seen == [("ADDED", "w", {"k": "w"}), ("MODIFIED", "w", {"k": "2"}),
                        ("DELETED", "w", {"k": "2"})]
        for i in range(10):
            kube.create(configmap(f"x{i}"))
        with pytest.raises(WatchExpired) as info:
            list(kube.watch(kinds.CONFIGMAP, "ns", resource_version=start, timeout_seconds=5))
        assert info.value.status == 410


def test_watch_sees_changes_made_while_it_waits(api: Api) -> None:
    kube = connect(api)
    start = kube.list(kinds.CONFIGMAP, "ns").resource_version
    events = kube.watch(kinds.CONFIGMAP, "ns", resource_version=start, timeout_seconds=10,
                        label_selector="watched=yes")
    writer = threading.Thread(target=lambda: [kube.create(configmap("ignored")),
                                              kube.create(configmap("w", {"watched": "yes"}))])
    writer.start()
    etype, obj = next(iter(events))
    writer.join()
    assert (etype, obj["metadata"]["name"]) == ("ADDED", "w")


def test_a_table_watch_names_every_rows_cells_by_the_first_events_columns(api: Api) -> None:
    # The server sends column definitions with the first event only; the rows of the later
    # ones must still come out named, with the version of the object each one shows.
    kube = connect(api)
    start = kube.list(kinds.DAEMONSET, "ns").resource_version
    rows = kube.watch_table(kinds.DAEMONSET, "ns", resource_version=start,
                            field_selector="metadata.name=d", timeout_seconds=10)
    ds = daemonset("d", owner=None)
    ds["metadata"]["namespace"] = "ns"
    ds["spec"]["template"]["spec"] = {"containers": [{"name": "c", "image": "i:1"}]}
    kube.create(ds)
    versions = []
    for updated, available in ((1, 2), (3, 3)):
        obj = copy.deepcopy(api.store.get(kinds.DAEMONSET, "ns", "d"))
        obj["status"].update(updatedNumberScheduled=updated, numberAvailable=available)
        versions.append(api.store.update(kinds.DAEMONSET, obj, subresource="status")[
            "metadata"]["resourceVersion"])
    seen = []
    for etype, row in rows:
        seen.append((etype, row.name, row.cells["Up-to-date"], row.cells["Available"],
                     row.resource_version))
        if len(seen) == 3:
            rows.stop()
            break
    assert seen[0][:4] == ("ADDED", "d", 0, 0)  # a create does not set status
    assert seen[1:] == [("MODIFIED", "d", 1, 2, versions[0]), ("MODIFIED", "d", 3, 3,
                                                                  versions[1])]
    sent = logged(api, 0, 1, verb="watch", resource="daemonsets")[-1]
    assert "includeObject=None" in sent.query


def test_a_table_watch_whose_first_event_is_a_bookmark_takes_its_columns_from_it() -> None:
    """The API server puts the column definitions on the first event of a Table watch,
    whatever it is (upstream `watchEmbeddedEncoder`), so on a quiet resource a BOOKMARK carries
    them and the rows after it come without: they are still named by those columns."""
    store = Store()
    store.create(kinds.NAMESPACE, {"metadata": {"name": "ns"}})
    store.create(kinds.CONFIGMAP, {"metadata": {"name": "c", "namespace": "ns"}})
    server = ApiServer(store, bookmark_seconds=0.2)
    server.start()
    try:
        kube = connect(server)
        start = kube.list(kinds.CONFIGMAP, "ns").resource_version
        rows = kube.watch_table(kinds.CONFIGMAP, "ns", resource_version=start,
                                timeout_seconds=10)
        time.sleep(0.5)  # the watch open longer than a bookmark's period: a BOOKMARK first
        kube.patch(kinds.CONFIGMAP, "c", "ns", {"data": {"k": "v"}}, patch_type="merge")
        etype, row = next(iter(rows))
        rows.stop()
    finally:
        server.stop()
    assert (etype, row.name) == ("MODIFIED", "c")
    assert row.cells["Name"] == "c" and "Age" in row.cells, row.cells


def test_dry_run_writes_nothing(api: Api) -> None:
    kube = connect(api)
    kube.create(configmap("a"))
    before = api.store.get(kinds.CONFIGMAP, "ns", "a")
    seq = logged(api, 0, 1, verb="create")[-1].seq
    assert kube.create(configmap("b"), dry_run=True)["metadata"]["name"] == "b"
    kube.replace(dict(before, data={"k": "dry"}), dry_run=True)
    kube.patch(kinds.CONFIGMAP, "a", "ns", {"data": {"k": "dry"}}, dry_run=True)
    kube.delete(kinds.CONFIGMAP, "a", "ns", dry_run=True)
    records = logged(api, seq, 4)
    assert [r.verb for r in records] == ["create", "update", "patch", "delete"]
    assert all(r.dry_run and r.code < 300 for r in records)
    assert api.log.writes(seq) == []
    assert api.store.get(kinds.CONFIGMAP, "ns", "a") == before
    assert api.store.find(kinds.CONFIGMAP, "ns", "b") is None


def test_retries_survive_injected_faults(api: Api) -> None:
    sleeps: list[float] = []
    kube = connect(api, sleeps, attempts=10)
    api.faults.update(error_rate=0.3, error_codes=[429, 503], retry_after_seconds=1, seed=11)
    seq = api.log.last_seq
    for i in range(40):
        kube.create(configmap(f"f{i}"))
        got = kube.get(kinds.CONFIGMAP, f"f{i}", "ns")
        assert got is not None and got["data"] == {"k": f"f{i}"}
    api.faults.reset()
    codes = [r.code for r in logged(api, seq, 80 + kube.retry_count)]
    assert codes.count(429) > 0 and codes.count(503) > 0
    assert kube.retry_count == codes.count(429) + codes.count(503)
    assert sleeps.count(1.0) >= codes.count(429)  # Retry-After: 1 honoured on every 429
    assert api.store.count(kinds.CONFIGMAP) == 40  # each create landed exactly once


def test_a_stopped_server_is_unreachable_within_the_budget(api: Api) -> None:
    sleeps: list[float] = []
    kube = connect(api, sleeps)
    kube.ping()
    api.stop()
    with pytest.raises(APIUnreachable) as info:
        kube.get(kinds.CONFIGMAP, "a", "ns")
    assert info.value.message.startswith(f"Cannot reach the Kubernetes API server at {api.url}")
    assert 0 < sum(sleeps) <= RetryPolicy().max_wait_seconds


def test_discovery_and_ping(api: Api) -> None:
    kube = connect(api)
    kube.ping()
    assert kube.has_api("apps", "v1") and kube.has_kind(kinds.DAEMONSET)
    assert kube.has_api("", "v1") and kube.has_kind(kinds.CONFIGMAP)
    api.faults.update(disabled_groups=["monitoring.coreos.com"])
    assert not connect(api).has_api("monitoring.coreos.com", "v1")


def test_connect_with_the_sims_kubeconfig(sim: Any) -> None:
    kube = Kube.connect(sim.kubeconfig)
    assert kube.server == sim.url
    daemonsets = kube.list(kinds.DAEMONSET, "gpu-operator").items
    assert {d["metadata"]["name"] for d in daemonsets} >= {"nvidia-dcgm-exporter-dra"}

