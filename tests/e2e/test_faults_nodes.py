"""Node failure and readiness-probe faults end to end, with the operator imitation on: a node
that stops reporting stops phase 1 naming it (exit 1, nothing below budget) and the run resumes
once it is back; a probe flap during phase 3 is waited out and reported, never reverted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.kubelet import PODS_READY_ANNOTATION
from dcgm_sim.seed import new_node
from migrator.model import kinds
from tests.conftest import edit_object
from tests.e2e.conftest import E2E, NS
from tests.helpers.readiness import SERVICE_NAME, ready_by_node

BAD = "gpu-node-0002"
DCGM = "nvidia.com/gpu-operator.dcgm"


def _make(e2e_factory: Callable[..., E2E], stack: str, nodes: int = 4) -> E2E:
    return e2e_factory(stack, nodes=nodes, node_monitor_grace_seconds=5,
                       operator_reconcile_seconds=30)


def _pods_on(env: E2E, node: str) -> list[dict[str, Any]]:
    items, _ = env.sim.store.list(kinds.POD, NS)
    return [p for p in items if P.node_name(p) == node]


def _fail(env: E2E, node: str) -> None:
    """Fail the node and wait until the node controller marked its pods not Ready (the monitor
    does not hold the failure itself against the tool; its baseline restarts after it)."""
    with env.monitor.expected_outage():
        env.sim.fail_node(node)
        env.sim.wait_for(lambda: _pods_on(env, node) and not any(
            P.is_pod_ready(p) for p in _pods_on(env, node)), timeout=20)
        env.sim.wait_idle()


def test_node_down_stops_phase1_naming_it_then_resumes_once_back(
        e2e_factory: Callable[..., E2E]) -> None:
    env = _make(e2e_factory, "clusterpolicy")
    _fail(env, BAD)

    res = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "2s")
    assert res.code == 1, (res.stdout, res.stderr)
    assert BAD in res.stderr and "not reporting" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert env.phase_status(1) == "failed"
    assert BAD in next(p for p in env.state()["phases"] if p["number"] == 1)["error"]
    # The DaemonSet controller rolled nothing past the dead node (it uses up maxUnavailable),
    # and its pod there stays Terminating: no kubelet confirms it.
    stuck = [p for p in _pods_on(env, BAD)
             if (p["metadata"].get("labels") or {}).get("app") == "nvidia-dcgm"]
    assert stuck and all(P.is_deleting(p) for p in stuck)

    env.sim.heal_node(BAD)
    again = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "30s")
    assert again.code == 0, again.stderr
    assert env.phase_status(1) == "completed"
    for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        pods = env.pods(name)
        assert len(pods) == 4 and all(P.is_pod_ready(p) for p in pods)


def test_node_down_mid_rollout_stops_phase1_naming_it(e2e_factory: Callable[..., E2E]) -> None:
    env = _make(e2e_factory, "gpucluster", nodes=5)

    def fail_once_rolling() -> None:
        env.sim.wait_for(lambda: any(DCGM in (p["metadata"].get("labels") or {})
                                     for p in env.pods("nvidia-dcgm-dra")), timeout=30)
        _fail(env, "gpu-node-0004")

    failer = threading.Thread(target=fail_once_rolling)
    failer.start()
    # --rolling: a rollout to be in the middle of (in place, the pods are labelled at once)
    res = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "3s")
    failer.join()
    assert res.code == 1, (res.stdout, res.stderr)
    assert "gpu-node-0004" in res.stderr and "not reporting" in res.stderr, res.stderr
    assert env.phase_status(1) == "failed"


def test_probe_flap_during_phase3_is_waited_out_and_reported_not_reverted(
        e2e_factory: Callable[..., E2E]) -> None:
    env = _make(e2e_factory, "gpucluster", nodes=3)
    assert env.cli("apply", "--phase", "2", "--yes").code == 0

    def phase3_started() -> bool:
        cm = env.sim.store.find(kinds.CONFIGMAP, NS, "dcgm-migrate-state")
        return bool(cm) and env.phase_status(3) == "in-progress"

    def flap() -> None:
        env.sim.wait_for(phase3_started, timeout=30)
        env.sim.flap_probes(BAD, 60)  # 60 simulated seconds: ~1.2 s here

    # A flap drops endpoints below the zero-tolerance baseline on purpose: the monitor does
    # not count it; it checks the rest of the run.
    with env.monitor.expected_outage():
        flapper = threading.Thread(target=flap)
        flapper.start()
        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
        flapper.join()
    assert res.code == 0, res.stderr
    doc = res.json()
    notes = doc["result"]["notes"]
    assert notes and any("not caused by the selector switch" in n for n in notes), notes
    assert any(BAD[-4:] in n or "not Ready" in n for n in notes), notes
    assert "restored" not in res.stderr
    assert env.phase_status(3) == "completed"
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {DCGM: "true"}


def _ready_nodes(env: E2E, service: str) -> set[str]:
    """The nodes with a ready endpoint of `service`."""
    items, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    return {node for sl in items if sl["metadata"]["labels"].get(SERVICE_NAME) == service
            for node, ready in ready_by_node(sl).items() if ready}


@pytest.mark.parametrize(("mode", "scale"), [((), 0.5), (("--rolling",), 0.02)],
                         ids=["in-place", "rolling"])
def test_a_node_scaled_down_mid_phase_1_leaves_the_run_to_complete_on_the_nodes_left(
        e2e_factory: Callable[..., E2E], mode: tuple[str, ...], scale: float) -> None:
    """A GPU node deleted (a scale-down) while phase 1 runs: its pods stay until PodGC's
    quarantine ends and lose their endpoints at their next event (in place: the relabel, while
    the quarantine lasts: 20 to 30 real seconds at this clock; phase 3 leaves them aside, as
    the switched Service's slices never list them). The run
    completes on the nodes left, none of them ever below its baseline (the monitor holds every
    node but the deleted one to the budget), and each stable name reaches every node left."""
    env = e2e_factory("gpucluster", nodes=5, time_scale=scale, operator_reconcile_seconds=30)
    gone = "gpu-node-0004"
    ghosts = {p["metadata"]["name"] for p in _pods_on(env, gone)}
    env.sim.server.faults.update(hang_nth_write=1)  # the run's first write

    def scale_down() -> None:
        env.sim.wait_for(lambda: bool(env.sim.server.faults.snapshot()["write_held"]),
                         timeout=30)
        env.monitor.node_removed(gone)
        env.sim.store.delete(kinds.NODE, None, gone)
        env.sim.server.faults.update(hang_nth_write=None)

    remover = threading.Thread(target=scale_down)
    remover.start()
    res = env.cli("apply", "--phase", "3", *mode, "--yes", "--timeout", "120s",
                  "--settle", "0s")
    remover.join()
    assert res.code == 0, res.stderr[-3000:]
    assert [env.phase_status(n) for n in (1, 2, 3)] == ["completed"] * 3
    left = {f"gpu-node-000{i}" for i in (1, 2, 3, 5)}
    env.until(lambda: all(_ready_nodes(env, n) == left
                          for n in ("nvidia-dcgm", "nvidia-dcgm-exporter")), 120,
              "each stable name on every node left")
    if not mode:  # in place: the deleted node's pods were relabelled, endpoints or not
        patched = {r.name for r in env.sim.server.log.writes()
                   if (r.verb, r.resource, r.code) == ("patch", "pods", 200)}
        assert ghosts and ghosts <= patched, (ghosts, patched)
    env.until(lambda: not _pods_on(env, gone), 90, "PodGC")  # in its own time


@pytest.mark.parametrize("collected", [False, True], ids=["pods-still-there", "pods-collected"])
def test_phase_3_leaves_aside_a_node_deleted_before_it(e2e_factory: Callable[..., E2E],
                                                      collected: bool) -> None:
    """A GPU node deleted just before phase 3: its pods stay Ready until PodGC (40 to 60 s),
    and the switched selector's EndpointSlices never list them. Phase 3 reads the Nodes when a
    gate fails and completes without waiting for the collector: simulated time stands still
    through the run, so PodGC never comes (before: a wait past --timeout). `collected`: the
    collector removes them while the first selector switch is held, after the baselines were
    recorded, so they count the node and no pod is left to say why it is gone (before: a dip
    below the stable Service's baseline that never heals)."""
    env = e2e_factory("gpucluster", nodes=4)
    res = env.cli("apply", "--phase", "2", "--yes", "--settle", "0s")
    assert res.code == 0, res.stderr[-3000:]
    gone = "gpu-node-0003"
    ghosts = {p["metadata"]["name"] for p in _pods_on(env, gone)}
    env.monitor.node_removed(gone)

    def collect() -> None:  # what PodGC does once its quarantine is over
        env.sim.wait_for(lambda: bool(env.sim.server.faults.snapshot()["write_held"]),
                         timeout=30)
        for name in ghosts:
            env.sim.store.delete(kinds.POD, NS, name)
        env.sim.server.faults.update(hang_nth_write=None, hang_write_of=None)

    collector = threading.Thread(target=collect)
    with env.sim.controllers.clock.held():  # PodGC's own quarantine never ends
        env.sim.store.delete(kinds.NODE, None, gone)
        if collected:
            env.sim.server.faults.update(hang_nth_write=1, hang_write_of="patch services")
            collector.start()
        res = env.cli("apply", "--phase", "3", "--yes", "--timeout", "30s", "--settle", "0s")
        left_there = {p["metadata"]["name"] for p in _pods_on(env, gone)}
    if collected:
        collector.join()
    assert ghosts and left_there == (set() if collected else ghosts)
    assert res.code == 0, res.stdout[-3000:]
    assert env.phase_status(3) == "completed"
    left = {"gpu-node-0001", "gpu-node-0002", "gpu-node-0004"}
    assert all(_ready_nodes(env, n) == left for n in ("nvidia-dcgm", "nvidia-dcgm-exporter"))


def test_a_node_whose_pods_are_not_ready_yet_stops_phase_1_in_place_naming_it(
        e2e_factory: Callable[..., E2E]) -> None:
    """A GPU node joining (its pods not Ready yet): phase 1 is still planned in place, and its
    pre-gate, the DaemonSet healthy now, stops the run naming that node with nothing written to
    a DaemonSet; once its pods are Ready the same command relabels every pod, restarting none."""
    env = e2e_factory("gpucluster", nodes=3, operator_reconcile_seconds=30)
    joining = new_node(4, ("gpucluster",), env.sim.network)
    joining["metadata"]["annotations"] = {PODS_READY_ANNOTATION: "false"}
    env.sim.store.create(kinds.NODE, joining)
    env.until(lambda: len(_pods_on(env, "gpu-node-0004")) == 2, 60, "the new node's pods")
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "--timeout", "60s", "--settle", "0s")
    assert res.code == 1, res.stderr[-3000:]
    assert "DaemonSet/nvidia-dcgm-dra: in place: 0 of 4 pods restarted" in res.stderr
    assert "rolling" not in res.stderr, res.stderr
    assert "pods not ready on nodes gpu-node-0004" in res.stderr, res.stderr
    assert not [w for w in env.writes(since=mark) if w.resource in ("daemonsets", "pods")]
    _set_node(env, "gpu-node-0004", annotations={PODS_READY_ANNOTATION: None})
    uids = {p["metadata"]["uid"] for p in env.pods("nvidia-dcgm-dra")
            + env.pods("nvidia-dcgm-exporter-dra")}
    env.until(lambda: all(P.is_pod_ready(p) for p in _pods_on(env, "gpu-node-0004")), 120,
              "the new node's pods Ready")
    again = env.cli("apply", "--phase", "3", "--yes", "--timeout", "60s", "--settle", "0s")
    assert again.code == 0, again.stderr[-3000:]
    assert {p["metadata"]["uid"] for p in env.pods("nvidia-dcgm-dra")
            + env.pods("nvidia-dcgm-exporter-dra")} == uids
    for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        assert _ready_nodes(env, name) == {f"gpu-node-000{i}" for i in range(1, 5)}, name


def _set_node(env: E2E, node: str, labels: dict[str, str | None] | None = None,
              annotations: dict[str, str | None] | None = None) -> None:
    """Set (None: remove) labels and annotations on a node, as `kubectl label/annotate` would."""
    def change(obj: dict[str, Any]) -> None:
        for field, values in (("labels", labels), ("annotations", annotations)):
            kept = obj["metadata"].setdefault(field, {})
            for key, value in (values or {}).items():
                if value is None:
                    kept.pop(key, None)
                else:
                    kept[key] = value
    edit_object(env.sim.store, kinds.NODE, None, node, change)


def test_a_node_whose_exporter_never_turns_ready_is_taken_out_by_its_deploy_label_and_back(
        e2e_factory: Callable[..., E2E]) -> None:
    """A node whose DCGM Exporter pod fails its probe (a broken GPU) keeps phase 1's pre-gate
    red. The runbook's fix, the operator's own deploy label set to false (its node labeller
    honours a value set), takes the node out of that DaemonSet, and the migration completes in
    place. Set back to true once repaired, the node's new pod comes from the relabelled
    template and each stable name reaches it."""
    env = e2e_factory("gpucluster", nodes=4, operator_reconcile_seconds=30)
    broken, deploy = "gpu-node-0002", "nvidia.com/gpu.deploy.dcgm-exporter-dra"
    with env.monitor.expected_outage():  # the GPU breaks: not the tool's doing
        _set_node(env, broken, annotations={PODS_READY_ANNOTATION: "false"})
        for pod in _pods_on(env, broken):
            if "exporter" in pod["metadata"]["name"]:
                env.sim.store.mark_deleting(kinds.POD, NS, pod["metadata"]["name"], 0)
        env.until(lambda: [P.is_pod_ready(p) for p in _pods_on(env, broken)
                           if "exporter" in p["metadata"]["name"]] == [False], 60,
                  "a new exporter pod, not Ready")
    res = env.cli("apply", "--phase", "3", "--yes", "--timeout", "60s", "--settle", "0s")
    assert res.code == 1, res.stderr[-3000:]
    assert f"pods not ready on nodes {broken} (Running, not Ready)" in res.stderr, res.stderr
    assert "nvidia-dcgm-exporter-dra: in place" in res.stderr, res.stderr

    _set_node(env, broken, labels={deploy: "false"})  # kubectl label node ... =false
    env.until(lambda: not [p for p in _pods_on(env, broken)
                           if "exporter" in p["metadata"]["name"]], 60, "its pod removed")
    again = env.cli("apply", "--phase", "3", "--yes", "--timeout", "60s", "--settle", "0s")
    assert again.code == 0, again.stderr[-3000:]
    assert env.sim.store.get(kinds.NODE, None, broken)["metadata"]["labels"][deploy] == "false"

    _set_node(env, broken, labels={deploy: "true"}, annotations={PODS_READY_ANNOTATION: None})
    every = {f"gpu-node-000{i}" for i in range(1, 5)}
    env.until(lambda: _ready_nodes(env, "nvidia-dcgm-exporter") == every, 120,
              "the stable name on the repaired node")
    assert env.cli("verify").code == 0
