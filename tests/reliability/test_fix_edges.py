"""Fix lines and answers at the edges, each case run through the real CLI against the
simulated cluster and, where a fix is printed, the printed command run as written: a hand edit
of phase 1's labels is not blamed on the operator; a gate's refusal names what to do (never
"docs/runbook.md explains this gate"); a plan file's errors name the file; `apply --plan`
checks its options against the plan's; `status --watch` refuses a nonsense interval and
prints JSON Lines; a state ConfigMap that lost its label gets the command that restores it;
a corrupt state still shows the live verdict."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from migrator.model import kinds
from tests.conftest import edit_object, on_delete
from tests.helpers import cli, crash
from tests.reliability.conftest import NS, STATE_CM, Env

DCGM = "nvidia.com/gpu-operator.dcgm"
KUBECTL = shutil.which("kubectl")


def _fix(stderr: str) -> str:
    [line] = [x for x in stderr.splitlines() if x.startswith("fix: ")]
    return line


def _commands(stderr: str) -> list[list[str]]:
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", _fix(stderr))]


def _run(argv: list[str], env: Env, cwd: Path) -> crash.Proc:
    """A printed command, as written (`kubectl` needs it on PATH)."""
    assert argv[argv.index("--kubeconfig") + 1] == env.kubeconfig, argv
    if argv[0] == "dcgm-migrate":
        return crash.run(None, *argv[1:], cwd=cwd)
    assert argv[0] == "kubectl", argv
    if KUBECTL is None:
        pytest.skip("kubectl is not on PATH")
    done = subprocess.run([KUBECTL, *argv[1:]], cwd=cwd, env={**os.environ, "HOME": str(cwd)},
                          capture_output=True, text=True, timeout=120, check=False)
    return crash.Proc(done.returncode, done.stdout, done.stderr, 0.0)


def _gate(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(next(g for p in doc["phases"] for g in p["gates"] if g["name"] == name))


def test_a_hand_edit_of_the_labels_is_not_blamed_on_the_operator(
        fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    def unlabel(ds: dict[str, Any]) -> None:  # kubectl edit, by hand
        assert "nvidia.com/last-applied-hash" in ds["metadata"]["annotations"]  # the operator's
        del ds["metadata"]["labels"][DCGM]
        del ds["spec"]["template"]["metadata"]["labels"][DCGM]

    edit_object(env.sim.store, kinds.DAEMONSET, NS, "nvidia-dcgm-dra", unlabel)
    status = crash.run(env.kubeconfig, "status", "-o", "json")
    assert status.code == 1, status.output
    gate = _gate(json.loads(status.stdout), "labels-hold/nvidia-dcgm-dra")
    assert not gate["ok"] and "re-rendered" not in gate["detail"], gate
    assert "not by an operator re-render" in gate["detail"], gate
    assert crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    healed = crash.run(env.kubeconfig, "status", "-o", "json")
    assert _gate(json.loads(healed.stdout), "labels-hold/nvidia-dcgm-dra")["ok"]


def test_a_gate_refusal_names_what_to_do_and_its_fix_works(fresh: Callable[..., Env],
                                                           tmp_path: Path) -> None:
    env = fresh(monitor=False)
    edit_object(env.sim.store, kinds.DAEMONSET, NS, "nvidia-dcgm-exporter-dra", on_delete)
    refused = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes")
    assert refused.code == 1, refused.output
    assert "explains this gate" not in refused.stderr, refused.stderr[-800:]
    [again] = _commands(refused.stderr)
    assert "--roll-on-delete" in again, again
    assert _run(again, env, tmp_path).code == 0


def test_a_rollout_gate_refusal_names_its_runbook_row(fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    env.sim.flap_probes("gpu-node-0002", 1e6)  # its pods NotReady for the whole test
    env.sim.wait_for(lambda: (env.sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-dra")
                              ["status"].get("numberAvailable") or 0) < 2, 30)
    refused = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes")
    assert refused.code == 1, refused.output
    fix = _fix(refused.stderr)
    assert "explains this gate" not in fix, fix
    assert "rollout-complete row in docs/runbook.md, 'Gate failures'" in fix, fix


def test_plan_file_errors_name_the_file_and_options_must_match(fresh: Callable[..., Env],
                                                                tmp_path: Path) -> None:
    env = fresh(monitor=False)
    path = tmp_path / "my plan.json"
    missing = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "--plan", str(path))
    assert missing.code == 2, missing.output
    [save] = _commands(missing.stderr)
    assert save[save.index("--out") + 1] == str(path), save  # the file, not FILE
    assert _run(save, env, tmp_path).code in (0, 1) and path.exists()
    other = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "--plan", str(path),
                      "--roll-on-delete")
    assert other.code == 2, other.output
    assert "was made with no planning options, but this apply passes --roll-on-delete" in \
        other.stderr, other.stderr[-800:]
    with_its, replan = _commands(other.stderr)
    assert "--roll-on-delete" not in with_its and "--roll-on-delete" in replan
    assert _run(with_its, env, tmp_path).code == 0  # the plan's own options: it runs
    assert all(p["metadata"]["labels"].get(DCGM) == "true" for p in env.sim.store.list(
        kinds.POD, NS)[0] if p["metadata"]["labels"].get("app") == "nvidia-dcgm-dra")


@pytest.mark.parametrize("interval", ["-1", "0"])
def test_status_watch_refuses_a_nonsense_interval(fresh: Callable[..., Env],
                                                  interval: str) -> None:
    env = fresh(monitor=False)
    done = crash.run(env.kubeconfig, "status", "--watch", "--interval", interval)
    assert done.code == 2, done.output
    assert "--interval" in done.stderr and "unexpected" not in done.stderr, done.stderr


def test_status_watch_json_is_json_lines(fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    proc = crash.start(env.kubeconfig, "status", "--watch", "--interval", "1", "-o", "json")
    assert proc.stdout is not None
    lines = []
    try:
        for _ in range(2):
            lines.append(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGINT)
        code, _, err = crash.finish(proc)
    assert code == 130, err[-1000:]  # Ctrl-C ends a watch (docs/runbook.md, "Exit codes")
    for line in lines:
        assert line.endswith("\n") and "\n" not in line[:-1]
        cli.validate("status", json.loads(line))  # each line one whole status document


def test_a_state_that_lost_its_label_gets_the_command_that_restores_it(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    cm = copy.deepcopy(env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM))
    del cm["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    env.sim.store.update(kinds.CONFIGMAP, cm)
    refused = crash.run(env.kubeconfig, "status")
    assert refused.code == 3, refused.output
    assert "lost its label" in refused.stderr and "another namespace" not in refused.stderr
    [label] = _commands(refused.stderr)
    assert label[:2] == ["kubectl", "-n"] and "label" in label, label
    assert _run(label, env, tmp_path).code == 0
    status = crash.run(env.kubeconfig, "status", "-o", "json")
    assert status.code in (0, 1), status.output
    assert json.loads(status.stdout)["phases"][0]["status"] == "completed"


def test_a_corrupt_state_still_shows_the_live_verdict(fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s"
                     ).code == 0
    cm = copy.deepcopy(env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM))
    cm["data"]["state.json"] = cm["data"]["state.json"].replace('"completed"', '"done"', 1)
    env.sim.store.update(kinds.CONFIGMAP, cm)
    table = crash.run(env.kubeconfig, "status")
    assert table.code == 3, table.output
    assert "verdict OK — the stable identity works" in table.stdout, table.stdout[-800:]
    assert "does not match its checksum" in table.stderr and _fix(table.stderr)
    doc = crash.run(env.kubeconfig, "status", "-o", "json")
    assert doc.code == 3, doc.output
    parsed = json.loads(doc.stdout)  # one document: the verdict and the state's error
    cli.validate("status", parsed)
    assert parsed["verdict"]["ok"] and parsed["lostState"] == [] and not parsed["ok"]
    assert parsed["stateError"]["exitCode"] == 3


def test_a_short_timeout_while_rolling_ondelete_pods_is_not_blamed_on_the_nodes(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """--roll-on-delete with a progress deadline shorter than a pod's start: the stop says the
    pod is still starting and the fix is a longer --timeout, which then resumes and finishes
    (a pod still starting when it resumes is waited for, not refused)."""
    env = fresh(monitor=False, time_scale=0.1, readiness_probes=True)
    edit_object(env.sim.store, kinds.DAEMONSET, NS, "nvidia-dcgm-dra", on_delete)
    short = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "--roll-on-delete",
                      "--timeout", "1s")
    assert short.code == 1, short.output
    fix = _fix(short.stderr)
    assert "fix those nodes" not in fix and "fix the node" not in fix, fix
    assert "still starting" in fix, fix
    [again] = _commands(short.stderr)
    assert again[again.index("--timeout") + 1] == "10m", again
    assert _run(again, env, tmp_path).code == 0
    assert all(p["metadata"]["labels"].get(DCGM) == "true" for p in env.sim.store.list(
        kinds.POD, NS)[0] if p["metadata"]["labels"].get("app") == "nvidia-dcgm-dra"
        and not p["metadata"].get("deletionTimestamp"))
