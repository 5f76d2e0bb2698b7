"""The shared stable names of a cluster running both stacks (`model/sharing.py`), as pure data:
which operator Services the GPUCluster pods join, with which endpoints and ports, and the
EndpointSlice writes that keep the tool's slices right (few writes, never an operator's)."""

from __future__ import annotations

from typing import Any

from migrator.model import objects, sharing
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import load_catalog
from tests.helpers.builders import NS, daemonset, service

CATALOG = load_catalog()
EXPORTER = "nvidia-dcgm-exporter"
KEEPER = sharing.Keeper("coordination.k8s.io/v1", "Lease", "dcgm-migrate-guard", "uid-lease")


def _endpoint(pod: str, node: str, ready: bool = True, ip: str = "") -> dict[str, Any]:
    return {"addresses": [ip or f"10.0.{node[-1]}.{len(pod)}"],
            "conditions": {"ready": ready, "serving": ready, "terminating": False},
            "nodeName": node, "targetRef": {"kind": "Pod", "name": pod, "namespace": NS,
                                            "uid": f"uid-{pod}"}}


def _slice(name: str, service_name: str, endpoints: list[dict[str, Any]],
           managed_by: str = objects.CONTROLLER_NAME, rv: str = "1") -> dict[str, Any]:
    labels = {objects.SERVICE_NAME_LABEL: service_name, objects.MANAGED_BY_LABEL: managed_by}
    if managed_by == "dcgm-migrate":
        labels["app.kubernetes.io/managed-by"] = "dcgm-migrate"
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NS, "labels": labels,
                         "resourceVersion": rv},
            "addressType": "IPv4", "ports": [{"name": "gpu-metrics", "port": 9400,
                                              "protocol": "TCP"}],
            "endpoints": endpoints}


def _mixed(cp_nodes: list[str], dra_nodes: list[str], *, exporter_svc: dict[str, Any] | None
           = None) -> tuple[Snapshot, list[dict[str, Any]]]:
    """The exporters of a mixed cluster: the ClusterPolicy's Service of the stable name, the
    GPUCluster's `-dra` Service, and the controller's slices of both."""
    snap = Snapshot(NS, daemonsets={
        EXPORTER: daemonset(EXPORTER, owner="ClusterPolicy"),
        f"{EXPORTER}-dra": daemonset(f"{EXPORTER}-dra")},
        services={EXPORTER: exporter_svc or service(EXPORTER, {"app": EXPORTER},
                                                    owner="ClusterPolicy"),
                  f"{EXPORTER}-dra": service(f"{EXPORTER}-dra", {"app": f"{EXPORTER}-dra"})})
    slices = [_slice("cp-1", EXPORTER, [_endpoint(f"cp-{n}", n) for n in cp_nodes]),
              _slice("dra-1", f"{EXPORTER}-dra", [_endpoint(f"dra-{n}", n) for n in dra_nodes])]
    return snap, slices


def test_the_gpucluster_pods_of_nodes_the_operator_misses_join_its_service() -> None:
    snap, slices = _mixed(["n1", "n2"], ["n3", "n4"])
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.name == EXPORTER and share.owner == "ClusterPolicy/gpu-cluster"
    assert [e["nodeName"] for e in share.endpoints] == ["n3", "n4"]
    # The container declares its port as `metrics`; the Service port keeps its own name.
    assert share.ports == ({"name": "gpu-metrics", "port": 9400, "protocol": "TCP"},)
    assert share.conflicts == ()


def test_a_node_the_operator_covers_is_not_shared_even_when_both_run_there() -> None:
    snap, slices = _mixed(["n1", "n2", "n3"], ["n1", "n2", "n3"])  # `both`
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.endpoints == ()
    assert sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER) == []


def test_the_tools_alias_and_a_foreign_service_are_never_shared() -> None:
    ours = service(EXPORTER, {"app": f"{EXPORTER}-dra"}, owner=None,
                   labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    snap, slices = _mixed([], ["n3"], exporter_svc=ours)
    assert sharing.shares(snap, CATALOG, slices) == []
    foreign = service(EXPORTER, {"app": "x"}, owner=None)  # nobody's the tool knows
    snap, slices = _mixed([], ["n3"], exporter_svc=foreign)
    assert sharing.shares(snap, CATALOG, slices) == []


def test_a_port_the_gpucluster_pods_do_not_serve_is_left_out_and_reported() -> None:
    svc = service(EXPORTER, {"app": EXPORTER}, owner="ClusterPolicy")
    svc["spec"]["ports"].append({"name": "debug", "port": 9500, "targetPort": "debug",
                                 "protocol": "TCP"})
    svc["spec"]["ports"].append({"name": "raw", "port": 9600, "targetPort": 9600,
                                 "protocol": "TCP"})
    svc["spec"]["sessionAffinity"] = "ClientIP"
    snap, slices = _mixed(["n1"], ["n2"], exporter_svc=svc)
    [share] = sharing.shares(snap, CATALOG, slices)
    assert [p["name"] for p in share.ports] == ["gpu-metrics"]
    assert [c.split(" ")[:2] for c in share.conflicts[:2]] == [["port", "debug"],
                                                               ["port", "raw"]]
    assert any(c.startswith("sessionAffinity: 'ClientIP' here") for c in share.conflicts)


def test_a_named_target_port_resolves_on_the_gpucluster_pod_template() -> None:
    svc = service(EXPORTER, {"app": EXPORTER}, owner="ClusterPolicy")
    svc["spec"]["ports"][0]["targetPort"] = "metrics"
    snap, slices = _mixed(["n1"], ["n2"], exporter_svc=svc)
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.ports == ({"name": "gpu-metrics", "port": 9400, "protocol": "TCP"},)


def test_writes_create_then_keep_then_follow_one_pod_with_one_write() -> None:
    snap, slices = _mixed(["n1"], ["n2", "n3"])
    [share] = sharing.shares(snap, CATALOG, slices)
    [create] = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    assert create.action == sharing.CREATE and create.name == f"{EXPORTER}-dcgm-migrate-0"
    body = create.body
    assert body["metadata"]["labels"] == {
        objects.SERVICE_NAME_LABEL: EXPORTER, objects.MANAGED_BY_LABEL: "dcgm-migrate",
        "app.kubernetes.io/managed-by": "dcgm-migrate"}
    # The keeper (the guard's Lease) owns them: gone with the guard, not with the Service.
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "name": "dcgm-migrate-guard",
         "uid": "uid-lease", "controller": False}]
    live = {**body, "metadata": {**body["metadata"], "resourceVersion": "7"}}
    assert sharing.slice_writes(share, EXPORTER, [live], NS, CATALOG, KEEPER) == []  # steady

    # One GPUCluster pod restarts (not ready): one update of the slice that holds it.
    slices[1]["endpoints"][0]["conditions"] = {"ready": False, "serving": False,
                                               "terminating": False}
    [share] = sharing.shares(snap, CATALOG, slices)
    [update] = sharing.slice_writes(share, EXPORTER, [live], NS, CATALOG, KEEPER)
    assert update.action == sharing.UPDATE and update.resource_version == "7"
    assert [e["conditions"]["ready"] for e in update.body["endpoints"]] == [False, True]


def test_endpoints_stay_where_they_are_and_fill_slices_before_a_new_one() -> None:
    many = [f"n{i:03d}" for i in range(250)]
    snap, slices = _mixed([], many)
    [share] = sharing.shares(snap, CATALOG, slices)
    writes = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    assert [(w.action, len(w.body["endpoints"])) for w in writes] == [
        (sharing.CREATE, 100), (sharing.CREATE, 100), (sharing.CREATE, 50)]
    live = [{**w.body, "metadata": {**w.body["metadata"], "resourceVersion": "1"}}
            for w in writes]
    # A node leaves the first slice and a new one joins: the first slice takes it (room),
    # the others are not written.
    slices[1]["endpoints"] = [e for e in slices[1]["endpoints"] if e["nodeName"] != "n000"]
    slices[1]["endpoints"].append(_endpoint("dra-n999", "n999"))
    [share] = sharing.shares(snap, CATALOG, slices)
    again = sharing.slice_writes(share, EXPORTER, live, NS, CATALOG, KEEPER)
    assert [(w.action, w.name) for w in again] == [(sharing.UPDATE, f"{EXPORTER}-dcgm-migrate-0")]
    assert "n999" in {e["nodeName"] for e in again[0].body["endpoints"]}


def test_a_name_no_longer_shared_loses_its_slices_and_disabled_sharing_removes_them() -> None:
    snap, slices = _mixed(["n1"], ["n2"])
    [share] = sharing.shares(snap, CATALOG, slices)
    [create] = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    ours = {**create.body, "metadata": {**create.body["metadata"], "resourceVersion": "3"}}
    on, off = sharing.Sharing.ON, sharing.Sharing.OFF
    found, writes = sharing.all_writes(snap, CATALOG, [*slices, ours], KEEPER, mode=on)
    assert writes == [] and [s.name for s in found] == [EXPORTER]
    _, writes = sharing.all_writes(snap, CATALOG, [*slices, ours], KEEPER, mode=off)
    assert [(w.action, w.name, w.resource_version) for w in writes] == [
        (sharing.DELETE, f"{EXPORTER}-dcgm-migrate-0", "3")]
    # The GPUCluster pods are gone (its CR deleted): the slice goes too.
    gone = [*slices[:1], {**slices[1], "endpoints": []}, *slices[2:]]
    _, writes = sharing.all_writes(snap, CATALOG, [*gone, ours], KEEPER, mode=on)
    assert [w.action for w in writes] == [sharing.DELETE]


def test_while_apply_reruns_the_alias_phase_what_it_shared_stays_and_nothing_new_is_shared(
        ) -> None:
    """A stack change or drift re-runs the alias phase: its record is in progress for the
    length of the run. Shared slices deleted then would leave the nodes they serve without
    the stable names until the phase completes again; they stay, and follow the pods."""
    snap, slices = _mixed(["n1"], ["n2", "n3"])
    [share] = sharing.shares(snap, CATALOG, slices)
    [create] = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    ours = {**create.body, "metadata": {**create.body["metadata"], "resourceVersion": "3"}}
    keep = sharing.Sharing.KEEP
    found, writes = sharing.all_writes(snap, CATALOG, [*slices, ours], KEEPER, mode=keep)
    assert writes == [] and [s.name for s in found] == [EXPORTER]
    # a pod leaves meanwhile: the kept slice follows it
    moved = [*slices[:1], {**slices[1], "endpoints": [
        e for e in slices[1]["endpoints"] if e["nodeName"] != "n3"]}, *slices[2:]]
    _, writes = sharing.all_writes(snap, CATALOG, [*moved, ours], KEEPER, mode=keep)
    assert [(w.action, sorted(e["nodeName"] for e in w.body["endpoints"])) for w in writes] == [
        (sharing.UPDATE, ["n2"])]
    # a name not shared yet is not shared while the phase runs
    found, writes = sharing.all_writes(snap, CATALOG, slices, KEEPER, mode=keep)
    assert found == [] and writes == []


def test_an_internal_traffic_policy_difference_is_reported() -> None:
    """Local on one name, Cluster on the other: the GPUCluster pods joining a Cluster name are
    reached from every node, not their own; a left-out field reads as its default."""
    svc = service(EXPORTER, {"app": EXPORTER}, owner="ClusterPolicy")
    snap, slices = _mixed(["n1"], ["n2"], exporter_svc=svc)
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.conflicts == ()  # both Cluster: the -dra Service spells it, this one not
    svc["spec"]["internalTrafficPolicy"] = "Local"
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.conflicts == (
        "internalTrafficPolicy: 'Local' here, 'Cluster' on Service/nvidia-dcgm-exporter-dra "
        "(this Service's setting applies to both stacks' pods)",)


def _family(sl: dict[str, Any], family: str, prefix: str) -> dict[str, Any]:
    """The same slice in another address family (its endpoints' addresses in it)."""
    out = {**sl, "metadata": {**sl["metadata"], "name": sl["metadata"]["name"] + prefix},
           "addressType": family}
    if family == sharing.IPV6:
        out["endpoints"] = [{**e, "addresses": [f"fd00::{i + 1}"]}
                            for i, e in enumerate(sl["endpoints"])]
    return out


def test_an_ipv6_only_service_gets_ipv6_slices() -> None:
    svc = service(EXPORTER, {"app": EXPORTER}, owner="ClusterPolicy")
    svc["spec"]["ipFamilies"] = ["IPv6"]
    snap, slices = _mixed(["n1"], ["n2", "n3"], exporter_svc=svc)
    slices = [_family(sl, sharing.IPV6, "-v6") for sl in slices]
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.conflicts == ()
    [create] = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    assert create.name == f"{EXPORTER}-dcgm-migrate-ipv6-0"
    assert create.body["addressType"] == "IPv6"
    assert [e["addresses"] for e in create.body["endpoints"]] == [["fd00::1"], ["fd00::2"]]


def test_a_dual_stack_service_gets_one_slice_set_per_family() -> None:
    svc = service(EXPORTER, {"app": EXPORTER}, owner="ClusterPolicy")
    svc["spec"]["ipFamilies"] = ["IPv4", "IPv6"]
    snap, slices = _mixed(["n1"], ["n2"], exporter_svc=svc)
    slices = [*slices, *(_family(sl, sharing.IPV6, "-v6") for sl in slices)]
    [share] = sharing.shares(snap, CATALOG, slices)
    writes = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    assert [(w.name, w.body["addressType"], w.body["endpoints"][0]["addresses"][0])
            for w in writes] == [(f"{EXPORTER}-dcgm-migrate-0", "IPv4", "10.0.2.6"),
                                 (f"{EXPORTER}-dcgm-migrate-ipv6-0", "IPv6", "fd00::1")]
    live = [{**w.body, "metadata": {**w.body["metadata"], "resourceVersion": "4"}}
            for w in writes]
    assert sharing.slice_writes(share, EXPORTER, live, NS, CATALOG, KEEPER) == []
    # The Service drops IPv6 (SingleStack again): only its IPv6 slice goes.
    svc["spec"]["ipFamilies"] = ["IPv4"]
    [share] = sharing.shares(snap, CATALOG, slices)
    assert [(w.action, w.name) for w in sharing.slice_writes(
        share, EXPORTER, live, NS, CATALOG, KEEPER)] == [
        (sharing.DELETE, f"{EXPORTER}-dcgm-migrate-ipv6-0")]


def test_a_family_the_gpucluster_slices_do_not_list_is_reported() -> None:
    svc = service(EXPORTER, {"app": EXPORTER}, owner="ClusterPolicy")
    svc["spec"]["ipFamilies"] = ["IPv4", "IPv6"]
    snap, slices = _mixed(["n1"], ["n2"], exporter_svc=svc)
    [share] = sharing.shares(snap, CATALOG, slices)
    assert share.by_family["IPv6"] == ()
    assert share.conflicts == (
        "Service/nvidia-dcgm-exporter serves IPv6, but the EndpointSlices of "
        "Service/nvidia-dcgm-exporter-dra list no IPv6 address: the gpucluster pods join it "
        "without IPv6",)


def test_slices_of_the_old_owner_move_to_the_keeper_with_one_update() -> None:
    """Slices written when they belonged to the Service are taken over by the Lease."""
    snap, slices = _mixed(["n1"], ["n2"])
    [share] = sharing.shares(snap, CATALOG, slices)
    [create] = sharing.slice_writes(share, EXPORTER, [], NS, CATALOG, KEEPER)
    old = {**create.body, "metadata": {**create.body["metadata"], "resourceVersion": "2",
                                       "ownerReferences": [{"apiVersion": "v1",
                                                            "kind": "Service",
                                                            "name": EXPORTER, "uid": "u"}]}}
    [update] = sharing.slice_writes(share, EXPORTER, [old], NS, CATALOG, KEEPER)
    assert update.action == sharing.UPDATE
    assert update.body["metadata"]["ownerReferences"][0]["kind"] == "Lease"


def test_a_name_handed_over_to_an_operator_release_is_not_shared() -> None:
    """The release's own reconciler selects both stacks' pods: the tool's slices go."""
    svc = service(EXPORTER, {"app.kubernetes.io/component": EXPORTER}, owner=None,
                  labels={"nvidia.com/shared-service": "true"})
    svc["metadata"]["ownerReferences"] = [{"kind": "ClusterPolicy", "name": "cp",
                                           "controller": True, "uid": "u",
                                           "apiVersion": "nvidia.com/v1"}]
    snap, slices = _mixed(["n1"], ["n2"], exporter_svc=svc)
    assert CATALOG.managed_by_release(svc) is not None
    assert sharing.shares(snap, CATALOG, slices) == []
    ours = _slice(f"{EXPORTER}-dcgm-migrate-0", EXPORTER, [_endpoint("dra-n2", "n2")],
                  managed_by="dcgm-migrate")
    _, writes = sharing.all_writes(snap, CATALOG, [*slices, ours], KEEPER, mode=sharing.Sharing.ON)
    assert [(w.action, w.name) for w in writes] == [(sharing.DELETE,
                                                     f"{EXPORTER}-dcgm-migrate-0")]
