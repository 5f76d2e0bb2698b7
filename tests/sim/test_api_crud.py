"""Simulated API server, through the official client: create/get/update/patch/delete semantics,
resourceVersion conflicts, generation, dry-run, graceful pod deletion and Status error bodies."""

from __future__ import annotations

import json
from typing import Any, Protocol, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Raw, daemonset, pod


def _status(exc: ApiException) -> dict[str, Any]:
    assert exc.body is not None
    return dict(json.loads(exc.body))


def _cm(body: dict[str, Any]) -> client.V1ConfigMap:
    """A plain-dict ConfigMap body: the official client sends a dict as it is."""
    return cast(client.V1ConfigMap, body)


def _ds(body: dict[str, Any]) -> client.V1DaemonSet:
    """A plain-dict DaemonSet body: the official client sends a dict as it is."""
    return cast(client.V1DaemonSet, body)


def _pod(body: dict[str, Any]) -> client.V1Pod:
    """A plain-dict Pod body: the official client sends a dict as it is."""
    return cast(client.V1Pod, body)


class _Stored(Protocol):
    @property
    def metadata(self) -> client.V1ObjectMeta | None: ...


def _meta(obj: _Stored) -> client.V1ObjectMeta:
    """The metadata of an object the server returned, which always carries it."""
    assert obj.metadata is not None
    return obj.metadata


def _ds_status(ds: client.V1DaemonSet) -> client.V1DaemonSetStatus:
    assert ds.status is not None
    return ds.status


def test_create_get_and_server_assigned_metadata(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(
        NS, _cm({"metadata": {"name": "cm"}, "data": {"k": "v"}}))
    assert _meta(created).uid and _meta(created).resource_version
    assert _meta(created).creation_timestamp is not None
    got = core.read_namespaced_config_map("cm", NS)
    assert got.data == {"k": "v"}
    assert _meta(got).resource_version == _meta(created).resource_version


def test_create_existing_name_is_409_already_exists(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    assert err.value.status == 409
    body = _status(err.value)
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "cm" already exists'
    assert body["details"] == {"name": "cm", "kind": "configmaps"}


def test_get_missing_is_404_not_found_status(apps: client.AppsV1Api) -> None:
    with pytest.raises(ApiException) as err:
        apps.read_namespaced_daemon_set("nope", NS)
    assert err.value.status == 404
    body = _status(err.value)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["reason"] == "NotFound"
    assert body["details"] == {"name": "nope", "group": "apps", "kind": "daemonsets"}
    assert body["message"] == 'daemonsets.apps "nope" not found'


def test_create_in_missing_namespace_is_404(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("absent", _cm({"metadata": {"name": "cm"}}))
    assert err.value.status == 404
    assert _status(err.value)["message"] == 'namespaces "absent" not found'


def test_update_with_stale_resource_version_is_409_conflict(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_config_map(
        NS, _cm({"metadata": {"name": "cm"}, "data": {"a": "1"}}))
    first.data = {"a": "2"}
    core.replace_namespaced_config_map("cm", NS, first)
    first.data = {"a": "3"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("cm", NS, first)
    assert err.value.status == 409
    assert _status(err.value)["reason"] == "Conflict"
    assert "the object has been modified" in str(_status(err.value)["message"])
    assert core.read_namespaced_config_map("cm", NS).data == {"a": "2"}


def test_update_without_resource_version_is_unconditional(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}, "data": {"a": "1"}}))
    updated = core.replace_namespaced_config_map(
        "cm", NS, _cm({"metadata": {"name": "cm"}, "data": {"a": "9"}}))
    assert updated.data == {"a": "9"}


def test_patch_carrying_stale_resource_version_is_409(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    core.patch_namespaced_config_map("cm", NS, {"data": {"x": "1"}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(
            "cm", NS, {"metadata": {"resourceVersion": _meta(created).resource_version},
                       "data": {"x": "2"}})
    assert err.value.status == 409


def test_noop_update_keeps_resource_version(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map(
        NS, _cm({"metadata": {"name": "cm"}, "data": {"a": "1"}}))
    same = core.patch_namespaced_config_map("cm", NS, {"data": {"a": "1"}})
    assert _meta(same).resource_version == _meta(created).resource_version


def test_generation_moves_on_template_change_only(apps: client.AppsV1Api) -> None:
    created = apps.create_namespaced_daemon_set(NS, _ds(daemonset("dcgm")))
    assert _meta(created).generation == 1
    labelled = apps.patch_namespaced_daemon_set(
        "dcgm", NS, {"metadata": {"labels": {"nvidia.com/gpu-operator.dcgm": "true"}}})
    assert _meta(labelled).generation == 1
    assert _meta(labelled).resource_version != _meta(created).resource_version
    rolled = apps.patch_namespaced_daemon_set(
        "dcgm", NS, {"spec": {"template": {"metadata": {"labels": {
            "nvidia.com/gpu-operator.dcgm": "true"}}}}})
    assert _meta(rolled).generation == 2
    assert rolled.spec is not None
    assert _meta(rolled.spec.template).labels == {
        "app": "dcgm", "nvidia.com/gpu-operator.dcgm": "true"}


def test_status_subresource_changes_status_only(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_daemon_set(NS, _ds(daemonset("dcgm")))
    patched = apps.patch_namespaced_daemon_set_status(
        "dcgm", NS, {"status": {"desiredNumberScheduled": 3, "numberReady": 3,
                                "currentNumberScheduled": 3, "numberMisscheduled": 0},
                     "metadata": {"labels": {"ignored": "yes"}}})
    assert _ds_status(patched).desired_number_scheduled == 3
    assert "ignored" not in (_meta(patched).labels or {})
    assert _meta(patched).generation == 1
    main = apps.patch_namespaced_daemon_set("dcgm", NS, {"status": {"numberReady": 0}})
    assert _ds_status(main).number_ready == 3  # the main resource ignores status
    assert _ds_status(apps.read_namespaced_daemon_set_status("dcgm", NS)).number_ready == 3


def test_dry_run_writes_nothing(server: ApiServer, store: Store,
                                core: client.CoreV1Api) -> None:
    rv = store.resource_version
    made = core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}),
                                             dry_run="All")
    assert _meta(made).name == "cm"
    assert store.find(kinds.CONFIGMAP, NS, "cm") is None
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}, "data": {"a": "1"}}))
    rv = store.resource_version
    patched = core.patch_namespaced_config_map("cm", NS, {"data": {"a": "2"}}, dry_run="All")
    assert patched.data == {"a": "2"}
    core.delete_namespaced_config_map("cm", NS, dry_run="All")
    assert store.get(kinds.CONFIGMAP, NS, "cm")["data"] == {"a": "1"}
    assert store.resource_version == rv
    dry = [r for r in server.log.since() if r.dry_run]
    assert [r.verb for r in dry] == ["create", "patch", "delete"]
    assert all(not r.is_write for r in dry)


def test_unsupported_dry_run_value_is_400(raw: Raw) -> None:
    code, body, _ = raw("POST", f"/api/v1/namespaces/{NS}/configmaps?dryRun=Some",
                        {"metadata": {"name": "cm"}})
    assert code == 400 and body["reason"] == "BadRequest"


def test_body_namespace_mismatch_is_400(raw: Raw) -> None:
    code, body, _ = raw("POST", f"/api/v1/namespaces/{NS}/configmaps",
                        {"metadata": {"name": "cm", "namespace": "default"}})
    assert code == 400
    assert "does not match the namespace" in body["message"]


def test_put_name_mismatch_is_400(core: client.CoreV1Api, raw: Raw) -> None:
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    code, body, _ = raw("PUT", f"/api/v1/namespaces/{NS}/configmaps/cm",
                        {"metadata": {"name": "other"}})
    assert code == 400 and "does not match the name on the URL" in body["message"]


def test_post_to_an_object_path_is_405(raw: Raw) -> None:
    code, body, _ = raw("POST", f"/api/v1/namespaces/{NS}/configmaps/cm", {"metadata": {}})
    assert code == 405 and body["reason"] == "MethodNotAllowed"


def test_invalid_json_is_400(raw: Raw) -> None:
    code, body, _ = raw("POST", f"/api/v1/namespaces/{NS}/configmaps", b"{not json")
    assert code == 400 and body["reason"] == "BadRequest"


def test_invalid_label_value_is_422(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(
            NS, _cm({"metadata": {"name": "cm", "labels": {"a": "not valid!"}}}))
    assert err.value.status == 422
    body = _status(err.value)
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.labels"


def test_delete_returns_status_for_daemonsets_and_object_for_services(
        apps: client.AppsV1Api, raw: Raw) -> None:
    apps.create_namespaced_daemon_set(NS, _ds(daemonset("dcgm")))
    code, body, _ = raw("DELETE", f"/apis/apps/v1/namespaces/{NS}/daemonsets/dcgm")
    assert code == 200
    assert body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "dcgm" and body["details"]["kind"] == "daemonsets"
    raw("POST", f"/api/v1/namespaces/{NS}/services",
        {"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}})
    code, body, _ = raw("DELETE", f"/api/v1/namespaces/{NS}/services/svc")
    assert code == 200 and body["kind"] == "Service"


def test_delete_preconditions_mismatch_is_409(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map(
            "cm", NS, body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(uid="not-the-uid")))
    assert err.value.status == 409
    assert "Precondition failed: UID in precondition: not-the-uid" in str(
        _status(err.value)["message"])
    core.read_namespaced_config_map("cm", NS)


def test_pod_delete_is_graceful(store: Store, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, _pod(pod("p1")))
    marked = core.delete_namespaced_pod("p1", NS)
    assert _meta(marked).deletion_timestamp is not None
    assert _meta(marked).deletion_grace_period_seconds == 30
    assert store.find(kinds.POD, NS, "p1") is not None  # the kubelet finishes it
    again = core.delete_namespaced_pod("p1", NS, grace_period_seconds=0)
    assert _meta(again).name == "p1"
    assert store.find(kinds.POD, NS, "p1") is None


def test_pod_delete_grace_comes_from_options_then_spec(store: Store,
                                                       core: client.CoreV1Api) -> None:
    body = pod("p1")
    body["spec"]["terminationGracePeriodSeconds"] = 5
    core.create_namespaced_pod(NS, _pod(body))
    assert _meta(core.delete_namespaced_pod("p1", NS)).deletion_grace_period_seconds == 5
    core.create_namespaced_pod(NS, _pod(pod("p2")))
    marked = core.delete_namespaced_pod("p2", NS, grace_period_seconds=7)
    assert _meta(marked).deletion_grace_period_seconds == 7


def test_unscheduled_pod_is_deleted_at_once(store: Store, core: client.CoreV1Api) -> None:
    body = pod("p1")
    del body["spec"]["nodeName"]
    core.create_namespaced_pod(NS, _pod(body))
    core.delete_namespaced_pod("p1", NS)
    assert store.find(kinds.POD, NS, "p1") is None


def test_orphan_delete_leaves_the_object_with_the_orphan_finalizer(
        store: Store, apps: client.AppsV1Api) -> None:
    """No garbage collector runs here: the `orphan` finalizer keeps the DaemonSet, marked."""
    apps.create_namespaced_daemon_set(NS, _ds(daemonset("dcgm")))
    apps.delete_namespaced_daemon_set("dcgm", NS, propagation_policy="Orphan")
    kept = store.get(kinds.DAEMONSET, NS, "dcgm")
    assert kept["metadata"]["finalizers"] == ["orphan"]
    assert kept["metadata"]["deletionTimestamp"]


def test_pod_spec_is_immutable_but_for_images(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, _pod(pod("p1")))
    changed = core.patch_namespaced_pod(
        "p1", NS, {"spec": {"containers": [{"name": "c", "image": "img:2"}]}})
    assert changed.spec is not None
    assert changed.spec.containers[0].image == "img:2"
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p1", NS, {"spec": {"nodeName": "elsewhere"}})
    assert err.value.status == 422
    assert "pod updates may not change fields" in str(_status(err.value)["message"])


def test_deletecollection_by_label(store: Store, core: client.CoreV1Api) -> None:
    for i in range(3):
        core.create_namespaced_config_map(
            NS, _cm({"metadata": {"name": f"cm{i}",
                                  "labels": {"drop": str(i % 2 == 0).lower()}}}))
    core.delete_collection_namespaced_config_map(NS, label_selector="drop=true")
    left, _ = store.list(kinds.CONFIGMAP, NS)
    assert [o["metadata"]["name"] for o in left] == ["cm1"]


def test_namespace_defaults(core: client.CoreV1Api) -> None:
    ns = core.create_namespace(cast(client.V1Namespace, {"metadata": {"name": "extra"}}))
    assert ns.status is not None and ns.spec is not None
    assert ns.status.phase == "Active"
    assert _meta(ns).labels == {"kubernetes.io/metadata.name": "extra"}
    assert ns.spec.finalizers == ["kubernetes"]


def test_custom_resources_round_trip(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
            "metadata": {"name": "gpu-cluster"}, "spec": {"dcgm": {"enabled": True}}}
    custom.create_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", body)
    # custom objects come back as the plain JSON dicts they are (typed `object`)
    got = cast(dict[str, Any], custom.get_cluster_custom_object(
        "nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster"))
    assert got["spec"] == {"dcgm": {"enabled": True}}
    listed = cast(dict[str, Any], custom.list_cluster_custom_object(
        "nvidia.com", "v1alpha1", "gpuclusters"))
    assert listed["kind"] == "GPUClusterList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["gpu-cluster"]
