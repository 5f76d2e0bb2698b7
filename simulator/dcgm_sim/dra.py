"""Dynamic Resource Allocation, pure: the claim the resourceclaim controller creates for a pod
from a ResourceClaimTemplate (kubernetes/pkg/controller/resourceclaim/controller.go,
`handleClaim`), the allocation the scheduler's DRA plugin makes on the pod's node
(pkg/scheduler/framework/plugins/dynamicresources, `resource.k8s.io/v1` result shape), and the
kubelet's check that a pod's claims are allocated and reserved for it before it starts.

Devices: the node's `nvidia.com/gpu` capacity stands in for its ResourceSlice (driver and
device class `gpu.nvidia.com`, one pool per node, devices `gpu-0`..). A node annotated
`sim.dcgm-migrate/dra-unallocatable: "true"` publishes none (a driver that is not running).
`adminAccess` requests may share devices with other claims; other requests may not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dcgm_sim.controllers import pods as P

Obj = dict[str, Any]
ClaimLookup = Callable[[str, str], Obj | None]  # (namespace, name) -> ResourceClaim

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
UNALLOCATABLE_ANNOTATION = "sim.dcgm-migrate/dra-unallocatable"
DRIVER = "gpu.nvidia.com"
DEVICE_CLASS = "gpu.nvidia.com"
GPU_RESOURCE = "nvidia.com/gpu"
CANNOT_ALLOCATE = "cannot allocate all claims"


def pod_claims(pod: Mapping[str, Any]) -> list[Obj]:
    return list((pod.get("spec") or {}).get("resourceClaims") or [])


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, str]:
    """pod claim name -> generated ResourceClaim name, from `status.resourceClaimStatuses`."""
    return {str(s.get("name")): str(s.get("resourceClaimName"))
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
            if s.get("resourceClaimName")}


def claim_name_of(pod: Mapping[str, Any], pod_claim: Mapping[str, Any]) -> str | None:
    """The ResourceClaim a pod claim refers to (`resourceclaim.Name`): named directly, or
    generated from a template and recorded in the pod status; None while not created yet."""
    if pod_claim.get("resourceClaimName"):
        return str(pod_claim["resourceClaimName"])
    return claim_statuses(pod).get(str(pod_claim.get("name")))


def generate_name(pod_name: str, claim_name: str) -> str:
    """`handleClaim`'s generateName: `<pod>-<claim>-`, both cut proportionally past 57."""
    generate = f"{pod_name}-{claim_name}-"
    max_base = 57
    if len(generate) > max_base:
        generate = (pod_name[:len(pod_name) * max_base // len(generate)] + "-"
                    + claim_name[:len(claim_name) * max_base // len(generate)])
    return generate


def claim_from_template(pod: Mapping[str, Any], pod_claim: Mapping[str, Any],
                        template: Mapping[str, Any], name: str) -> Obj:
    """The ResourceClaim created for one pod claim: the template's `spec.metadata` and
    `spec.spec`, owned by the pod (controller, blockOwnerDeletion), annotated with the pod
    claim's name."""
    tspec = template.get("spec") or {}
    tmeta = tspec.get("metadata") or {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = str(pod_claim["name"])
    meta: Obj = {"name": name, "namespace": pod["metadata"]["namespace"],
                 "annotations": annotations,
                 "ownerReferences": [dict(P.owner_reference(pod), apiVersion="v1", kind="Pod")]}
    if tmeta.get("labels"):
        meta["labels"] = dict(tmeta["labels"])
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": dict(tspec.get("spec") or {})}


def node_devices(node: Mapping[str, Any] | None) -> int:
    """How many GPUs the node's DRA driver publishes (0: none, or the fault annotation)."""
    if node is None:
        return 0
    annotations = node.get("metadata", {}).get("annotations") or {}
    if str(annotations.get(UNALLOCATABLE_ANNOTATION, "")).strip().lower() == "true":
        return 0
    raw = ((node.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE, "0")
    try:
        return max(0, int(str(raw)))
    except ValueError:
        return 0


def _request_results(request: Mapping[str, Any], devices: int, taken: int,
                     name: str) -> list[Obj] | None:
    """The results of one `exactly` request, or None when it cannot be satisfied."""
    if (request.get("deviceClassName") or DEVICE_CLASS) != DEVICE_CLASS:
        return None
    admin = bool(request.get("adminAccess"))
    free = list(range(devices)) if admin else list(range(taken, devices))
    mode = request.get("allocationMode") or "ExactCount"
    if mode == "All":
        if not devices or (not admin and taken):
            return None  # All needs at least one device, and every one of them
        picked = free
    else:
        count = int(request.get("count") or 1)
        if count > len(free):
            return None
        picked = free[:count]
    out = []
    for index in picked:
        result: Obj = {"request": name, "driver": DRIVER, "pool": "", "device": f"gpu-{index}"}
        if admin:
            result["adminAccess"] = True
        out.append(result)
    return out


def allocate(claim: Mapping[str, Any], node: Mapping[str, Any] | None,
             taken: int = 0) -> Obj | None:
    """`status.allocation` for the claim on `node` (`taken`: devices already allocated there
    without admin access), or None when it cannot be allocated (`cannot allocate all claims`)."""
    devices = node_devices(node)
    if node is None or not devices:
        return None
    node_name = node["metadata"]["name"]
    results: list[Obj] = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        name = str(request.get("name"))
        got: list[Obj] | None = None
        if request.get("exactly") is not None:
            got = _request_results(request["exactly"], devices, taken, name)
        for sub in request.get("firstAvailable") or []:
            if got is not None:
                break
            got = _request_results(sub, devices, taken, f"{name}/{sub.get('name')}")
        if got is None:
            return None
        for r in got:
            r["pool"] = node_name
        results.extend(got)
    return {"devices": {"results": results},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
            "allocationTimestamp": P.now_rfc3339()}


def reservation(pod: Mapping[str, Any]) -> Obj:
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


def reserved_for(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    status = claim.get("status") or {}
    uid = pod["metadata"]["uid"]
    return bool(status.get("allocation")) and any(
        r.get("uid") == uid for r in status.get("reservedFor") or [])


def claims_ready(pod: Mapping[str, Any], lookup: ClaimLookup) -> bool:
    """The kubelet's `PrepareResources` precondition: every claim of the pod exists, is
    allocated and reserved for it (a pod without claims is always ready)."""
    ns = pod["metadata"].get("namespace", "")
    for pod_claim in pod_claims(pod):
        name = claim_name_of(pod, pod_claim)
        claim = lookup(ns, name) if name else None
        if claim is None or not reserved_for(claim, pod):
            return False
    return True
