"""DRA in the sim: `resource.k8s.io/v1` ResourceClaimTemplates and ResourceClaims are served;
the GPUCluster stack's DCGM pods get a claim from their template (named `<pod>-<claim>-xxxxx`,
owned by the pod, annotated with the pod claim), allocated with admin access on their node and
recorded in `status.resourceClaimStatuses`; a claim that cannot be allocated keeps the pod
Pending (PodScheduled False, Unschedulable) and the kubelet does not start it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dcgm_sim import dra, writes
from dcgm_sim.controllers import pods as P
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.conftest import Bare
from tests.sim.conftest import NS, Kubectl, Raw

DCGM = "nvidia-dcgm-dra"
EXPORTER = "nvidia-dcgm-exporter-dra"
Obj = dict[str, Any]


def _claims_of(store: Store, pod: Obj) -> list[Obj]:
    uid = pod["metadata"]["uid"]
    return [c for c in store.list(kinds.RESOURCE_CLAIM, NS)[0]
            if (P.controller_ref(c) or {}).get("uid") == uid]


def _condition(pod: Obj, ctype: str) -> Obj:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == ctype), {})


def _check_claimed(store: Store, pod: Obj) -> Obj:
    [claim] = _claims_of(store, pod)
    name = pod["metadata"]["name"]
    assert claim["metadata"]["name"].startswith(f"{name}-admin-gpus-")
    assert len(claim["metadata"]["name"]) == len(f"{name}-admin-gpus-") + 5
    ref = P.controller_ref(claim) or {}
    assert (ref["kind"], ref["name"], ref["blockOwnerDeletion"]) == ("Pod", name, True)
    assert claim["metadata"]["annotations"][dra.POD_CLAIM_NAME_ANNOTATION] == "admin-gpus"
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 8  # allocationMode All: every GPU of the node
    assert all(r["adminAccess"] is True and r["pool"] == pod["spec"]["nodeName"]
               and r["request"] == "admin-gpus" for r in results)
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}]
    assert pod["status"]["resourceClaimStatuses"] == [
        {"name": "admin-gpus", "resourceClaimName": claim["metadata"]["name"]}]
    return claim


def test_seeded_dcgm_pods_have_allocated_admin_claims(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2)
    assert bare.store.find(kinds.RESOURCE_CLAIM_TEMPLATE, NS, "nvidia-dcgm-admin")
    for pod in bare.pods(DCGM) + bare.pods(EXPORTER):
        _check_claimed(bare.store, pod)
    bare.wait_idle()
    for pod in bare.pods(DCGM):  # the controllers found nothing to change
        _check_claimed(bare.store, pod)


def test_a_new_pod_gets_a_new_claim_and_the_old_one_goes(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2)
    old = next(p for p in bare.pods(DCGM) if p["spec"]["nodeName"] == "gpu-node-0001")
    [old_claim] = _claims_of(bare.store, old)
    writes.delete(bare.store, kinds.POD, namespace=NS, name=old["metadata"]["name"])

    def replaced() -> Obj | None:
        return next((p for p in bare.pods(DCGM) if p["spec"]["nodeName"] == "gpu-node-0001"
                     and p["metadata"]["uid"] != old["metadata"]["uid"]
                     and P.is_pod_ready(p)), None)
    new = bare.wait_for(replaced)
    assert new is not None  # wait_for answers only once the predicate's value is truthy
    _check_claimed(bare.store, new)
    bare.wait_for(lambda: bare.store.find(kinds.RESOURCE_CLAIM, NS,
                                          old_claim["metadata"]["name"]) is None)


def test_unallocatable_claim_keeps_the_pod_pending(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    bare.annotate_node("gpu-node-0002", dra.UNALLOCATABLE_ANNOTATION, "true")
    old = next(p for p in bare.pods(DCGM) if p["spec"]["nodeName"] == "gpu-node-0002")
    writes.delete(bare.store, kinds.POD, namespace=NS, name=old["metadata"]["name"])

    def pending() -> Obj | None:
        for p in bare.pods(DCGM):
            if p["spec"]["nodeName"] == "gpu-node-0002" and p["metadata"]["uid"] != \
                    old["metadata"]["uid"] and _condition(p, "PodScheduled")["status"] == "False":
                return p
        return None
    found = bare.wait_for(pending)
    assert found is not None  # wait_for answers only once the predicate's value is truthy
    bare.wait_idle()
    pod = bare.get(kinds.POD, found["metadata"]["name"])
    scheduled = _condition(pod, "PodScheduled")
    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"] == ("0/3 nodes are available: 1 cannot allocate all claims, "
                                    "2 node(s) didn't match Pod's node affinity/selector.")
    assert pod["status"]["phase"] == "Pending"
    assert "hostIP" not in pod["status"] and "containerStatuses" not in pod["status"]
    [claim] = _claims_of(bare.store, pod)
    assert not (claim.get("status") or {}).get("allocation")
    assert bare.get(kinds.DAEMONSET, DCGM)["status"]["numberUnavailable"] == 1
    # The fault clears: the claim is allocated and the pod starts.
    bare.annotate_node("gpu-node-0002", dra.UNALLOCATABLE_ANNOTATION, None)
    bare.wait_for(lambda: P.is_pod_ready(bare.get(kinds.POD, pod["metadata"]["name"])))
    running = bare.get(kinds.POD, pod["metadata"]["name"])
    assert _condition(running, "PodScheduled")["status"] == "True"
    _check_claimed(bare.store, running)


def test_a_node_without_gpus_cannot_allocate(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1)
    bare.store.create(kinds.NODE, {"metadata": {"name": "cpu-node", "labels": {
        "nvidia.com/gpu.deploy.dcgm-dra": "true"}}, "spec": {},
        "status": {"capacity": {"cpu": "8"}}})
    pod = bare.wait_for(lambda: next((p for p in bare.pods(DCGM)
                                      if p["spec"]["nodeName"] == "cpu-node" and _condition(
                                          p, "PodScheduled")["status"] == "False"), None))
    assert pod is not None  # wait_for answers only once the predicate's value is truthy
    assert "cannot allocate all claims" in _condition(pod, "PodScheduled")["message"]
    assert pod["status"]["phase"] == "Pending"


def test_missing_template_waits_then_the_pod_starts(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1)
    pod = {"metadata": {"name": "user", "namespace": NS, "labels": {"app": "user"}},
           "spec": {"nodeName": "gpu-node-0001",
                    "containers": [{"name": "c", "image": "i",
                                    "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one"}]}}
    writes.create(bare.store, kinds.POD, pod, namespace=NS)
    waiting = bare.wait_for(lambda: (lambda p: p if _condition(p, "PodScheduled").get(
        "status") == "False" else None)(bare.get(kinds.POD, "user")))
    assert waiting is not None  # wait_for answers only once the predicate's value is truthy
    assert "one" in _condition(waiting, "PodScheduled")["message"]
    assert waiting["status"]["phase"] == "Pending"
    template = {"metadata": {"name": "one", "namespace": NS}, "spec": {"spec": {"devices": {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    writes.create(bare.store, kinds.RESOURCE_CLAIM_TEMPLATE, template, namespace=NS)
    bare.wait_for(lambda: P.is_pod_ready(bare.get(kinds.POD, "user")))
    [claim] = _claims_of(bare.store, bare.get(kinds.POD, "user"))
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert "adminAccess" not in result and result["device"] == "gpu-0"


# ---- the API -----------------------------------------------------------------------------------


def test_discovery_serves_resource_k8s_io_v1(raw: Raw) -> None:
    code, doc, _ = raw("GET", "/apis/resource.k8s.io/v1")
    assert code == 200
    names = {r["name"]: r for r in doc["resources"]}
    assert names["resourceclaims"]["namespaced"] is True
    assert "resourceclaims/status" in names
    assert "resourceclaimtemplates" in names and "resourceclaimtemplates/status" not in names


def test_claim_status_is_a_subresource(raw: Raw) -> None:
    base = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c1"}, "spec": {"devices": {"requests": []}}}
    code, created, _ = raw("POST", base, {**claim, "status": {"reservedFor": [{"name": "x"}]}})
    assert code == 201, created
    assert not created.get("status")  # a client's status is dropped on create
    created["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    code, updated, _ = raw("PUT", f"{base}/c1", created)
    assert code == 200 and not updated.get("status")  # the main resource ignores status
    code, updated, _ = raw("PUT", f"{base}/c1/status", created)
    assert code == 200 and updated["status"]["reservedFor"][0]["name"] == "p"
    changed = dict(updated, spec={"devices": {"requests": [{"name": "r"}]}})
    code, refused, _ = raw("PUT", f"{base}/c1", changed)
    assert code == 422 and "field is immutable" in refused["message"]
    code, listed, _ = raw("GET", base)
    assert code == 200 and listed["kind"] == "ResourceClaimList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["c1"]


def test_kubectl_lists_claims(kubectl: Kubectl, store: Store) -> None:
    store.create(kinds.RESOURCE_CLAIM, {"metadata": {"name": "c1", "namespace": NS},
                                        "spec": {}})
    out = json.loads(kubectl("get", "resourceclaims.resource.k8s.io", "-n", NS, "-o",
                             "json").stdout)
    assert [i["metadata"]["name"] for i in out["items"]] == ["c1"]
    assert "c1" in kubectl("get", "resourceclaims", "-n", NS).stdout


# ---- pure rules --------------------------------------------------------------------------------


def test_generate_name_cuts_both_parts() -> None:
    assert dra.generate_name("pod", "gpu") == "pod-gpu-"
    # 82 characters: each part cut to its share of 57 (60*57//82 = 41, 20*57//82 = 13).
    assert dra.generate_name("p" * 60, "c" * 20) == "p" * 41 + "-" + "c" * 13


def test_exclusive_requests_do_not_share_devices() -> None:
    node = {"metadata": {"name": "n"}, "status": {"capacity": {"nvidia.com/gpu": "2"}}}
    claim = {"spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}
    assert dra.allocate(claim, node, taken=0) is not None
    assert dra.allocate(claim, node, taken=1) is None
    admin = {"spec": {"devices": {"requests": [{"name": "r", "exactly": {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True}}]}}}
    assert dra.allocate(admin, node, taken=2) is not None  # admin access shares
    other = {"spec": {"devices": {"requests": [
        {"name": "r", "exactly": {"deviceClassName": "nic.example.com"}}]}}}
    assert dra.allocate(other, node) is None


def test_claims_can_be_watched(raw: Raw, store: Store) -> None:
    base = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
    _, listed, _ = raw("GET", base)
    rv = listed["metadata"]["resourceVersion"]
    store.create(kinds.RESOURCE_CLAIM, {"metadata": {"name": "w1", "namespace": NS},
                                        "spec": {}})
    code, body, _ = raw("GET", f"{base}?watch=1&resourceVersion={rv}&timeoutSeconds=1")
    assert code == 200
    events = [json.loads(line) for line in str(body).splitlines() if line.strip()] \
        if isinstance(body, str) else [body]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w1")]
