"""A state lost between phases 1 and 2 is told from a fresh cluster by the mark phase 1 leaves
on each DaemonSet (model/labelmarks.py): `status` says the state is lost (exit 1), `apply`
refuses (exit 2) with a fix whose rollback command works as printed, that rollback undoes
phase 1 from the marks (labels and marks gone, pods relabelled), and the next `apply`
records the true originals, so a full rollback afterwards leaves no label behind."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable

from migrator.model import kinds
from migrator.model.labelmarks import LABELS_MARK
from tests.helpers import crash
from tests.reliability.conftest import NS, STATE_CM, Env

DAEMONSETS = ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")
COMMON = {"nvidia-dcgm-dra": "nvidia.com/gpu-operator.dcgm",
          "nvidia-dcgm-exporter-dra": "nvidia.com/gpu-operator.dcgm-exporter"}


def _fix_commands(stderr: str) -> list[str]:
    [line] = [x for x in stderr.splitlines() if x.startswith("fix: ")]
    return re.findall(r"`([^`]+)`", line)


def _tool_labels_left(env: Env) -> list[str]:
    """Every place a common label or phase 1's mark is left: DaemonSet, template, pod."""
    left = []
    for name in DAEMONSETS:
        ds = env.sim.store.get(kinds.DAEMONSET, NS, name)
        key = COMMON[name]
        meta = ds["metadata"]
        if key in (meta.get("labels") or {}) or LABELS_MARK in (meta.get("annotations") or {}):
            left.append(f"DaemonSet/{name}")
        if key in (ds["spec"]["template"]["metadata"].get("labels") or {}):
            left.append(f"DaemonSet/{name} template")
        pods, _ = env.sim.store.list(kinds.POD, NS)
        left += [f"Pod/{p['metadata']['name']}" for p in pods
                 if key in (p["metadata"].get("labels") or {})
                 and not p["metadata"].get("deletionTimestamp")]
    return left


def test_a_state_lost_after_phase_1_is_noticed_and_rolled_back_from_the_marks(
        fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    fresh_status = crash.run(env.kubeconfig, "status", "-o", "json")
    assert json.loads(fresh_status.stdout)["lostState"] == []  # a fresh cluster: no marks
    assert crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    for name in DAEMONSETS:
        mark = json.loads(env.sim.store.get(kinds.DAEMONSET, NS, name)["metadata"]
                          ["annotations"][LABELS_MARK])
        assert mark == {"metadata": {COMMON[name]: None}, "template": {COMMON[name]: None}}
    env.sim.store.delete(kinds.CONFIGMAP, NS, STATE_CM)

    status = crash.run(env.kubeconfig, "status", "-o", "json")
    assert status.code == 1, status.output
    doc = json.loads(status.stdout)
    assert doc["lostState"] == [f"DaemonSet/{n} (labelled by the tool's phase 1)"
                                for n in sorted(DAEMONSETS)], doc["lostState"]
    assert any("rollback --phase 1" in w for w in doc["warnings"]), doc["warnings"]

    refused = crash.run(env.kubeconfig, "apply", "--phase", "2", "--yes")
    assert refused.code == 2, refused.output
    [rollback] = [c for c in _fix_commands(refused.stderr) if " rollback " in f" {c} "]
    argv = shlex.split(rollback)
    assert argv[0] == "dcgm-migrate" and argv[argv.index("--kubeconfig") + 1] == env.kubeconfig
    undone = crash.run(None, *argv[1:], "--yes", "--settle", "0s")
    assert undone.code == 0, undone.output
    assert _tool_labels_left(env) == []

    # Started over: the originals recorded are the true ones (absent), not the tool's labels.
    assert crash.run(env.kubeconfig, "apply", "--phase", "2", "--yes").code == 0
    state = json.loads(env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM)["data"]["state.json"])
    phase1 = next(p for p in state["phases"] if p["number"] == 1)
    befores = [r["step"]["template_before"] for r in phase1["steps"]
               if r["step"]["type"] == "set-labels"]
    assert befores and all(v is None for b in befores for v in b.values()), befores
    full = crash.run(env.kubeconfig, "rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert full.code == 0, full.output
    assert _tool_labels_left(env) == []
