"""The verdict on the guard's shared EndpointSlices (model/outcome.py), on plain data: a
cluster running both stacks depends on a live guard, every endpoint of the tool's slices must
be a live Ready pod on its node, and a name no longer shared keeps none of them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from migrator import phases
from migrator.model import outcome
from migrator.model.outcome import Verdict, lease_live
from migrator.model.snapshot import EndpointView, PodView, ServiceEndpoints, Snapshot
from migrator.model.stacks import Catalog, load_catalog
from tests.helpers import builders as b

CAT = load_catalog()


def verdict(snapshot: Snapshot, catalog: Catalog) -> Verdict:
    """The verdict, with the phases' own answer to which phase fixes what."""
    return outcome.verdict(snapshot, catalog, phases.answers())
NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
STABLE = {"nvidia-dcgm": "nvidia-dcgm-dra", "nvidia-dcgm-exporter": "nvidia-dcgm-exporter-dra"}
COMMON = {"nvidia-dcgm": b.COMMON["dcgm"], "nvidia-dcgm-exporter": b.COMMON["exporter"]}


def _lease(holder: str = "guard-a", renewed: datetime = NOW, seconds: int = 15
           ) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "dcgm-migrate-guard", "namespace": b.NS, "uid": "lease-uid",
                         "labels": {"app.kubernetes.io/managed-by": "dcgm-migrate"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def _pods(ds: str, nodes: list[str]) -> list[PodView]:
    key = COMMON.get(ds) or COMMON[next(s for s, d in STABLE.items() if d == ds)]
    return [PodView(f"{ds}-{n}", f"uid-{ds}-{n}", n, {"app": ds, key: "true"}, True, False,
                    "DaemonSet", ds) for n in nodes]


def _view(p: PodView, *, shared: bool) -> EndpointView:
    return EndpointView(p.name, p.node, True, True, uid=p.uid,
                        address=f"10.0.0.{len(p.name)}",
                        slice="s-dcgm-migrate-0" if shared else "s-controller",
                        managed_by="dcgm-migrate" if shared else "endpointslice-controller.k8s.io")


def _mixed(cp_nodes: list[str], dra_nodes: list[str], *, leases: tuple[dict[str, Any], ...]
           = (), shared: bool = True) -> Snapshot:
    """Both stacks, the ClusterPolicy's Services hold the stable names, the guard's slices
    list the GPUCluster pods under them (`shared`)."""
    daemonsets, services, pods, endpoints = {}, {}, [], {}
    for stable, dra in STABLE.items():
        daemonsets[stable] = b.daemonset(stable, owner="ClusterPolicy", desired=len(cp_nodes))
        daemonsets[dra] = b.daemonset(dra, desired=len(dra_nodes))
        cp_pods, dra_pods = _pods(stable, cp_nodes), _pods(dra, dra_nodes)
        pods += cp_pods + dra_pods
        services[stable] = b.service(stable, {"app": stable}, owner="ClusterPolicy",
                                     local=stable == "nvidia-dcgm")
        services[dra] = b.service(dra, {"app": dra}, local=dra == "nvidia-dcgm-dra")
        endpoints[stable] = ServiceEndpoints(stable, tuple(
            [_view(p, shared=False) for p in cp_pods]
            + ([_view(p, shared=True) for p in dra_pods] if shared else [])))
        endpoints[dra] = ServiceEndpoints(dra, tuple(_view(p, shared=False) for p in dra_pods))
    crs = {kind: ({"apiVersion": f"nvidia.com/{version}", "kind": kind,
                   "metadata": {"name": "gpu-cluster", "uid": "cr-uid"}},)
           for kind, version in (("ClusterPolicy", "v1"), ("GPUCluster", "v1alpha1"))}
    return Snapshot(b.NS, cluster_policies=crs["ClusterPolicy"], gpu_clusters=crs["GPUCluster"],
                    daemonsets=daemonsets, services=services, pods=tuple(pods),
                    endpoints=endpoints, guard_leases=leases, leases_read=True, taken_at=NOW)


def _checks(v: Verdict, check: str) -> dict[str, tuple[bool, str, str]]:
    return {f.name: (f.ok, f.detail, f.fix) for f in v.findings if f.check == check}


def test_a_shared_cluster_with_a_live_guard_and_fresh_slices_passes_both_checks() -> None:
    v = verdict(_mixed(["n1", "n2"], ["n3", "n4"], leases=(_lease(),)), CAT)
    assert _checks(v, "guard-live")["guard-live/guard"][0]
    shared = _checks(v, "shared-endpoints")
    assert {n: ok for n, (ok, _, _) in shared.items()} == {
        "shared-endpoints/nvidia-dcgm": True, "shared-endpoints/nvidia-dcgm-exporter": True}


def test_a_stopped_guard_is_red_with_a_command_that_starts_it() -> None:
    stale = _lease(renewed=NOW - timedelta(seconds=16))
    for leases in ((), (stale,), (_lease(holder=""),)):
        v = verdict(_mixed(["n1"], ["n2"], leases=leases), CAT)
        ok, detail, fix = _checks(v, "guard-live")["guard-live/guard"]
        assert not ok and "no guard runs" in detail, detail
        assert fix.startswith("run `dcgm-migrate guard -n gpu-operator`")
        assert not v.ok
    _, detail, _ = _checks(verdict(_mixed(["n1"], ["n2"], leases=(stale,)), CAT),
                           "guard-live")["guard-live/guard"]
    assert "renewed 16 s ago, lasts 15 s" in detail


def test_the_guard_is_required_even_before_its_first_slice() -> None:
    """The names depend on it as soon as both stacks share them, slices or not."""
    v = verdict(_mixed(["n1"], ["n2"], shared=False), CAT)
    assert not _checks(v, "guard-live")["guard-live/guard"][0]


def test_leases_that_cannot_be_read_are_not_taken_for_a_live_guard() -> None:
    snap = replace(_mixed(["n1"], ["n2"], leases=()), leases_read=False)
    ok, detail, fix = _checks(verdict(snap, CAT), "guard-live")["guard-live/guard"]
    assert not ok and "listing Leases is refused" in detail and "docs/rbac.yaml" in fix


def test_an_endpoint_of_a_gone_pod_is_named_with_its_node() -> None:
    """The guard stopped, a node left the GPUCluster stack: its pod is gone, the tool's slice
    still lists it ready. No node is uncovered, yet kube-proxy routes to a dead address."""
    snap = _mixed(["n1"], ["n2", "n3"], leases=(_lease(),))
    gone = {"nvidia-dcgm-exporter-dra-n3"}
    snap = replace(snap, pods=tuple(p for p in snap.pods if p.name not in gone))
    shared = _checks(verdict(snap, CAT), "shared-endpoints")
    ok, detail, fix = shared["shared-endpoints/nvidia-dcgm-exporter"]
    assert not ok
    assert detail == ("1 ready endpoints of the tool's EndpointSlices route to no Ready pod: "
                      "nvidia-dcgm-exporter-dra-n3 on n3: the pod is gone")
    assert "kubectl -n gpu-operator delete endpointslices -l endpointslice.kubernetes.io/" \
           "managed-by=dcgm-migrate,kubernetes.io/service-name=nvidia-dcgm-exporter" in fix
    assert shared["shared-endpoints/nvidia-dcgm"][0]


def test_a_pod_not_ready_or_on_another_node_is_stale_too() -> None:
    snap = _mixed(["n1"], ["n2", "n3"], leases=(_lease(),))
    pods = tuple(replace(p, ready=False) if p.name == "nvidia-dcgm-dra-n2" else
                 replace(p, node="n9") if p.name == "nvidia-dcgm-dra-n3" else p
                 for p in snap.pods)
    ok, detail, _ = _checks(verdict(replace(snap, pods=pods), CAT),
                            "shared-endpoints")["shared-endpoints/nvidia-dcgm"]
    assert not ok
    assert "nvidia-dcgm-dra-n2 on n2: the pod is not Ready" in detail
    assert "nvidia-dcgm-dra-n3 on n3: the pod runs on n9" in detail


def test_slices_left_on_a_name_no_longer_shared_are_red() -> None:
    """The stable name became the tool's alias again (its ClusterPolicy deleted): the slices
    the guard kept for the ClusterPolicy's Service are not needed any more."""
    snap = _mixed(["n1"], ["n2"], leases=(_lease(),))
    alias = b.service("nvidia-dcgm-exporter", {"app": "nvidia-dcgm-exporter-dra"}, owner=None,
                      labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    v = verdict(replace(snap, services={**snap.services, "nvidia-dcgm-exporter": alias}), CAT)
    ok, detail, fix = _checks(v, "shared-endpoints")["shared-endpoints/nvidia-dcgm-exporter"]
    assert not ok and "left on a name that is not shared any more" in detail
    assert "delete endpointslices" in fix


def test_a_single_stack_cluster_needs_no_guard() -> None:
    v = verdict(b.gpucluster_snapshot(labelled=True), CAT)
    assert not _checks(v, "guard-live") and not _checks(v, "shared-endpoints")


def test_lease_liveness_is_renewal_within_the_duration() -> None:
    assert lease_live(_lease(renewed=NOW - timedelta(seconds=15)), NOW)
    assert not lease_live(_lease(renewed=NOW - timedelta(seconds=15, microseconds=1)), NOW)
    assert not lease_live(_lease(holder=""), NOW)
    assert lease_live(_lease(renewed=NOW - timedelta(days=1)), None)  # no read time: holder


def test_both_stacks_on_every_node_need_no_guard_until_a_node_runs_only_the_gpucluster_pod(
        ) -> None:
    """Where the owning stack's pod stands on every node nothing is shared; a node whose
    ClusterPolicy exporter is switched off reaches the name only through the guard."""
    v = verdict(_mixed(["n1", "n2"], ["n1", "n2"], shared=False), CAT)
    assert not _checks(v, "guard-live")
    snap = _mixed(["n1"], ["n1", "n2"], shared=False)
    assert not _checks(verdict(snap, CAT), "guard-live")["guard-live/guard"][0]
