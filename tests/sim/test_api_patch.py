"""Patch formats: JSON merge patch, JSON patch (incl. `test`) and strategic merge patch with the
Kubernetes merge keys and directives, as pure functions and through the server (415 for a
strategic patch on a custom resource, 422 for a failed JSON patch `test`)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim import patching
from tests.sim.conftest import NS, Raw, daemonset

POD_SPEC: dict[str, Any] = {
    "spec": {
        "containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"},
                                                   {"name": "Y", "value": "2"}],
             "ports": [{"containerPort": 80, "name": "http"}],
             "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
            {"name": "b", "image": "b:1", "args": ["--one", "--two"]},
        ],
        "volumes": [{"name": "v", "hostPath": {"path": "/v"}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    },
    "metadata": {"labels": {"app": "x", "keep": "y"}, "finalizers": ["f1"],
                 "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "K", "apiVersion": "v"}]},
}


def test_merge_patch_rfc7386() -> None:
    target = {"a": {"b": 1, "c": 2}, "list": [1, 2], "gone": True}
    patched = patching.merge_patch(target, {"a": {"b": None, "d": 3}, "list": [3], "gone": None})
    assert patched == {"a": {"c": 2, "d": 3}, "list": [3]}
    assert target == {"a": {"b": 1, "c": 2}, "list": [1, 2], "gone": True}  # not mutated


def test_json_patch_operations() -> None:
    doc = {"metadata": {"labels": {"a/b": "1"}}, "items": [1, 2, 3]}
    ops = [
        {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
        {"op": "add", "path": "/metadata/labels/c", "value": "2"},
        {"op": "remove", "path": "/items/0"},
        {"op": "add", "path": "/items/-", "value": 4},
        {"op": "replace", "path": "/items/0", "value": 9},
        {"op": "copy", "from": "/metadata/labels/c", "path": "/copied"},
        {"op": "move", "from": "/copied", "path": "/moved"},
    ]
    assert patching.json_patch(doc, ops) == {
        "metadata": {"labels": {"a/b": "1", "c": "2"}}, "items": [9, 3, 4], "moved": "2"}


@pytest.mark.parametrize("op", [
    {"op": "test", "path": "/a", "value": 2},
    {"op": "remove", "path": "/missing"},
    {"op": "replace", "path": "/no/parent", "value": 1},  # (a missing key alone: set, as v4)
    {"op": "add", "path": "/no/parent", "value": 1},
])
def test_json_patch_failures(op: dict[str, Any]) -> None:
    with pytest.raises(patching.PatchError):
        patching.json_patch({"a": 1}, [op])


def test_strategic_merge_merges_lists_by_their_keys() -> None:
    patch = {"spec": {"containers": [
        {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "20"}, {"name": "Z",
                                                                             "value": "3"}],
         "ports": [{"containerPort": 81, "name": "alt"}]},
        {"name": "c", "image": "c:1"},
    ], "tolerations": [{"key": "other", "operator": "Exists"}]}}
    out = patching.strategic_merge(POD_SPEC, patch)
    # apimachinery's order (normalizeElementOrder): the patch's elements in its order, and a
    # server-only one before them only where the server's order puts it before one of them
    a, c, b = out["spec"]["containers"]
    assert (a["name"], a["image"], c["name"], b["name"]) == ("a", "a:2", "c", "b")
    assert a["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "20"},
                        {"name": "Z", "value": "3"}]
    assert [p["containerPort"] for p in a["ports"]] == [81, 80]
    assert a["volumeMounts"] == [{"name": "v", "mountPath": "/v"}]
    assert b["args"] == ["--one", "--two"]
    assert out["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]  # replaced


def test_strategic_merge_maps_nulls_and_set_like_lists() -> None:
    patch = {"metadata": {"labels": {"keep": None, "new": "1"}, "finalizers": ["f2", "f1"],
                          "ownerReferences": [{"uid": "u2", "name": "o2", "kind": "K",
                                               "apiVersion": "v"}]}}
    out = patching.strategic_merge(POD_SPEC, patch)
    assert out["metadata"]["labels"] == {"app": "x", "new": "1"}
    assert out["metadata"]["finalizers"] == ["f2", "f1"]  # a set, in the patch's order
    assert [r["uid"] for r in out["metadata"]["ownerReferences"]] == ["u2", "u1"]


def test_strategic_merge_directives() -> None:
    delete_env = {"spec": {"containers": [{"name": "a", "env": [{"name": "X",
                                                                 "$patch": "delete"}]}]}}
    out = patching.strategic_merge(POD_SPEC, delete_env)
    assert out["spec"]["containers"][0]["env"] == [{"name": "Y", "value": "2"}]
    replace_list = {"spec": {"containers": [{"name": "only", "image": "o:1"},
                                            {"$patch": "replace"}]}}
    out = patching.strategic_merge(POD_SPEC, replace_list)
    assert out["spec"]["containers"] == [{"name": "only", "image": "o:1"}]
    replace_map = {"metadata": {"labels": {"$patch": "replace", "solo": "1"}}}
    assert patching.strategic_merge(POD_SPEC, replace_map)["metadata"]["labels"] == {"solo": "1"}
    delete_map = {"spec": {"$patch": "delete"}}  # mergeMap: an empty map, the key stays
    assert patching.strategic_merge(POD_SPEC, delete_map)["spec"] == {}
    drop = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}}
    assert patching.strategic_merge(POD_SPEC, drop)["metadata"]["finalizers"] == []
    retain = {"spec": {"volumes": [{"name": "v", "emptyDir": {}, "$retainKeys": ["emptyDir",
                                                                               "name"]}]}}
    assert patching.strategic_merge(POD_SPEC, retain)["spec"]["volumes"] == [
        {"name": "v", "emptyDir": {}}]


def test_strategic_merge_service_ports_by_port() -> None:
    svc = {"spec": {"ports": [{"name": "m", "port": 9400, "targetPort": 9400}]}}
    out = patching.strategic_merge(svc, {"spec": {"ports": [{"port": 9400, "targetPort": 9401},
                                                            {"port": 5555, "name": "d"}]}})
    assert out["spec"]["ports"] == [{"name": "m", "port": 9400, "targetPort": 9401},
                                    {"port": 5555, "name": "d"}]


def test_strategic_patch_through_the_server(apps: client.AppsV1Api) -> None:
    body = daemonset("dcgm")
    body["spec"]["template"]["spec"]["containers"].append({"name": "side", "image": "s:1"})
    # a plain-dict body: the official client sends a dict as it is
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, body))
    patched = apps.patch_namespaced_daemon_set("dcgm", NS, {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "img:2"}]}}}})
    assert patched.spec is not None and patched.spec.template.spec is not None
    images = {c.name: c.image for c in patched.spec.template.spec.containers}
    assert images == {"c": "img:2", "side": "s:1"}
    assert patched.metadata is not None
    assert patched.metadata.generation == 2


def test_json_patch_test_failure_is_422(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map(
        NS, cast(client.V1ConfigMap, {"metadata": {"name": "cm"}, "data": {"a": "1"}}))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("cm", NS, [
            {"op": "test", "path": "/data/a", "value": "2"},
            {"op": "replace", "path": "/data/a", "value": "3"}])
    assert err.value.status == 422
    assert core.read_namespaced_config_map("cm", NS).data == {"a": "1"}
    ok = core.patch_namespaced_config_map("cm", NS, [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "3"}])
    assert ok.data == {"a": "3"}


def test_merge_patch_through_the_server(raw: Raw) -> None:
    raw("POST", f"/api/v1/namespaces/{NS}/configmaps",
        {"metadata": {"name": "cm", "labels": {"a": "1", "b": "2"}}})
    code, body, _ = raw("PATCH", f"/api/v1/namespaces/{NS}/configmaps/cm",
                        {"metadata": {"labels": {"a": None, "c": "3"}}},
                        content_type="application/merge-patch+json")
    assert code == 200 and body["metadata"]["labels"] == {"b": "2", "c": "3"}


def test_strategic_patch_on_a_custom_resource_is_415(raw: Raw) -> None:
    raw("POST", "/apis/nvidia.com/v1alpha1/gpuclusters", {"metadata": {"name": "gpu-cluster"}})
    code, body, _ = raw("PATCH", "/apis/nvidia.com/v1alpha1/gpuclusters/gpu-cluster",
                        {"metadata": {"labels": {"a": "1"}}},
                        content_type="application/strategic-merge-patch+json")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"
    code, body, _ = raw("PATCH", "/apis/nvidia.com/v1alpha1/gpuclusters/gpu-cluster",
                        {"metadata": {"labels": {"a": "1"}}},
                        content_type="application/merge-patch+json")
    assert code == 200 and body["metadata"]["labels"] == {"a": "1"}


def test_apply_patch_is_415(raw: Raw) -> None:
    raw("POST", f"/api/v1/namespaces/{NS}/configmaps", {"metadata": {"name": "cm"}})
    code, _, _ = raw("PATCH", f"/api/v1/namespaces/{NS}/configmaps/cm?fieldManager=t",
                     b"metadata: {}", content_type="application/apply-patch+yaml")
    assert code == 415


def test_patch_of_missing_object_is_404(raw: Raw) -> None:
    code, body, _ = raw("PATCH", f"/api/v1/namespaces/{NS}/configmaps/none", {"data": {}},
                        content_type="application/merge-patch+json")
    assert code == 404 and body["reason"] == "NotFound"
