"""Seed a Store with a GPU cluster as the GPU Operator leaves it: nodes, CRDs, CRs, the DCGM /
DCGM Exporter DaemonSets, Services and ServiceMonitor, and, so a 5000-node cluster starts fast,
pods that are already Running and Ready with DaemonSet status, ControllerRevisions,
EndpointSlices and Endpoints consistent with them.

Everything is built with the controllers' own pure functions (the operator renderer, the
DaemonSet controller's pod template and status, the kubelet's status, the EndpointSlice
reconciler, the endpoints controller's first sync), so when the controllers start they find
nothing to change.

Stacks: `clusterpolicy` (legacy), `gpucluster` (DRA), `none` (only nodes and CRDs), and for the
releases that let both CRs exist at once (`controllers/releases.py`: `future-coexistence`,
`shared-services-fork`; the shipped operator refuses, so seeding them for it is a ValueError)
`mixed` (both CRs, nodes split half and half, labelled with
`nvidia.com/gpu-operator.resource-allocation.mode`) and `both` (both CRs, both stacks on every
node). Only those releases label nodes with the mode label: upstream removed it in 9654928ac.
The CRs carry the status their controller writes once ready (`controllers/crstatus.py`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dcgm_sim import admission, allocation, dra, kinds, stacknames
from dcgm_sim.controllers import crstatus as C
from dcgm_sim.controllers import endpointslices as E
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import releases
from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers import rollouts as D
from dcgm_sim.controllers.endpoints import seeded_endpoints
from dcgm_sim.controllers.podstatus import IPAllocator, running_status
from dcgm_sim.controllers.reconciles import GPUCLUSTER_FINALIZER
from dcgm_sim.controllers.scheduling import node_should_run
from dcgm_sim.kinds import ENDPOINTS, POD_MONITOR
from dcgm_sim.network import DEFAULT as DEFAULT_NETWORK
from dcgm_sim.network import IPV4, Network
from dcgm_sim.store import Store

Obj = dict[str, Any]
STACKS = stacknames.STACKS
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
KUBELET_VERSION = "v1.32.4"


@dataclass(frozen=True)
class SeedSummary:
    """What `seed` created (for logs and the `sim serve` banner)."""

    stack: str
    nodes: int
    daemonsets: int
    pods: int
    services: int
    endpointslices: int
    endpoints: int = 0


def node_name(index: int) -> str:
    return f"gpu-node-{index:04d}"


def _node_stacks(stack: str, index: int, total: int) -> tuple[str, ...]:
    if stack == "clusterpolicy":
        return (R.CLUSTERPOLICY,)
    if stack == "gpucluster":
        return (R.GPUCLUSTER,)
    if stack == "mixed":
        return (R.CLUSTERPOLICY,) if index < total // 2 else (R.GPUCLUSTER,)
    if stack == "both":
        return (R.CLUSTERPOLICY, R.GPUCLUSTER)
    return ()


def _internal_ips(i: int, network: Network) -> list[Obj]:
    """The node's InternalIP per family, primary first (as a dual-stack kubelet reports them
    with `--node-ip`)."""
    return [{"type": "InternalIP",
             "address": f"192.168.{i // 250}.{i % 250 + 2}" if family == IPV4
             else f"fd00:192:168::{i + 2:x}"} for family in network.families]


def new_node(index: int, stacks: tuple[str, ...], network: Network = DEFAULT_NETWORK, *,
             mode_label: bool = False) -> Obj:
    """A GPU node labelled for the stacks that serve it (by the operator's node labeller; the
    mode label only with `mode_label`), with a podCIDR per IP family of the cluster (the node
    IPAM controller's)."""
    name = node_name(index)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        GPU_PRESENT_LABEL: "true",
    }
    for stack in stacks:
        for label in R.DEPLOY_LABELS[stack]:
            labels[label] = "true"
    if stacks and mode_label:
        labels[R.MODE_LABEL] = R.MODE_DEVICE_PLUGIN if stacks[0] == R.CLUSTERPOLICY else R.MODE_DRA
    i = index - 1
    cidrs = network.node_pod_cidrs(i)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"podCIDR": cidrs[0], "podCIDRs": cidrs},
        "status": {
            "addresses": [*_internal_ips(i, network), {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "63", "memory": "500Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": P.now_rfc3339(),
                            "lastTransitionTime": P.now_rfc3339()}],
            "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "containerRuntimeVersion":
                         "containerd://1.7.24", "operatingSystem": "linux",
                         "architecture": "amd64", "osImage": "Ubuntu 22.04.5 LTS"},
        },
    }


def crd(group: str, plural: str, kind: str, version: str, scope: str) -> Obj:
    singular = kind.lower()
    names = {"plural": plural, "singular": singular, "kind": kind, "listKind": f"{kind}List"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": scope,
            "versions": [{
                "name": version, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}},
                "subresources": {"status": {}},
            }],
        },
        "status": {
            "acceptedNames": names,
            "storedVersions": [version],
            "conditions": [{"type": "Established", "status": "True",
                            "reason": "InitialNamesAccepted",
                            "lastTransitionTime": P.now_rfc3339()}],
        },
    }


def seeded_cr(stack: str, *, gpucluster_dcgm: bool = True,
              namespace: str = "gpu-operator") -> Obj:
    """The sample CR as a Helm install would create it: images spelled out, the ClusterPolicy
    ServiceMonitor on, standalone DCGM on for GPUCluster unless `gpucluster_dcgm` is False;
    with the status its controller writes once every operand is ready, and a GPUCluster with
    the finalizer its controller puts on first (`reconciles.GPUCLUSTER_FINALIZER`)."""
    cr = R.sample_cr(stack)
    spec = cr.setdefault("spec", {})
    if stack == R.CLUSTERPOLICY:
        for section in ("dcgm", "dcgmExporter", "validator"):
            repo, image, version = R.CP_DEFAULT_IMAGES[section]
            part = spec.get(section) or {}
            spec[section] = {"repository": repo, "image": image, "version": version, **part}
        spec["dcgmExporter"]["serviceMonitor"] = {"enabled": True}
    else:
        spec.setdefault("dcgm", {})["enabled"] = gpucluster_dcgm
        cr["metadata"]["finalizers"] = [GPUCLUSTER_FINALIZER]
    message = C.CLUSTERPOLICY_READY if stack == R.CLUSTERPOLICY else C.GPUCLUSTER_READY
    cr["status"] = C.with_ready(C.with_state({}, C.STATE_READY, namespace), C.RECONCILED,
                                message, P.now_rfc3339())
    return cr


def _create_all(store: Store, kind: kinds.Kind, objs: Iterable[Obj]) -> list[Obj]:
    return [store.create(kind, obj) for obj in objs]


def _seed_daemonset(
    store: Store, desired: Obj, nodes: list[Obj], ips: IPAllocator
) -> tuple[Obj, list[Obj]]:
    """Create the DaemonSet, its revision, one Running+Ready pod per fitting node, its status."""
    ds = store.create(kinds.DAEMONSET, admission.admit(kinds.DAEMONSET, desired))
    hash_ = D.ds_hash(ds)
    store.create(kinds.CONTROLLER_REVISION, D.new_revision(ds, hash_, 1))
    pod_spec = ds["spec"]["template"].get("spec") or {}
    fits = {n["metadata"]["name"]: node_should_run(pod_spec, n) for n in nodes}
    by_name = {n["metadata"]["name"]: n for n in nodes}
    created: list[Obj] = []
    now = P.now_rfc3339()
    factory = D.PodFactory()
    for node, (should_run, _) in fits.items():
        if not should_run:
            continue
        name = f"{ds['metadata']['name']}-{P.random_suffix()}"
        while store.find(kinds.POD, ds["metadata"]["namespace"], name) is not None:
            name = f"{ds['metadata']['name']}-{P.random_suffix()}"  # as generateName retries
        pod = factory.pod(ds, node, hash_, name)
        pod["status"] = running_status(pod, by_name[node], ips.take_all(by_name[node]), True,
                                       now)
        claims = _claims_for(store, pod)
        if claims:
            pod["status"]["resourceClaimStatuses"] = [
                {"name": c["metadata"]["annotations"][dra.POD_CLAIM_NAME_ANNOTATION],
                 "resourceClaimName": c["metadata"]["name"]} for c in claims]
        created.append(pod := store.create(kinds.POD, pod, adopt=True))
        for claim in claims:
            _seed_claim(store, pod, claim, by_name[node])
    views = [D.PodView.of(p) for p in created]
    status = D.compute_status(ds, fits, D.group_by_node(views), hash_, lambda v: v.ready)
    body = {"metadata": {"name": ds["metadata"]["name"], "namespace": ds["metadata"]["namespace"]},
            "status": status}
    ds = store.update(kinds.DAEMONSET, body, subresource="status")
    return ds, created


def _claims_for(store: Store, pod: Obj) -> list[Obj]:
    """The claims the resourceclaim controller would have made for the pod's template claims
    (names only: the pod's uid, for the ownerReference, comes with its creation)."""
    claims = []
    ns = pod["metadata"]["namespace"]
    for pod_claim in dra.pod_claims(pod):
        template = store.find(kinds.RESOURCE_CLAIM_TEMPLATE, ns,
                              str(pod_claim.get("resourceClaimTemplateName") or ""))
        if template is None:
            continue
        name = dra.generate_name(pod["metadata"]["name"], pod_claim["name"]) + P.random_suffix()
        placeholder = {"metadata": {"name": "", "namespace": ns, "uid": ""},
                       "apiVersion": "v1", "kind": "Pod"}
        claims.append(dra.claim_from_template(placeholder, pod_claim, template, name))
    return claims


def _seed_claim(store: Store, pod: Obj, claim: Obj, node: Obj) -> None:
    """The claim owned by the pod, allocated on its node and reserved for it."""
    claim["metadata"]["ownerReferences"] = [dict(P.owner_reference(pod))]
    allocation = dra.allocate(claim, node)
    if allocation is not None:
        claim["status"] = {"allocation": allocation, "reservedFor": [dra.reservation(pod)]}
    store.create(kinds.RESOURCE_CLAIM, claim, adopt=True)


def seed(
    store: Store,
    *,
    nodes: int,
    stack: str,
    namespace: str = "gpu-operator",
    gpucluster_dcgm: bool = True,
    release: str = releases.DEFAULT,
) -> SeedSummary:
    """Fill an empty store with the cluster described in the module docstring, as the operator
    `release` (`releases.RELEASES`) leaves it; ValueError for a stack it cannot hold."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; expected one of {', '.join(STACKS)}")
    releases.check_stack(stack, release)
    mode_label = releases.release(release).mode_label
    if nodes < 0:
        raise ValueError(f"nodes must be >= 0, got {nodes}")
    for ns in dict.fromkeys((namespace, "default", "kube-system")):
        store.create(kinds.NAMESPACE, {"metadata": {"name": ns},
                                       "spec": {"finalizers": ["kubernetes"]},
                                       "status": {"phase": "Active"}})
    _create_all(store, kinds.CRD, [
        crd("nvidia.com", "clusterpolicies", "ClusterPolicy", "v1", "Cluster"),
        crd("nvidia.com", "gpuclusters", "GPUCluster", "v1alpha1", "Cluster"),
        crd("monitoring.coreos.com", "servicemonitors", "ServiceMonitor", "v1", "Namespaced"),
        crd(POD_MONITOR.group, POD_MONITOR.plural, POD_MONITOR.kind, POD_MONITOR.version,
            "Namespaced"),
    ])
    node_objs = [store.create(kinds.NODE, new_node(i, _node_stacks(stack, i - 1, nodes),
                                                   store.network, mode_label=mode_label),
                              adopt=True) for i in range(1, nodes + 1)]
    cr_stacks = {"clusterpolicy": [R.CLUSTERPOLICY], "gpucluster": [R.GPUCLUSTER],
                 "mixed": [R.CLUSTERPOLICY, R.GPUCLUSTER], "both": [R.CLUSTERPOLICY, R.GPUCLUSTER],
                 "none": []}[stack]
    ips = IPAllocator(store.network)
    all_pods: list[Obj] = []
    services: list[Obj] = []
    n_ds = 0
    for cr_stack in cr_stacks:
        cr_kind = kinds.CLUSTER_POLICY if cr_stack == R.CLUSTERPOLICY else kinds.GPU_CLUSTER
        cr = store.create(cr_kind, seeded_cr(cr_stack, gpucluster_dcgm=gpucluster_dcgm,
                                             namespace=namespace))
        for desired in R.render(cr, namespace):
            if desired["kind"] == "DaemonSet":
                _, pods = _seed_daemonset(store, desired, node_objs, ips)
                all_pods.extend(pods)
                n_ds += 1
            elif desired["kind"] == "Service":
                allocated = allocation.allocated_by(services, network=store.network)
                services.append(store.create(kinds.SERVICE, admission.admit(
                    kinds.SERVICE, desired, allocated=allocated)))
            elif desired["kind"] == "ServiceMonitor":
                store.create(kinds.SERVICE_MONITOR, desired)
            elif desired["kind"] == "ResourceClaimTemplate":
                store.create(kinds.RESOURCE_CLAIM_TEMPLATE, desired)
    slices = endpoints = 0
    for svc in services:
        selector = E.service_selector(svc)
        if selector is None:
            continue
        sel = {k: v for k, v in selector.items()}
        members = [p for p in all_pods if p["metadata"]["namespace"] == svc["metadata"]["namespace"]
                   and all(P.labels_of(p).get(k) == v for k, v in sel.items())]
        for address_type in E.address_types(svc):
            plan = E.reconcile_slices(svc, [], E.desired_endpoints(svc, members, address_type),
                                      address_type=address_type)
            _create_all(store, kinds.ENDPOINTSLICE, plan.create)
            slices += len(plan.create)
        ep = seeded_endpoints(svc, members)
        if ep is not None:
            store.create(ENDPOINTS, ep, adopt=True)
            endpoints += 1
    return SeedSummary(stack, nodes, n_ds, len(all_pods), len(services), slices, endpoints)
