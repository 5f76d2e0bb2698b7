"""Finalizers and deletion propagation in the sim, as the real API server and garbage collector
handle them: a DELETE of an object with finalizers only marks it (Terminating) until an update
removes the last one; no finalizer may be added once it is Terminating; Orphan, Foreground and
Background (the default) propagation through the simulated garbage collector."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim import writes
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.conftest import Bare
from tests.sim.conftest import NS, Kubectl

DCGM = "nvidia-dcgm-dra"
Obj = dict[str, Any]


def _cm(name: str, finalizers: list[str]) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "finalizers": finalizers},
            "data": {"k": "v"}}


def _cm_body(name: str, finalizers: list[str]) -> client.V1ConfigMap:
    """`_cm` for the official client, which sends a plain-dict body as it is."""
    return cast(client.V1ConfigMap, _cm(name, finalizers))


def _set_finalizers(core: client.CoreV1Api, name: str, finalizers: list[str] | None) -> Obj:
    """A JSON patch replacing (or removing) the list: a strategic merge would merge it."""
    op: Obj = ({"op": "remove", "path": "/metadata/finalizers"} if finalizers is None else
               {"op": "replace", "path": "/metadata/finalizers", "value": finalizers})
    # unpreloaded, the client answers with the HTTP response itself, whatever its annotation says
    raw = cast(urllib3.HTTPResponse,
               core.patch_namespaced_config_map(name, NS, [op], _preload_content=False))
    result: Obj = json.loads(raw.data)
    return result


def _delete_raw(core: client.CoreV1Api, name: str) -> Obj:
    raw = cast(urllib3.HTTPResponse,
               core.delete_namespaced_config_map(name, NS, _preload_content=False))
    result: Obj = json.loads(raw.data)
    return result


def test_delete_with_a_finalizer_keeps_the_object_terminating(
        store: Store, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm_body("held", ["example.com/hold"]))
    answer = _delete_raw(core, "held")
    kept = store.get(kinds.CONFIGMAP, NS, "held")
    assert kept["metadata"]["deletionTimestamp"]
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 0
    assert answer["kind"] == "ConfigMap" and answer["metadata"]["deletionTimestamp"]
    # A second DELETE changes nothing and still answers with the object.
    again = _delete_raw(core, "held")
    assert again["metadata"]["finalizers"] == ["example.com/hold"]
    assert store.get(kinds.CONFIGMAP, NS, "held")["metadata"]["resourceVersion"] == \
        kept["metadata"]["resourceVersion"]


def test_the_first_deletion_mark_moves_the_generation(
        store: Store, api: client.ApiClient) -> None:
    """apiserver's `markAsDeleting`: the first mark of an object with a generation moves it (so
    a controller behind `GenerationChangedPredicate` hears of it); a second DELETE does not."""
    custom = client.CustomObjectsApi(api)
    which = ("nvidia.com", "v1alpha1", "gpuclusters")
    custom.create_cluster_custom_object(*which, {
        "apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
        "metadata": {"name": "gpu-cluster", "finalizers": ["example.com/hold"]}, "spec": {}})
    assert store.get(kinds.GPU_CLUSTER, None, "gpu-cluster")["metadata"]["generation"] == 1
    custom.delete_cluster_custom_object(*which, "gpu-cluster")
    marked = store.get(kinds.GPU_CLUSTER, None, "gpu-cluster")["metadata"]
    assert marked["deletionTimestamp"] and marked["generation"] == 2
    custom.delete_cluster_custom_object(*which, "gpu-cluster")
    assert store.get(kinds.GPU_CLUSTER, None, "gpu-cluster")["metadata"]["generation"] == 2


def test_update_removing_the_last_finalizer_deletes_the_object(
        store: Store, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm_body("held", ["a.example.com/x", "b.example.com/y"]))
    core.delete_namespaced_config_map("held", NS)
    since = store.resource_version
    _set_finalizers(core, "held", ["b.example.com/y"])
    assert store.get(kinds.CONFIGMAP, NS, "held")["metadata"]["finalizers"] == [
        "b.example.com/y"]
    _set_finalizers(core, "held", None)
    assert store.find(kinds.CONFIGMAP, NS, "held") is None
    types = [e.type for e in store.events_since(since) or []]
    assert types == ["MODIFIED", "DELETED"]


def test_no_finalizer_can_be_added_to_a_terminating_object(
        store: Store, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm_body("held", ["a.example.com/x"]))
    core.delete_namespaced_config_map("held", NS)
    with pytest.raises(ApiException) as err:
        _set_finalizers(core, "held", ["a.example.com/x", "b.example.com/new"])
    assert err.value.status == 422 and err.value.body is not None
    message = json.loads(err.value.body)["message"]
    assert "no new finalizers can be added if the object is being deleted" in message
    assert "b.example.com/new" in message
    # Before the deletion adding one was fine.
    core.create_namespaced_config_map(NS, _cm_body("live", []))
    assert _set_finalizers(core, "live", ["b.example.com/new"])["metadata"]["finalizers"] == [
        "b.example.com/new"]


def test_deletion_timestamp_cannot_be_set_or_cleared_by_an_update(
        store: Store, core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm_body("held", ["a.example.com/x"]))
    core.delete_namespaced_config_map("held", NS)
    stamp = store.get(kinds.CONFIGMAP, NS, "held")["metadata"]["deletionTimestamp"]
    core.patch_namespaced_config_map("held", NS, [
        {"op": "remove", "path": "/metadata/deletionTimestamp"},
        {"op": "replace", "path": "/data/k", "value": "w"}])
    after = store.get(kinds.CONFIGMAP, NS, "held")
    assert after["data"]["k"] == "w" and after["metadata"]["deletionTimestamp"] == stamp


def test_graceful_pod_with_a_finalizer_outlives_its_kubelet_delete(store: Store) -> None:
    """The kubelet's final delete (grace 0) leaves a pod with a finalizer Terminating."""
    body = {"metadata": {"name": "p", "namespace": NS, "finalizers": ["example.com/hold"]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}}
    writes.create(store, kinds.POD, body, namespace=NS)
    marked = writes.delete(store, kinds.POD, namespace=NS, name="p")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    store.delete(kinds.POD, NS, "p")  # what the kubelet does once the containers stopped
    kept = store.get(kinds.POD, NS, "p")
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 0
    writes.patch(store, kinds.POD, writes.MERGE_PATCH, {"metadata": {"finalizers": None}},
                 namespace=NS, name="p")
    assert store.find(kinds.POD, NS, "p") is None


# ---- propagation through the garbage collector -------------------------------------------------


def _delete(bare: Bare, kind: kinds.Kind, name: str, policy: str | None) -> Obj:
    return writes.delete(bare.store, kind, namespace=NS, name=name,
                         options=writes.DeleteOptions(propagation=policy))


def test_background_is_the_default(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2)
    pods = {p["metadata"]["name"] for p in bare.pods(DCGM)}
    _delete(bare, kinds.DAEMONSET, DCGM, None)
    assert bare.store.find(kinds.DAEMONSET, NS, DCGM) is None  # gone at once
    bare.wait_for(lambda: not pods & {p["metadata"]["name"] for p in bare.pods(DCGM)})


def test_foreground_keeps_the_owner_until_its_dependents_are_gone(
        make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3, termination_seconds=5.0)
    seen: list[tuple[str, str, int]] = []  # (event, kind, pods of the DaemonSet left)

    def note(ev: Any) -> None:
        if ev.resource.key == kinds.DAEMONSET.key and ev.object["metadata"]["name"] == DCGM:
            left = len([p for p in bare.store.list(kinds.POD, NS)[0]
                        if p["metadata"]["labels"].get("app") == DCGM])
            seen.append((ev.type, "ds", left))

    bare.store.subscribe(note)
    bare.samplers.append(note)
    marked = _delete(bare, kinds.DAEMONSET, DCGM, "Foreground")
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    bare.wait_for(lambda: all(p["metadata"].get("deletionTimestamp") for p in bare.pods(DCGM)))
    assert bare.store.find(kinds.DAEMONSET, NS, DCGM) is not None  # pods still terminating
    bare.wait_for(lambda: bare.store.find(kinds.DAEMONSET, NS, DCGM) is None)
    assert not bare.pods(DCGM)
    deleted = [s for s in seen if s[0] == "DELETED"]
    assert deleted == [("DELETED", "ds", 0)]  # only after the last pod went
    assert len(bare.pods("nvidia-dcgm-exporter-dra")) == 3


def test_foreground_does_not_wait_for_dependents_that_do_not_block(
        make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1)
    owner = bare.store.create(kinds.CONFIGMAP, _cm("owner", []))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
           "uid": owner["metadata"]["uid"]}
    bare.store.create(kinds.CONFIGMAP, {"metadata": {
        "name": "dep", "namespace": NS, "ownerReferences": [ref],
        "finalizers": ["example.com/hold"]}})
    _delete(bare, kinds.CONFIGMAP, "owner", "Foreground")
    bare.wait_for(lambda: bare.store.find(kinds.CONFIGMAP, NS, "owner") is None)
    dep = bare.store.get(kinds.CONFIGMAP, NS, "dep")
    assert dep["metadata"]["deletionTimestamp"]  # deleted too, held by its own finalizer


def test_orphan_keeps_the_pods_and_strips_their_owner(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    before = {p["metadata"]["uid"] for p in bare.pods(DCGM)}
    _delete(bare, kinds.DAEMONSET, DCGM, "Orphan")
    bare.wait_for(lambda: bare.store.find(kinds.DAEMONSET, NS, DCGM) is None)
    pods = bare.pods(DCGM)
    assert {p["metadata"]["uid"] for p in pods} == before
    assert all(not p["metadata"].get("ownerReferences") for p in pods)
    assert all(not p["metadata"].get("deletionTimestamp") for p in pods)


def test_kubectl_delete_wait_false_shows_terminating_then_patch_releases(
        store: Store, core: client.CoreV1Api, kubectl: Kubectl) -> None:
    core.create_namespaced_config_map(NS, _cm_body("held", ["example.com/hold"]))
    kubectl("delete", "configmap", "held", "-n", NS, "--wait=false")
    got = json.loads(kubectl("get", "configmap", "held", "-n", NS, "-o", "json").stdout)
    assert got["metadata"]["deletionTimestamp"]
    kubectl("patch", "configmap", "held", "-n", NS, "--type=merge",
            "-p", '{"metadata":{"finalizers":null}}')
    assert store.find(kinds.CONFIGMAP, NS, "held") is None
    gone = kubectl("get", "configmap", "held", "-n", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
