"""`meta.k8s.io/v1` Table answers over real HTTP, as a real kube-apiserver gives them:
`includeObject` (Object / Metadata / None, anything else a 400 with no side effects), watch
Tables whose column definitions come with the first event only, the DaemonSet columns following
a rollout, and printPod's STATUS for Pending, Running, Terminating and friends."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from dcgm_sim import tables, writes
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.podstatus import pending_status, running_status
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Kubectl, daemonset, make_client, pod

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
DS_COLUMNS = [("Name", 0), ("Desired", 0), ("Current", 0), ("Ready", 0), ("Up-to-date", 0),
              ("Available", 0), ("Node Selector", 0), ("Age", 0), ("Containers", 1),
              ("Images", 1), ("Selector", 1)]
POD_COLUMNS = [("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0),
               ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1)]
DS_PATH = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
POD_PATH = f"/api/v1/namespaces/{NS}/pods"
BAD_INCLUDE = ("Unable to convert to Table as requested: includeObject: Invalid value: "
               "\"Everything\": must be 'Metadata', 'Object', 'None', or empty")


def _request(url: str, path: str, accept: str = TABLE, **query: str) -> tuple[int, bytes]:
    full = url + path + ("?" + urllib.parse.urlencode(query) if query else "")
    req = urllib.request.Request(full, headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                                "Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _table(url: str, path: str, **query: str) -> dict[str, Any]:
    code, body = _request(url, path, **query)
    assert code == 200, body
    doc: dict[str, Any] = json.loads(body)
    assert (doc["kind"], doc["apiVersion"]) == ("Table", "meta.k8s.io/v1")
    return doc


@contextmanager
def _watch(url: str, path: str, **query: str) -> Iterator[Iterator[tuple[bytes, Any]]]:
    """The Table watch's events, each as (raw line, decoded event)."""
    query = {"watch": "true", "timeoutSeconds": "60", **query}
    req = urllib.request.Request(url + path + "?" + urllib.parse.urlencode(query),
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                          "Accept": TABLE})
    with urllib.request.urlopen(req, timeout=30) as resp:
        yield ((line, json.loads(line)) for line in resp if line.strip())


def _columns(table: dict[str, Any]) -> list[tuple[str, int]]:
    return [(c["name"], c["priority"]) for c in table["columnDefinitions"]]


def _seed_daemonset(store: Store) -> dict[str, Any]:
    body = daemonset("nvidia-dcgm")
    body["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true",
                                                        "a": "b"}
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "img:2"})
    return writes.create(store, kinds.DAEMONSET, body, namespace=NS)


# ---- includeObject -------------------------------------------------------------------------

def test_list_rows_carry_the_object_includeObject_asks_for(store: Store,
                                                           server: ApiServer) -> None:
    ds = _seed_daemonset(store)
    default = _table(server.url, DS_PATH)
    assert _columns(default) == DS_COLUMNS
    assert [c["type"] for c in default["columnDefinitions"][:6]] == ["string"] + ["integer"] * 5
    assert default["columnDefinitions"][0]["format"] == "name"
    assert default["metadata"]["resourceVersion"] == str(store.resource_version)
    for table in (default, _table(server.url, DS_PATH, includeObject="Metadata")):
        (row,) = table["rows"]
        assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                 "metadata": ds["metadata"]}
    (row,) = _table(server.url, DS_PATH, includeObject="Object")["rows"]
    assert (row["object"]["kind"], row["object"]["apiVersion"]) == ("DaemonSet", "apps/v1")
    assert row["object"]["spec"] == ds["spec"]
    code, raw = _request(server.url, DS_PATH, includeObject="None")
    assert code == 200
    (row,) = json.loads(raw)["rows"]
    assert "object" in row and row["object"] is None  # RawExtension{} encodes as null
    assert b'"object":null' in raw
    # the same cells whatever the object, but for the age, which follows the wall clock (a
    # second can pass between the two reads)
    age = _columns(default).index(("Age", 0))
    assert row["cells"][:age] + row["cells"][age + 1:] == (
        default["rows"][0]["cells"][:age] + default["rows"][0]["cells"][age + 1:])


def test_daemonset_cells_follow_printDaemonSet(store: Store, server: ApiServer) -> None:
    _seed_daemonset(store)
    writes.patch(store, kinds.DAEMONSET, "application/merge-patch+json", {"status": {
        "desiredNumberScheduled": 5, "currentNumberScheduled": 4, "numberReady": 3,
        "updatedNumberScheduled": 2, "numberAvailable": 1, "numberMisscheduled": 0}},
        namespace=NS, name="nvidia-dcgm", subresource="status")
    (row,) = _table(server.url, DS_PATH + "/nvidia-dcgm", includeObject="None")["rows"]
    name, desired, current, ready, updated, available, selector, age, *wide = row["cells"]
    assert (name, desired, current, ready, updated, available) == ("nvidia-dcgm", 5, 4, 3, 2, 1)
    assert selector == "a=b,nvidia.com/gpu.present=true"
    assert age.endswith("s")
    assert wide == ["c,side", "img:1,img:2", "app=nvidia-dcgm"]


@pytest.mark.parametrize("verb", ["list", "get", "watch"])
def test_a_bad_includeObject_is_a_400_with_no_side_effects(store: Store, server: ApiServer,
                                                           verb: str) -> None:
    _seed_daemonset(store)
    rv, mark = store.resource_version, server.log.last_seq
    path = DS_PATH + ("/nvidia-dcgm" if verb == "get" else "")
    query = {"includeObject": "Everything", **({"watch": "true"} if verb == "watch" else {})}
    code, raw = _request(server.url, path, **query)
    assert code == 400
    status = json.loads(raw)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "BadRequest", 400)
    assert status["message"] == BAD_INCLUDE
    assert store.resource_version == rv
    assert not server.log.find(since=mark, verb="watch", open=True)
    # without a Table the parameter means nothing, as upstream (TableOptions are only decoded
    # for a Table)
    code, raw = _request(server.url, DS_PATH, accept="application/json",
                         includeObject="Everything")
    assert code == 200 and json.loads(raw)["kind"] == "DaemonSetList"


# ---- watch ---------------------------------------------------------------------------------

def test_watch_sends_column_definitions_with_the_first_event_only(store: Store,
                                                                  server: ApiServer) -> None:
    versions = [writes.create(store, kinds.POD, pod(name), namespace=NS)["metadata"][
        "resourceVersion"] for name in ("a", "b")]
    with _watch(server.url, POD_PATH, includeObject="None") as events:
        (first_raw, first), (second_raw, second) = next(events), next(events)
        versions.append(writes.patch(store, kinds.POD, "application/merge-patch+json",
                                     {"metadata": {"labels": {"x": "y"}}}, namespace=NS,
                                     name="a")["metadata"]["resourceVersion"])
        third_raw, third = next(events)
    assert [e["type"] for e in (first, second, third)] == ["ADDED", "ADDED", "MODIFIED"]
    assert _columns(first["object"]) == POD_COLUMNS
    for raw in (second_raw, third_raw):
        assert b'"columnDefinitions":null' in raw
    events_seen = ((first_raw, first), (second_raw, second), (third_raw, third))
    for (raw, event), name, version in zip(events_seen, "aba", versions, strict=True):
        table = event["object"]
        (row,) = table["rows"]
        assert len(row["cells"]) == len(POD_COLUMNS) and row["cells"][0] == name
        assert row["object"] is None and b'"object":null' in raw
        # each event's Table carries its object's resourceVersion (GenerateTable)
        assert table["metadata"] == {"resourceVersion": version}


def test_watch_list_bookmark_is_a_table_too(store: Store, server: ApiServer) -> None:
    """With sendInitialEvents the closing BOOKMARK goes through the Table encoder like every
    event (handlers/response.go `watchEncoder.Encode`); with no object to list it is the
    first event, so it carries the columns."""
    with _watch(server.url, POD_PATH, sendInitialEvents="true",
                resourceVersionMatch="NotOlderThan", allowWatchBookmarks="true") as events:
        _, bookmark = next(events)
    assert bookmark["type"] == "BOOKMARK"
    table = bookmark["object"]
    assert table["kind"] == "Table" and _columns(table) == POD_COLUMNS
    (row,) = table["rows"]
    assert row["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert table["metadata"]["resourceVersion"] == row["object"]["metadata"]["resourceVersion"]


def test_daemonset_cells_track_a_rollout(make_sim: Callable[..., SimCluster]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster", time_scale=0.05)
    name = "nvidia-dcgm-dra"
    seen: list[list[Any]] = []
    with _watch(sim.url, DS_PATH, includeObject="Object",
                fieldSelector=f"metadata.name={name}") as events:
        _, first = next(events)
        assert first["object"]["rows"][0]["cells"][1:6] == [3, 3, 3, 3, 3]
        api = make_client(sim.url)
        client.AppsV1Api(api).patch_namespaced_daemon_set(name, NS, {"spec": {"template": {
            "metadata": {"labels": {"nvidia.com/gpu-operator.dcgm": "true"}}}}})
        api.close()
        for _, event in events:
            table = event["object"]
            assert table["columnDefinitions"] is None
            (row,) = table["rows"]
            obj, cells = row["object"], row["cells"]
            # every event's cells are its own object's status, at the Table's version
            assert table["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
            status = obj.get("status") or {}
            assert cells[1:6] == [status.get(f, 0) for f in (
                "desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                "updatedNumberScheduled", "numberAvailable")]
            seen.append(cells)
            done = status.get("observedGeneration") == obj["metadata"]["generation"]
            if done and cells[4] == cells[5] == 3:
                break
    updated = [c[4] for c in seen]
    assert min(updated) < 3 and updated[-1] == 3  # Up-to-date fell and came back
    assert min(c[5] for c in seen) < 3  # a pod was replaced: Available dipped


# ---- pod STATUS ----------------------------------------------------------------------------

def _pod_cells(server: ApiServer, name: str) -> list[Any]:
    (row,) = _table(server.url, f"{POD_PATH}/{name}", includeObject="None")["rows"]
    cells: list[Any] = row["cells"]
    return cells


def _set_status(store: Store, name: str, status: dict[str, Any]) -> None:
    writes.patch(store, kinds.POD, "application/merge-patch+json", {"status": status},
                 namespace=NS, name=name, subresource="status")


NODE = {"metadata": {"name": "node-1"}, "spec": {"podCIDR": "10.1.0.0/24"}}


def test_pod_status_pending_running_terminating(store: Store, server: ApiServer,
                                                core: client.CoreV1Api) -> None:
    writes.create(store, kinds.POD, pod("p"), namespace=NS)
    assert _pod_cells(server, "p")[1:4] == ["0/1", "Pending", "0"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _set_status(store, "p", pending_status(store.get(kinds.POD, NS, "p"), NODE, now))
    assert _pod_cells(server, "p")[1:3] == ["0/1", "ContainerCreating"]
    _set_status(store, "p", running_status(store.get(kinds.POD, NS, "p"), NODE, "10.1.0.7",
                                           False, now))
    assert _pod_cells(server, "p")[1:3] == ["0/1", "Running"]  # running, not yet ready
    _set_status(store, "p", running_status(store.get(kinds.POD, NS, "p"), NODE, "10.1.0.7",
                                           True, now))
    cells = _pod_cells(server, "p")
    assert cells[1:4] == ["1/1", "Running", "0"]
    assert cells[5:] == ["10.1.0.7", "node-1", "<none>", "<none>"]
    core.delete_namespaced_pod("p", NS)  # graceful: it stays, marked, until its kubelet acts
    assert _pod_cells(server, "p")[1:3] == ["1/1", "Terminating"]


def _running(name: str, *, ready: bool = True) -> dict[str, Any]:
    return {"name": name, "image": "img:1", "imageID": "", "ready": ready, "restartCount": 0,
            "state": {"running": {"startedAt": "2025-01-01T00:00:00Z"}}}


def _waiting(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "ready": False, "restartCount": 0, "state": {"waiting": {
        "reason": reason}}}


def _cond(ctype: str, status: str, reason: str = "") -> dict[str, str]:
    return {"type": ctype, "status": status, **({"reason": reason} if reason else {})}


STATUS_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    ("gated", {}, {"phase": "Pending", "conditions": [
        _cond("PodScheduled", "False", "SchedulingGated")]}, "0/1", "SchedulingGated"),
    ("init-waiting", {"initContainers": [{"name": "i", "image": "x"}]}, {
        "phase": "Pending", "initContainerStatuses": [_waiting("i", "PodInitializing")],
        "containerStatuses": [_waiting("c", "PodInitializing")]}, "0/1", "Init:0/1"),
    ("init-crashing", {"initContainers": [{"name": "i", "image": "x"}]}, {
        "phase": "Pending", "initContainerStatuses": [_waiting("i", "CrashLoopBackOff")]},
     "0/1", "Init:CrashLoopBackOff"),
    ("init-failed", {"initContainers": [{"name": "i", "image": "x"}]}, {
        "phase": "Pending", "initContainerStatuses": [{"name": "i", "restartCount": 0, "state": {
            "terminated": {"exitCode": 3}}}]}, "0/1", "Init:ExitCode:3"),
    ("sidecar", {"initContainers": [{"name": "s", "image": "x", "restartPolicy": "Always"}]}, {
        "phase": "Running", "conditions": [_cond("Initialized", "True")],
        "initContainerStatuses": [dict(_running("s"), started=True)],
        "containerStatuses": [_running("c")]}, "2/2", "Running"),
    ("crash", {}, {"phase": "Running", "containerStatuses": [
        _waiting("c", "CrashLoopBackOff")]}, "0/1", "CrashLoopBackOff"),
    ("one-completed-not-ready", {"containers": [{"name": "c", "image": "x"},
                                                {"name": "d", "image": "y"}]}, {
        "phase": "Running", "conditions": [_cond("Ready", "False")], "containerStatuses": [
            {"name": "c", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            _running("d")]}, "1/2", "NotReady"),
    ("one-completed-ready", {"containers": [{"name": "c", "image": "x"},
                                            {"name": "d", "image": "y"}]}, {
        "phase": "Running", "conditions": [_cond("Ready", "True")], "containerStatuses": [
            {"name": "c", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            _running("d")]}, "1/2", "Running"),
    ("evicted", {}, {"phase": "Failed", "reason": "Evicted"}, "0/1", "Evicted"),
]


@pytest.mark.parametrize(("name", "spec", "status", "ready", "shown"), STATUS_CASES,
                         ids=[c[0] for c in STATUS_CASES])
def test_pod_status_as_printPod_shows_it(store: Store, server: ApiServer, name: str,
                                         spec: dict[str, Any], status: dict[str, Any],
                                         ready: str, shown: str) -> None:
    body = pod(name)
    body["spec"].update(spec)
    writes.create(store, kinds.POD, body, namespace=NS)
    _set_status(store, name, status)
    assert _pod_cells(server, name)[1:3] == [ready, shown]


def test_a_lost_nodes_deleted_pod_is_unknown_and_restarts_say_when(
        store: Store, server: ApiServer, core: client.CoreV1Api) -> None:
    writes.create(store, kinds.POD, pod("lost"), namespace=NS)
    finished = (datetime.now(UTC) - timedelta(minutes=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _set_status(store, "lost", {"phase": "Running", "reason": "NodeLost", "containerStatuses": [
        dict(_running("c"), restartCount=2, lastState={"terminated": {
            "exitCode": 1, "finishedAt": finished}})]})
    assert _pod_cells(server, "lost")[1:4] == ["1/1", "NodeLost", "2 (20m ago)"]
    core.delete_namespaced_pod("lost", NS)
    assert _pod_cells(server, "lost")[2] == "Unknown"


def test_a_finished_pod_row_is_marked_completed(store: Store, server: ApiServer) -> None:
    writes.create(store, kinds.POD, pod("done"), namespace=NS)
    _set_status(store, "done", {"phase": "Succeeded", "containerStatuses": [{
        "name": "c", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]})
    (row,) = _table(server.url, POD_PATH)["rows"]
    assert row["cells"][1:3] == ["0/1", "Completed"]
    assert row["conditions"] == [{"type": "Completed", "status": "True", "reason": "Succeeded",
                                  "message": "The pod has completed successfully."}]


# ---- kubectl -------------------------------------------------------------------------------

def test_kubectl_wide_shows_the_priority_1_columns(store: Store, kubectl: Kubectl) -> None:
    _seed_daemonset(store)
    writes.create(store, kinds.POD, pod("p"), namespace=NS)
    ds = kubectl("get", "ds", "-o", "wide").stdout.splitlines()
    assert ds[0].split()[-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert ds[1].split()[-3:] == ["c,side", "img:1,img:2", "app=nvidia-dcgm"]
    assert "CONTAINERS" not in kubectl("get", "ds").stdout
    pods = kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert pods[0].split()[-6:] == ["IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    assert pods[1].split()[1:4] == ["0/1", "Pending", "0"]


def test_ages_are_humanduration() -> None:
    """`duration.HumanDuration` past the ranges kubectl tests usually see."""
    day = 86400
    assert [tables.human_duration(s) for s in (-5, -1, 9 * day, 700 * day, 800 * day,
                                               3 * 365 * day, 9 * 365 * day)] == [
        "<invalid>", "0s", "9d", "700d", "2y70d", "3y", "9y"]
