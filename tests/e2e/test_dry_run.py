"""`apply --dry-run` end to end: an honest preview. No phase is reported completed, phase 3's
selector changes are planned against the cluster as phases 1 and 2 would leave it, no false
drift gate, only server-side dry-run writes reach the API server (the sim's request log) and
the state ConfigMap is never created; a gate that fails now (a stuck node) exits 1."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.model import kinds
from tests.conftest import pods_ready_on
from tests.e2e.conftest import E2E, NS

DCGM = "nvidia.com/gpu-operator.dcgm"
EXPORTER = "nvidia.com/gpu-operator.dcgm-exporter"
MUTATING = ("create", "update", "patch", "delete")

# Phase 3's targets: the tool's aliases (GPUCluster), or the ClusterPolicy's own Services,
# which are operator-owned and switched only with --include-operator-owned.
SWITCHED = {"gpucluster": ((), {"Service/nvidia-dcgm": {DCGM: "true"},
                                "Service/nvidia-dcgm-exporter": {EXPORTER: "true"}}),
            "clusterpolicy": (("--include-operator-owned",),
                              {"Service/nvidia-dcgm": {DCGM: "true"},
                               "Service/nvidia-dcgm-exporter": {EXPORTER: "true"}})}


def _mutations(env: E2E, mark: int) -> list[Any]:
    return [e for e in env.sim.server.log.entries() if e.seq > mark and e.verb in MUTATING
            and e.resource != "selfsubjectaccessreviews"]


def _no_state(sim: SimCluster) -> bool:
    return sim.store.find(kinds.CONFIGMAP, NS, "dcgm-migrate-state") is None


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy"])
def test_dry_run_of_phase_3_previews_every_phase_and_persists_nothing(
        e2e_factory: Callable[..., E2E], stack: str) -> None:
    env = e2e_factory(stack)
    flags, switched = SWITCHED[stack]
    before = env.objects()
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "--dry-run", *flags, "-o", "json")
    assert res.code == 0, res.stderr
    doc = res.json()  # validated against docs/output.schema.json
    views = doc["phases"]
    assert [v["status"] for v in views] == ["pending"] * 3, "a dry run records nothing"
    assert [v["preview"]["outcome"] for v in views] == ["would-run"] * 3
    failed = [g for v in views for g in v["gates"] if not g["ok"]]
    assert failed == [], failed  # no false drift (labels-hold) and no false refusal
    assert not any(g["name"].startswith("labels-hold/") for v in views for g in v["gates"])
    # phase 3 is planned against the cluster as phases 1 and 2 would leave it
    changes = {c["object"]: c["after"] for c in views[2]["changes"]
               if c["field"] == "spec.selector"}
    assert changes == switched, views[2]
    assert any(g["name"].startswith("mixed-rollout/") and g["ok"] for g in views[2]["gates"])
    assert any(w.endswith("pods relabelled in place, none restarted") for w in
               views[0]["preview"]["wouldWaitFor"])  # phase 1 in place
    assert any("EndpointSlices of Service/nvidia-dcgm " in w
               for w in views[2]["preview"]["wouldWaitFor"])
    assert doc["ok"] is True and doc["result"]["dryRun"] is True
    # only dry-run writes: sent, accepted, none persisted; the state ConfigMap never created
    sent = _mutations(env, mark)
    assert sent and all(e.dry_run and e.code < 300 for e in sent), sent
    assert doc["result"]["writes"] == len(sent)
    assert env.writes(since=mark) == []
    assert env.objects() == before
    assert _no_state(env.sim)
    assert "dry run: phase 3 (switch) would run" in res.stderr


def test_the_gpucluster_preview_sends_what_the_api_server_can_take_now(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "--dry-run", "-o", "json")
    assert res.code == 0, res.stderr
    sent = sorted((e.verb, e.resource, e.name) for e in _mutations(env, mark))
    # phase 1 in place: hold, labels, restore on each DaemonSet (the pods' patches are said)
    assert sent == [("create", "services", ""), ("create", "services", ""),
                    *[("patch", "daemonsets", "nvidia-dcgm-dra")] * 3,
                    *[("patch", "daemonsets", "nvidia-dcgm-exporter-dra")] * 3], sent
    notes = res.json()["result"]["notes"]
    assert any("Service/nvidia-dcgm (set-selector) not sent" in n for n in notes), notes


def test_the_clusterpolicy_preview_switches_nothing_it_does_not_own(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("clusterpolicy")
    res = env.cli("apply", "--phase", "3", "--yes", "--dry-run", "-o", "json")
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["phases"][2]["changes"] == []
    assert any("owned by ClusterPolicy" in w for w in doc["warnings"])
    assert _no_state(env.sim)


def test_table_output_says_what_the_run_would_do(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    res = env.cli("apply", "--phase", "3", "--rolling", "--yes", "--dry-run")
    assert res.code == 0, res.stderr
    assert "Phase 3 — switch: pending — dry run: would run" in res.stdout
    assert "… would wait for the rollout of DaemonSet/nvidia-dcgm-dra" in res.stdout
    assert ": completed" not in res.stdout


def test_dry_run_after_phase_1_keeps_the_recorded_state(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    state = env.state()
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "--dry-run", "-o", "json")
    assert res.code == 0, res.stderr
    views = res.json()["phases"]
    assert [v["status"] for v in views] == ["completed", "pending", "pending"]
    assert [v["preview"]["outcome"] for v in views] == ["holds", "would-run", "would-run"]
    assert all(g["ok"] for v in views for g in v["gates"])
    assert env.writes(since=mark) == []
    assert env.state() == state


def _stick(env: E2E, node: str, daemonset: str) -> str:
    """Pods that start on `node` never turn Ready; the DaemonSet's pod there is replaced by
    one that stays not Ready (so the DaemonSet is not fully available)."""
    pods_ready_on(env.sim.store, node, False)
    old = next(p for p in env.pods(daemonset) if p["spec"].get("nodeName") == node)
    env.sim.store.delete(kinds.POD, NS, old["metadata"]["name"])

    def replaced() -> bool:
        pods = [p for p in env.pods(daemonset) if p["spec"].get("nodeName") == node]
        return bool(pods) and pods[0]["metadata"]["name"] != old["metadata"]["name"]

    env.sim.wait_for(replaced, 30)
    return str(old["metadata"]["name"])


def test_dry_run_of_phase_1_on_a_stuck_node_shows_the_pre_gate_and_exits_1(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    with env.monitor.expected_outage():  # the test itself takes a pod away
        _stick(env, "gpu-node-0002", "nvidia-dcgm-dra")
        env.sim.wait_idle(10)
        mark = env.mark()
        res = env.cli("apply", "--phase", "1", "--yes", "--dry-run", "-o", "json")
    assert res.code == 1, res.stdout + res.stderr
    doc = res.json()  # the apply document, not an error: the preview is the answer
    phase1 = doc["phases"][0]
    assert phase1["status"] == "pending" and phase1["preview"]["outcome"] == "would-stop"
    gate = next(g for g in phase1["gates"] if g["name"] == "rollout-complete/nvidia-dcgm-dra")
    assert not gate["ok"] and "gpu-node-0002" in gate["detail"], gate
    assert doc["ok"] is False
    assert "dry run: the run would stop" in res.stderr and "gpu-node-0002" in res.stderr
    assert _mutations(env, mark) == []  # a refused phase sends no dry-run write either
    assert _no_state(env.sim)


def test_rollback_dry_run_walks_the_undo_and_persists_nothing(
        e2e_factory: Callable[..., E2E]) -> None:
    """`rollback --dry-run` is the rollback's own loop on the server-dry-run back end: phases
    3, 2, 1 undone in that order against the cluster as the later undo would leave it (phase
    1's labels may go once phase 3's selectors are restored), each write sent with
    `dryRun=All`, no lock, no state write, nothing persisted."""
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "3", "--yes").code == 0
    state = env.state()
    before = env.objects()
    mark = env.mark()
    res = env.cli("rollback", "--phase", "1", "--yes", "--dry-run", "-o", "json")
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()  # validated against docs/output.schema.json
    views = doc["phases"]
    assert [v["status"] for v in views] == ["completed"] * 3, "a dry run records nothing"
    assert [v["preview"]["outcome"] for v in views] == ["would-roll-back"] * 3
    assert not [g for v in views for g in v["gates"] if not g["ok"]]
    assert {c["object"] for c in views[1]["changes"]} == {
        "Service/nvidia-dcgm", "Service/nvidia-dcgm-exporter"}
    assert any("--settle" in w for w in views[1]["preview"]["wouldWaitFor"])
    assert doc["ok"] is True and doc["result"]["operation"] == "rollback"
    assert doc["result"]["dryRun"] is True
    sent = _mutations(env, mark)
    assert sent and all(e.dry_run and e.code < 300 for e in sent), sent
    assert sorted({e.verb for e in sent}) == ["delete", "patch"]
    assert doc["result"]["writes"] == len(sent)
    assert env.writes(since=mark) == []
    assert env.objects() == before
    assert env.state() == state
    said = [line.split("dry run: ", 1)[1] for line in res.stderr.splitlines()
            if "dry run: phase " in line]
    assert said == ["phase 3 (switch) would roll back", "phase 2 (alias) would roll back",
                    "phase 1 (label) would roll back"], said  # in the order it undoes them


def test_rollback_dry_run_of_a_phase_never_applied_is_refused(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    mark = env.mark()
    res = env.cli("rollback", "--phase", "2", "--dry-run")
    assert res.code == 2 and "never applied" in res.stderr, res.stderr
    assert _mutations(env, mark) == []
