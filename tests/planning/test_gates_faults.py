"""Gates under cluster faults, on plain data: pods the node controller marked not Ready (a node
that stopped reporting) and the attribution of endpoint loss after a selector switch."""

from __future__ import annotations

from dataclasses import replace

from migrator.model import gates as g
from migrator.model.snapshot import PodView, Snapshot
from tests.helpers.builders import endpoints_for, pods

NS = "gpu-operator"
COMMON = {"nvidia.com/gpu-operator.dcgm": "true"}
OLD = {"app": "dcgm"}


def _pod(ready: bool, containers_ready: bool, gates: bool = False) -> dict[str, object]:
    spec: dict[str, object] = {"nodeName": "n1"}
    if gates:
        spec["readinessGates"] = [{"conditionType": "x"}]
    return {"metadata": {"name": "p", "uid": "u"}, "spec": spec, "status": {"conditions": [
        {"type": "Ready", "status": "True" if ready else "False"},
        {"type": "ContainersReady", "status": "True" if containers_ready else "False"}]}}


def test_node_lost_is_ready_false_with_containers_ready() -> None:
    assert PodView.of(_pod(False, True)).node_lost
    assert not PodView.of(_pod(False, False)).node_lost  # a probe failing / starting
    assert not PodView.of(_pod(True, True)).node_lost
    assert not PodView.of(_pod(False, True, gates=True)).node_lost  # a readiness gate


def test_nodes_reporting_names_the_lost_nodes_with_their_condition() -> None:
    views = pods("dcgm", 3)
    views[1] = replace(views[1], ready=False, node_lost=True)
    ok = g.nodes_reporting("dcgm", pods("dcgm", 3))
    assert ok.ok
    bad = g.nodes_reporting("dcgm", views, {"node-1": {"status": {"conditions": [
        {"type": "Ready", "status": "Unknown",
         "message": "Kubelet stopped posting node status."}]}}})
    assert not bad.ok and bad.name == "nodes-reporting/dcgm"
    assert "node-1 Ready=Unknown (Kubelet stopped posting node status.)" in bad.detail
    assert g.nodes_reporting("dcgm", views).detail.endswith("node-1")  # no Node read: name only


def _switched(views: list[PodView], service_local: bool) -> tuple[Snapshot, g.ServiceBaseline]:
    """A Service switched from OLD to COMMON, its baseline taken with every pod Ready."""
    snap = Snapshot(NS, pods=tuple(views), endpoints={"svc": endpoints_for("svc", [
        v for v in views if all(v.labels.get(k) == val for k, val in COMMON.items())])})
    base = g.ServiceBaseline("svc", 3, {"node-0": 1, "node-1": 1, "node-2": 1} if service_local
                             else {}, service_local)
    return snap, base


def test_switch_loss_ignores_a_pod_both_selectors_select_going_not_ready() -> None:
    for local in (False, True):
        views = pods("dcgm", 3, labels={"app": "dcgm", **COMMON})
        views[2] = replace(views[2], ready=False)  # a probe flap
        snap, base = _switched(views, local)
        result = g.switch_loss(snap, base, OLD, COMMON)
        assert not result.ok and result.name == "endpoints-dip/svc", result
        assert "not caused by the selector switch" in result.detail
        assert "dcgm-2" in result.detail


def test_switch_loss_blames_the_switch_for_a_ready_pod_only_the_old_selector_selects() -> None:
    for local in (False, True):
        views = pods("dcgm", 3, labels={"app": "dcgm", **COMMON})
        views[0] = replace(views[0], labels={"app": "dcgm"})  # lacks the common label
        snap, base = _switched(views, local)
        result = g.switch_loss(snap, base, OLD, COMMON)
        assert not result.ok and result.name == "endpoints/svc", result
        assert "dcgm-0" in result.detail and "node-0" in result.detail


def test_switch_loss_passes_when_endpoints_hold() -> None:
    views = pods("dcgm", 3, labels={"app": "dcgm", **COMMON})
    snap, base = _switched(views, True)
    assert g.switch_loss(snap, base, OLD, COMMON).ok
