"""Seeding the simulated cluster: every stack's nodes, CRDs, CRs, DaemonSets, pods, Services,
EndpointSlices, Endpoints and ServiceMonitor, rendered from the fixtures and consistent with
what the controllers would produce (they find nothing to change, the operator imitation
included); `mixed` and `both` only for the operator releases that let both CRs coexist."""

from __future__ import annotations

import json

import pytest

from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import ControllerSet
from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from dcgm_sim.controllers.releases import SHIPPED
from dcgm_sim.kinds import ENDPOINTS, ResourceName
from dcgm_sim.seed import seed
from dcgm_sim.store import Store
from migrator.model import kinds

NS = "gpu-operator"
CP_DS = ["nvidia-dcgm", "nvidia-dcgm-exporter"]
GC_DS = ["nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"]


def names(store: Store, kind: ResourceName, ns: str | None = NS) -> list[str]:
    return sorted(o["metadata"]["name"] for o in store.list(kind, ns)[0])


def status(store: Store, name: str, ns: str = NS) -> dict[str, int]:
    return dict(store.get(kinds.DAEMONSET, ns, name)["status"])


@pytest.mark.parametrize(("stack", "daemonsets", "crs"), [
    ("clusterpolicy", CP_DS, ["ClusterPolicy"]),
    ("gpucluster", GC_DS, ["GPUCluster"]),
    ("mixed", CP_DS + GC_DS, ["ClusterPolicy", "GPUCluster"]),  # future-coexistence
    ("both", CP_DS + GC_DS, ["ClusterPolicy", "GPUCluster"]),  # future-coexistence
    ("none", [], []),
])
def test_stack_contents_and_controller_consistency(
    stack: str, daemonsets: list[str], crs: list[str]
) -> None:
    store = Store()
    release = FUTURE if stack in ("mixed", "both") else SHIPPED
    summary = seed(store, nodes=4, stack=stack, release=release)
    assert names(store, kinds.NAMESPACE, None) == ["default", "gpu-operator", "kube-system"]
    assert names(store, kinds.CRD, None) == ["clusterpolicies.nvidia.com",
                                             "gpuclusters.nvidia.com",
                                             "podmonitors.monitoring.coreos.com",
                                             "servicemonitors.monitoring.coreos.com"]
    assert names(store, kinds.NODE, None) == [f"gpu-node-000{i}" for i in range(1, 5)]
    assert sorted(names(store, kinds.DAEMONSET)) == sorted(daemonsets)
    assert sorted(names(store, kinds.SERVICE)) == sorted(daemonsets)
    assert names(store, ENDPOINTS) == sorted(daemonsets)
    assert summary.endpoints == len(daemonsets)
    cr_kinds = [o["kind"] for k in (kinds.CLUSTER_POLICY, kinds.GPU_CLUSTER)
                for o in store.list(k)[0]]
    assert cr_kinds == crs
    assert names(store, kinds.SERVICE_MONITOR) == (
        ["nvidia-dcgm-exporter"] if "ClusterPolicy" in crs else [])
    pods = store.list(kinds.POD, NS)[0]
    assert summary.pods == len(pods)
    for ds in daemonsets:
        st = status(store, ds)
        desired = st["desiredNumberScheduled"]
        assert desired == (2 if stack == "mixed" else 4)
        assert st == {"currentNumberScheduled": desired, "numberMisscheduled": 0,
                      "desiredNumberScheduled": desired, "numberReady": desired,
                      "updatedNumberScheduled": desired, "numberAvailable": desired,
                      "observedGeneration": 1}
        ready = [ep for s in store.list(kinds.ENDPOINTSLICE, NS)[0]
                 if s["metadata"]["labels"]["kubernetes.io/service-name"] == ds
                 for ep in s["endpoints"] if ep["conditions"]["ready"]]
        assert len(ready) == desired
        [subset] = store.get(ENDPOINTS, NS, ds)["subsets"]
        assert len(subset["addresses"]) == desired and "notReadyAddresses" not in subset
    before = store.resource_version
    controllers = ControllerSet(store, SimClock(0.01), operator_reconcile_seconds=RESYNC_SECONDS,
                                operator_release=release)
    controllers.start()
    try:
        assert controllers.wait_idle(10)
        assert store.resource_version == before  # nothing for the controllers to fix
    finally:
        controllers.stop()


def test_mixed_and_both_need_a_release_that_lets_both_crs_coexist() -> None:
    for stack in ("mixed", "both"):
        with pytest.raises(ValueError) as refused:
            seed(Store(), nodes=2, stack=stack)
        assert str(refused.value) == (
            f"--stack {stack} needs a ClusterPolicy and a GPUCluster at once, which the shipped "
            "GPU Operator release refuses; pass --operator-release future-coexistence (or "
            "shared-services-fork), the releases that let both stacks coexist.")


def test_the_shipped_release_labels_no_allocation_mode() -> None:
    """Upstream 9654928ac removed `nvidia.com/gpu-operator.resource-allocation.mode`."""
    for stack in ("clusterpolicy", "gpucluster"):
        store = Store()
        seed(store, nodes=2, stack=stack)
        assert all(R.MODE_LABEL not in n["metadata"]["labels"]
                   for n in store.list(kinds.NODE)[0])


def test_node_labels_per_stack() -> None:
    """Under the future release the mode label splits `mixed` (as upstream before 9654928ac)."""
    store = Store()
    seed(store, nodes=4, stack="mixed", release=FUTURE)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in store.list(kinds.NODE)[0]}
    assert [nodes[n][R.MODE_LABEL] for n in sorted(nodes)] == [
        "device-plugin", "device-plugin", "dra", "dra"]
    assert nodes["gpu-node-0001"]["nvidia.com/gpu.deploy.dcgm"] == "true"
    assert "nvidia.com/gpu.deploy.dcgm-dra" not in nodes["gpu-node-0001"]
    assert nodes["gpu-node-0004"]["nvidia.com/gpu.deploy.dcgm-exporter-dra"] == "true"
    assert "nvidia.com/gpu.deploy.dcgm" not in nodes["gpu-node-0004"]
    for labels in nodes.values():
        assert labels["nvidia.com/gpu.present"] == "true"
    for ds in CP_DS + GC_DS:
        assert status(store, ds)["desiredNumberScheduled"] == 2
    both = Store()
    seed(both, nodes=2, stack="both", release=FUTURE)
    for labels in (n["metadata"]["labels"] for n in both.list(kinds.NODE)[0]):
        assert {*R.DEPLOY_LABELS["clusterpolicy"], *R.DEPLOY_LABELS["gpucluster"]} <= set(labels)
    for ds in CP_DS + GC_DS:
        assert status(both, ds)["numberAvailable"] == 2


def test_clusterpolicy_fields_filled_by_the_operator() -> None:
    store = Store()
    seed(store, nodes=1, stack="clusterpolicy")
    everything = json.dumps([store.list(k)[0] for k in kinds.ALL])
    assert "FILLED BY THE OPERATOR" not in everything
    dcgm = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")["spec"]["template"]["spec"]
    exporter = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-exporter")["spec"]["template"]["spec"]
    assert dcgm["containers"][0]["image"].startswith("nvcr.io/nvidia/cloud-native/dcgm:")
    assert exporter["containers"][0]["image"].startswith("nvcr.io/nvidia/k8s/dcgm-exporter:")
    env = {e["name"]: e.get("value") for e in exporter["containers"][0]["env"]}
    assert env["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm:5555"
    smon = store.get(kinds.SERVICE_MONITOR, NS, "nvidia-dcgm-exporter")
    assert smon["spec"]["namespaceSelector"] == {"matchNames": [NS]}
    svc = store.get(kinds.SERVICE, NS, "nvidia-dcgm")
    assert svc["spec"]["internalTrafficPolicy"] == "Local" and svc["spec"]["clusterIP"]
    ds = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {
        "maxUnavailable": 1, "maxSurge": 0}}


def test_gpucluster_without_standalone_dcgm_uses_the_embedded_exporter() -> None:
    store = Store()
    seed(store, nodes=2, stack="gpucluster", gpucluster_dcgm=False)
    assert names(store, kinds.DAEMONSET) == ["nvidia-dcgm-exporter-dra"]
    assert names(store, kinds.SERVICE) == ["nvidia-dcgm-exporter-dra"]
    container = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-exporter-dra")["spec"]["template"][
        "spec"]["containers"][0]
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in {e["name"] for e in container["env"]}
    assert store.get(kinds.GPU_CLUSTER, None, "gpu-cluster")["spec"]["dcgm"]["enabled"] is False


def test_other_namespace_and_bad_arguments() -> None:
    store = Store()
    seed(store, nodes=1, stack="clusterpolicy", namespace="gpu-ops")
    assert names(store, kinds.DAEMONSET, "gpu-ops") == CP_DS
    smon = store.get(kinds.SERVICE_MONITOR, "gpu-ops", "nvidia-dcgm-exporter")
    assert smon["spec"]["namespaceSelector"] == {"matchNames": ["gpu-ops"]}
    with pytest.raises(ValueError, match="unknown stack"):
        seed(Store(), nodes=1, stack="legacy")
