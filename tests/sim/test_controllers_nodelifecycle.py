"""Node failure and readiness probes in the sim: the node lifecycle controller (grace period,
Unknown conditions, unreachable taints, pods marked not Ready), Terminating pods kept on a dead
node, the DaemonSet rollout stalling on it as upstream, healing, probe delays and flaps, and the
`/sim/v1/nodes/...` endpoints."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.nodelifecycle import NODE_FAILED_ANNOTATION
from dcgm_sim.controllers.probes import PROBE_FLAP_ANNOTATION, readiness_delay
from migrator.model import kinds
from tests.conftest import Bare
from tests.sim.conftest import Raw

NS = "gpu-operator"
Obj = dict[str, Any]
BAD = "gpu-node-0002"
COMMON = "nvidia.com/gpu-operator.dcgm"


def _on(bare: Bare, app: str, node: str) -> list[Obj]:
    return [p for p in bare.pods(app) if P.node_name(p) == node]


def _taints(bare: Bare, node: str) -> list[tuple[str, str]]:
    return sorted((t["key"], t["effect"])
                  for t in bare.get(kinds.NODE, node).get("spec", {}).get("taints") or [])


def _ready_cond(bare: Bare, node: str) -> str:
    conds = bare.get(kinds.NODE, node)["status"]["conditions"]
    return str(next(c for c in conds if c["type"] == "Ready")["status"])


def _label_template(bare: Bare, ds: str) -> None:
    def change(obj: Obj) -> None:
        obj["spec"]["template"]["metadata"]["labels"][COMMON] = "true"
    bare.edit(kinds.DAEMONSET, ds, change)


def test_failed_node_goes_unknown_after_the_grace_period_tainted_pods_not_ready(
        make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(stack="clusterpolicy", time_scale=0.01, node_monitor_grace_seconds=50)
    clock = bare.controllers.clock
    began = clock.now()
    bare.annotate_node(BAD, NODE_FAILED_ANNOTATION, "true")
    bare.wait_for(lambda: _ready_cond(bare, BAD) == "Unknown", timeout=10)
    assert clock.now() - began >= 50  # simulated seconds: not before the grace period
    bare.wait_for(lambda: _taints(bare, BAD) == [
        ("node.kubernetes.io/unreachable", "NoExecute"),
        ("node.kubernetes.io/unreachable", "NoSchedule")])
    cond = next(c for c in bare.get(kinds.NODE, BAD)["status"]["conditions"]
                if c["type"] == "Ready")
    assert cond["reason"] == "NodeStatusUnknown"
    pods = bare.wait_for(lambda: (ps := _on(bare, "nvidia-dcgm", BAD)) and not any(
        P.is_pod_ready(p) for p in ps) and ps)
    assert pods  # wait_for answers only once the predicate's value is truthy
    pod = pods[0]
    # MarkPodsNotReady: only the Ready condition; the pod still runs, nothing evicted it.
    assert pod["status"]["phase"] == "Running" and not P.is_deleting(pod)
    containers_ready = P.condition(pod, "ContainersReady")
    assert containers_ready is not None  # the kubelet set this condition
    assert containers_ready["status"] == "True"
    bare.wait_idle()
    ds = bare.get(kinds.DAEMONSET, "nvidia-dcgm")
    # NodeShouldRunDaemonPod: the NoSchedule taint takes the node out of the desired set.
    assert (ds["status"]["desiredNumberScheduled"], ds["status"]["numberMisscheduled"]) == (2, 1)
    others = [p for p in bare.pods("nvidia-dcgm") if P.node_name(p) != BAD]
    assert all(P.is_pod_ready(p) for p in others)


def test_rollout_stalls_on_the_dead_node_and_its_pod_stays_terminating(
        make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=4, stack="clusterpolicy", time_scale=0.01,
                     node_monitor_grace_seconds=5, termination_seconds=1)
    bare.annotate_node(BAD, NODE_FAILED_ANNOTATION, "true")
    bare.wait_for(lambda: _on(bare, "nvidia-dcgm", BAD)
                  and not P.is_pod_ready(_on(bare, "nvidia-dcgm", BAD)[0]))
    _label_template(bare, "nvidia-dcgm")
    # update.go: the unavailable old pod is replaced (deleted), but no kubelet stops it.
    bare.wait_for(lambda: all(P.is_deleting(p) for p in _on(bare, "nvidia-dcgm", BAD)))
    bare.wait_idle()
    bare.controllers.clock.sleep(20)  # simulated: many pod lifetimes
    bare.wait_idle()
    stuck = _on(bare, "nvidia-dcgm", BAD)
    assert len(stuck) == 1 and P.is_deleting(stuck[0]), "Terminating, not removed"
    # The dead node consumes maxUnavailable=1: no healthy node's pod was rolled.
    rolled = [p for p in bare.pods("nvidia-dcgm")
              if P.node_name(p) != BAD and COMMON in p["metadata"]["labels"]]
    assert rolled == []
    ds = bare.get(kinds.DAEMONSET, "nvidia-dcgm")["status"]
    assert ds["desiredNumberScheduled"] == 3 and ds.get("updatedNumberScheduled", 0) == 0

    bare.annotate_node(BAD, NODE_FAILED_ANNOTATION, None)  # heal: the rollout finishes
    def done() -> bool:
        st = bare.get(kinds.DAEMONSET, "nvidia-dcgm")["status"]
        pods = bare.pods("nvidia-dcgm")
        return (st.get("updatedNumberScheduled") == st["desiredNumberScheduled"] == 4
                and st.get("numberAvailable") == 4 and len(pods) == 4
                and all(COMMON in p["metadata"]["labels"] for p in pods))
    bare.wait_for(done, timeout=20)
    assert _taints(bare, BAD) == [] and _ready_cond(bare, BAD) == "True"


def test_pod_on_a_node_reporting_not_ready_is_marked_not_ready_and_tainted(
        make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(stack="clusterpolicy", time_scale=0.01)

    def not_ready(obj: Obj) -> None:
        obj["status"]["conditions"][0].update(status="False", reason="KubeletNotReady")
    node = copy.deepcopy(bare.get(kinds.NODE, BAD))
    not_ready(node)
    bare.store.update(kinds.NODE, node, subresource="status")
    bare.wait_for(lambda: _taints(bare, BAD) == [
        ("node.kubernetes.io/not-ready", "NoExecute"),
        ("node.kubernetes.io/not-ready", "NoSchedule")])
    bare.wait_for(lambda: not any(P.is_pod_ready(p) for p in _on(bare, "nvidia-dcgm", BAD)))
    bare.wait_idle()
    assert not any(P.is_pod_ready(p) for p in _on(bare, "nvidia-dcgm", BAD)), "stays not Ready"


def test_readiness_probe_initial_delay_holds_ready(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1, stack="none", time_scale=0.01, pod_start_seconds=1.0)
    clock = bare.controllers.clock
    probe = {"tcpSocket": {"port": 5555}, "initialDelaySeconds": 30}
    pod = {"metadata": {"name": "p", "namespace": NS},
           "spec": {"nodeName": "gpu-node-0001", "containers": [
               {"name": "a", "image": "i", "readinessProbe": probe},
               {"name": "b", "image": "i"}]}}
    assert readiness_delay(pod) == 30
    began = clock.now()
    bare.store.create(kinds.POD, pod)
    running = bare.wait_for(lambda: (p := bare.store.find(kinds.POD, NS, "p"))
                            and p.get("status", {}).get("phase") == "Running" and p)
    assert running  # wait_for answers only once the predicate's value is truthy
    assert not P.is_pod_ready(running)
    bare.wait_for(lambda: P.is_pod_ready(bare.get(kinds.POD, "p")))
    assert clock.now() - began >= 31  # start + initialDelaySeconds, simulated


def test_fixture_daemonsets_carry_probes_that_delay_ready(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(stack="clusterpolicy", time_scale=0.01)
    tmpl = bare.get(kinds.DAEMONSET, "nvidia-dcgm-exporter")["spec"]["template"]
    assert readiness_delay(tmpl) == 45


def test_probe_flap_makes_ready_pods_not_ready_for_a_while(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(stack="clusterpolicy", time_scale=0.01)
    clock = bare.controllers.clock
    began = clock.now()
    bare.annotate_node(BAD, PROBE_FLAP_ANNOTATION, "20")
    bare.wait_for(lambda: not any(P.is_pod_ready(p) for p in _on(bare, "nvidia-dcgm", BAD)))
    others = [p for p in bare.pods("nvidia-dcgm") if P.node_name(p) != BAD]
    assert all(P.is_pod_ready(p) for p in others)
    pod = _on(bare, "nvidia-dcgm", BAD)[0]
    assert pod["status"]["phase"] == "Running"
    bare.wait_for(lambda: all(P.is_pod_ready(p) for p in _on(bare, "nvidia-dcgm", BAD)))
    assert clock.now() - began >= 20
    assert _on(bare, "nvidia-dcgm", BAD)[0]["metadata"]["uid"] == pod["metadata"]["uid"]


def test_node_fault_endpoints_over_http() -> None:
    with SimCluster(nodes=2, stack="clusterpolicy", time_scale=0.01,
                    node_monitor_grace_seconds=5) as sim:
        raw = Raw(sim.url)
        code, node, _ = raw("POST", f"/sim/v1/nodes/{BAD}/fail")
        assert code == 200 and node["metadata"]["annotations"][NODE_FAILED_ANNOTATION] == "true"
        sim.wait_for(lambda: any(t["key"] == "node.kubernetes.io/unreachable" for t in
                                 sim.store.get(kinds.NODE, None, BAD)["spec"].get("taints", [])))
        code, node, _ = raw("POST", f"/sim/v1/nodes/{BAD}/heal")
        assert code == 200 and NODE_FAILED_ANNOTATION not in (
            node["metadata"].get("annotations") or {})
        sim.wait_for(lambda: not sim.store.get(kinds.NODE, None, BAD)["spec"].get("taints"))
        code, node, _ = raw("POST", f"/sim/v1/nodes/{BAD}/probe-flap", {"seconds": 3})
        assert code == 200 and node["metadata"]["annotations"][PROBE_FLAP_ANNOTATION] == "3"
        code, _, _ = raw("POST", f"/sim/v1/nodes/{BAD}/probe-flap", {"seconds": "x"})
        assert code == 400
        code, status, _ = raw("POST", "/sim/v1/nodes/nope/fail")
        assert code == 404 and status["reason"] == "NotFound"
        code, _, _ = raw("GET", f"/sim/v1/nodes/{BAD}/fail")
        assert code == 405
