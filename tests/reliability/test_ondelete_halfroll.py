"""OnDelete DaemonSets are never left half-rolled (model/halfrolls.py): `rollback --phase 1`
refuses one instead of reporting OK while every pod keeps the label, and its printed fix
(`--roll-on-delete`) rolls them; `--roll-on-delete` finishes a half-roll an operator's
re-render left (a ClusterPolicy with `updateStrategy: OnDelete` edited after the migration);
the verdict's fix for such a rollout is a command that works (not `kubectl rollout status`,
which refuses OnDelete); and a rollback that restored no selector does not settle."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from migrator.model import kinds
from tests.conftest import edit_cr, edit_object, on_delete
from tests.helpers import crash
from tests.reliability.conftest import NS, Env

DCGM, EXPORTER = "nvidia.com/gpu-operator.dcgm", "nvidia.com/gpu-operator.dcgm-exporter"
KUBECTL = shutil.which("kubectl")


def _fix_commands(stderr: str) -> list[str]:
    [line] = [x for x in stderr.splitlines() if x.startswith("fix: ")]
    return re.findall(r"`([^`]+)`", line)


def _pods(env: Env, app: str) -> list[dict[str, Any]]:
    items, _ = env.sim.store.list(kinds.POD, NS)
    return [p for p in items if (p["metadata"].get("labels") or {}).get("app") == app
            and not p["metadata"].get("deletionTimestamp")]


def _on_delete(env: Env, name: str) -> None:
    edit_object(env.sim.store, kinds.DAEMONSET, NS, name, on_delete)


def test_rollback_of_an_ondelete_daemonset_refuses_and_its_fix_rolls_the_pods(
        fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s"
                     ).code == 0
    _on_delete(env, "nvidia-dcgm-exporter-dra")  # switched by hand after the migration
    refused = crash.run(env.kubeconfig, "rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert refused.code == 1, refused.output
    assert "DaemonSet/nvidia-dcgm-exporter-dra uses updateStrategy OnDelete" in refused.stderr
    assert "run OK" not in refused.stdout
    [again] = _fix_commands(refused.stderr)
    argv = shlex.split(again)
    assert argv[:4] == ["dcgm-migrate", "rollback", "--phase", "1"] and "--roll-on-delete" in argv
    assert argv[argv.index("--kubeconfig") + 1] == env.kubeconfig
    assert crash.run(None, *argv[1:]).code == 0
    for app, key in (("nvidia-dcgm-dra", DCGM), ("nvidia-dcgm-exporter-dra", EXPORTER)):
        pods = _pods(env, app)
        assert pods and all(key not in p["metadata"]["labels"] for p in pods), app
    # Forward again: the OnDelete DaemonSet is rolled by the tool, the other by its controller.
    assert crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "--roll-on-delete"
                     ).code == 0
    assert all(p["metadata"]["labels"].get(EXPORTER) == "true"
               for p in _pods(env, "nvidia-dcgm-exporter-dra"))


def _edit_cluster_policy(env: Env, edit: Callable[[dict[str, Any]], None]) -> None:
    edit_cr(env.sim.store, kinds.CLUSTER_POLICY, lambda cr: edit(cr["spec"]))


def _status(env: Env) -> dict[str, Any]:
    done = crash.run(env.kubeconfig, "status", "-o", "json")
    return dict(json.loads(done.stdout))


def _finding(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(next(f for f in doc["verdict"]["checks"] if f["name"] == name))


def test_roll_on_delete_finishes_what_an_operator_re_render_left_half_rolled(
        fresh: Callable[..., Env]) -> None:
    env = fresh("clusterpolicy", nodes=3, monitor=False, operator_reconcile_seconds=3600.0)
    _edit_cluster_policy(env, lambda spec: spec.setdefault("daemonsets", {}).update(
        updateStrategy="OnDelete"))
    env.sim.wait_for(lambda: crash.run(env.kubeconfig, "plan", "-o", "json").code == 0
                     and env.sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-exporter")
                     ["spec"]["updateStrategy"]["type"] == "OnDelete", 60)
    assert crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s",
                     "--roll-on-delete").code == 0
    # A CR edit after the migration: the operator re-renders the exporter's template without
    # the common label; OnDelete replaces no pod.
    _edit_cluster_policy(env, lambda spec: spec["dcgmExporter"].update(
        version="4.5.2-4.8.1-distroless"))
    env.sim.wait_for(lambda: EXPORTER not in env.sim.store.get(
        kinds.DAEMONSET, NS, "nvidia-dcgm-exporter")["spec"]["template"]["metadata"]["labels"],
        60)
    doc = _status(env)
    rollout = _finding(doc, "rollout-complete/nvidia-dcgm-exporter")
    assert not rollout["ok"] and "rollout status" not in rollout["fix"], rollout
    first = re.findall(r"`([^`]+)`", rollout["fix"])[0]
    assert first.startswith(f"kubectl -n {NS} delete pod nvidia-dcgm-exporter-"), first
    if KUBECTL is not None:  # the printed command works as written
        pod = shlex.split(first)[-1]
        done = subprocess.run([KUBECTL, "--kubeconfig", env.kubeconfig, *shlex.split(first)[1:]],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        env.sim.wait_for(lambda: all(p["metadata"]["name"] != pod
                                     for p in _pods(env, "nvidia-dcgm-exporter")), 60)
    # The documented remedy is no longer refused by its own pre-gate, and finishes the roll.
    fixed = crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s",
                      "--roll-on-delete")
    assert fixed.code == 0, fixed.output
    ds = env.sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-exporter")
    status = ds["status"]
    assert status["updatedNumberScheduled"] == status["desiredNumberScheduled"] == 3, status
    assert all(p["metadata"]["labels"].get(EXPORTER) == "true"
               for p in _pods(env, "nvidia-dcgm-exporter"))
    assert _status(env)["verdict"]["ok"]


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy"])
def test_a_rollback_settles_only_after_restoring_a_selector(fresh: Callable[..., Env],
                                                           stack: str) -> None:
    """Phase 3 switches the gpucluster stack's aliases; on the clusterpolicy stack it switches
    nothing (the operator's own Services are not switched without --include-operator-owned):
    there, a rollback with an hour's --settle finishes at once."""
    env = fresh(stack, monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s"
                     ).code == 0
    restored = stack == "gpucluster"
    done = crash.run(env.kubeconfig, "rollback", "--phase", "1", "--yes",
                     "--settle", "4s" if restored else "1h", timeout=120)
    assert done.code == 0, done.output
    assert ("settling" in done.stderr) is restored, done.stderr[-1500:]


def test_rollback_with_roll_on_delete_finishes_a_half_roll_left_behind(
        fresh: Callable[..., Env]) -> None:
    """Phase 1 recorded rolled back while an OnDelete DaemonSet's pods still carry the label
    (what a rollback without the refusal left): `rollback --phase 1 --roll-on-delete` rolls
    them instead of answering "already rolled back; nothing to do"."""
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    assert crash.run(env.kubeconfig, "rollback", "--phase", "1", "--yes", "--settle", "0s"
                     ).code == 0
    _on_delete(env, "nvidia-dcgm-exporter-dra")
    for pod in _pods(env, "nvidia-dcgm-exporter-dra"):  # the pods an old rollback left
        edit_object(env.sim.store, kinds.POD, NS, pod["metadata"]["name"],
                    lambda pod: pod["metadata"]["labels"].update({EXPORTER: "true"}))
    done = crash.run(env.kubeconfig, "rollback", "--phase", "1", "--yes", "--settle", "0s",
                     "--roll-on-delete")
    assert done.code == 0, done.output
    assert "nothing to do" not in done.stderr, done.stderr[-800:]
    pods = _pods(env, "nvidia-dcgm-exporter-dra")
    assert pods and all(EXPORTER not in p["metadata"]["labels"] for p in pods)
