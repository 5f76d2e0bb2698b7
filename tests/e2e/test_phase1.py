"""Phase 1 end to end through the CLI on both stacks: plan, apply, idempotence, stalled rollouts."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import pods_ready_on
from tests.e2e.conftest import E2E

LABELS = {"dcgm": "nvidia.com/gpu-operator.dcgm",
          "dcgm-exporter": "nvidia.com/gpu-operator.dcgm-exporter"}


def _daemonsets(stack: str) -> dict[str, str]:
    if stack == "gpucluster":
        return {"nvidia-dcgm-dra": LABELS["dcgm"],
                "nvidia-dcgm-exporter-dra": LABELS["dcgm-exporter"]}
    return {"nvidia-dcgm": LABELS["dcgm"], "nvidia-dcgm-exporter": LABELS["dcgm-exporter"]}


def test_plan_lists_exactly_the_daemonset_label_changes(e2e: E2E) -> None:
    stack = e2e.sim.stack
    before = e2e.mark()
    res = e2e.cli("plan", "-o", "json")
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["stack"] == stack
    phase1 = doc["phases"][0]
    assert (phase1["number"], phase1["name"], phase1["status"]) == (1, "label", "pending")
    want = sorted((f"DaemonSet/{ds}", f"{where}[{key}]", None, "true")
                  for ds, key in _daemonsets(stack).items()
                  for where in ("metadata.labels", "spec.template.metadata.labels"))
    got = sorted((c["object"], c["field"], c["before"], c["after"]) for c in phase1["changes"]
                 if "labels[" in c["field"])
    assert got == want
    # in place (docs/runbook.md, phase 1): held on OnDelete, pods relabelled, strategy restored
    around = sorted((c["object"], c["field"]) for c in phase1["changes"]
                    if "labels[" not in c["field"])
    assert around == sorted((f"DaemonSet/{ds}", f) for ds in _daemonsets(stack)
                            for f in ("pods", "spec.updateStrategy.type",
                                      "spec.updateStrategy.type"))
    assert all(g["ok"] for g in phase1["gates"])
    assert e2e.writes(since=before) == [], "plan must not write"


def test_apply_phase1_labels_everything_and_is_idempotent(e2e: E2E) -> None:
    res = e2e.cli("apply", "--phase", "1", "--yes", "-o", "json")
    assert res.code == 0, res.stderr
    for ds_name, key in _daemonsets(e2e.sim.stack).items():
        ds = e2e.ds(ds_name)
        assert ds["metadata"]["labels"][key] == "true"
        assert ds["spec"]["template"]["metadata"]["labels"][key] == "true"
        assert ds["spec"]["selector"] == {"matchLabels": {"app": ds_name}}, "selector untouched"
        pods = e2e.pods(ds_name)
        assert len(pods) == 3
        assert all(p["metadata"]["labels"].get(key) == "true" for p in pods)
    assert e2e.phase_status(1) == "completed"
    assert e2e.phase_status(2) == "pending"

    before = e2e.mark()
    again = e2e.cli("apply", "--phase", "1", "--yes", "-o", "json")
    assert again.code == 0, again.stderr
    writes = e2e.writes(since=before)
    assert writes == [], f"second apply wrote {writes}"  # not even the state ConfigMap


def test_stalled_rollout_times_out_naming_the_node_then_resumes(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    bad = "gpu-node-0002"
    pods_ready_on(env.sim.store, bad, False)

    res = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "3s")
    assert res.code == 1, (res.stdout, res.stderr)
    assert bad in res.stderr
    state = env.state()
    phase1 = next(p for p in state["phases"] if p["number"] == 1)
    assert phase1["status"] == "failed"
    assert bad in phase1["error"]

    pods_ready_on(env.sim.store, bad, True)
    res = env.cli("apply", "--phase", "1", "--rolling", "--yes")
    assert res.code == 0, res.stderr
    assert env.phase_status(1) == "completed"
