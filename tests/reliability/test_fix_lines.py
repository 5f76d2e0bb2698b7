"""Every `fix:` line names commands that work as written (docs/runbook.md, "Exit codes"): for
each error path the sim can reach — a lock held by a live run or by one that stopped renewing,
a stale plan, a corrupt state, a lost state, a wrong namespace (as an admin and as the
least-privilege service account of docs/rbac.yaml), a progress deadline that was too short, a
gate that stops the run — the real CLI is run in a subprocess, the commands in backticks on its
`fix:` line are run exactly as printed (the CLI gives each the `--kubeconfig` of the command
that failed; `dcgm-migrate` is this checkout's `python -m migrator`), each must succeed, and
then the command that failed succeeds (or, for a gate, does once the cause the error names is
gone)."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from dcgm_sim.cluster import kubeconfig_document
from migrator.engine.state import lock as locking
from migrator.model import kinds
from tests.conftest import edit_object
from tests.helpers import crash
from tests.helpers.printed import run_printed
from tests.reliability.conftest import NS, Env

STATE_CM = "dcgm-migrate-state"
OTHER = "oncall@bastion-2 pid 4242"  # a run on another host: nothing proves it gone
RBAC = Path(crash.REPO) / "docs" / "rbac.yaml"
KUBECTL = shutil.which("kubectl")
STATUS_CODES = (0, 1)  # status answered (1: the verdict of a cluster not yet migrated)


def fix_commands(stderr: str) -> list[str]:
    """The commands in backticks on the `fix:` line (one is required)."""
    lines = [line for line in stderr.splitlines() if line.startswith("fix: ")]
    assert len(lines) == 1, stderr[-2000:]
    return re.findall(r"`([^`]+)`", lines[0])


def run_as_written(command: str, kubeconfig: str, cwd: Path) -> crash.Proc:
    """One command of a fix line, as printed: `dcgm-migrate …` is this checkout's CLI (the
    line already names the kubeconfig), `kubectl …` gets the test's kubeconfig."""
    argv = shlex.split(command)
    assert argv[0] in ("dcgm-migrate", "kubectl"), f"a fix names an unknown program: {command}"
    assert argv[argv.index("--kubeconfig") + 1] == kubeconfig, command  # the same cluster
    return run_printed(command, cwd)


def follow(stderr: str, kubeconfig: str, cwd: Path,
           codes: Callable[[str], tuple[int, ...]] = lambda c: (0,)) -> list[str]:
    """Run every command of the fix line in order; each must exit with one of `codes(cmd)`."""
    commands = fix_commands(stderr)
    assert commands, f"the fix line names no command: {stderr[-800:]}"
    for command in commands:
        done = run_as_written(command, kubeconfig, cwd)
        assert done.code in codes(command), (command, done.code, done.output[-1500:])
    return commands


def _status_ok(command: str) -> tuple[int, ...]:
    return STATUS_CODES if shlex.split(command)[1] in ("status", "verify") else (0,)


# ---- the lock ----------------------------------------------------------------------------------

def _foreign_lock(env: Env, renewed_ago: float) -> None:
    """A lock of another host, acquired ten minutes ago, last renewed `renewed_ago` s ago,
    good for two more minutes."""
    now = datetime.now(UTC)
    lock = locking.Lock(OTHER, now - timedelta(minutes=10), now + timedelta(minutes=2), 120.0,
                        renewed=now - timedelta(seconds=renewed_ago))
    crash.create_locked_state(env.sim.store, NS, lock)


APPLY1 = ("apply", "--phase", "1", "--yes", "--settle", "0s")


@pytest.mark.parametrize("renewed_ago, commands", [
    (5.0, ["status", "unlock --force"]),  # a live run: follow it; force only if sure
    (300.0, ["unlock"]),  # it stopped renewing: unlock releases it without --force
], ids=["renewing", "silent"])
def test_a_held_lock(fresh: Callable[..., Env], tmp_path: Path, renewed_ago: float,
                     commands: list[str]) -> None:
    env = fresh(monitor=False)
    _foreign_lock(env, renewed_ago)
    held = crash.run(env.kubeconfig, *APPLY1)
    assert held.code == 4, held.output
    assert fix_commands(held.stderr) == [
        f"dcgm-migrate {c} -n {NS} --kubeconfig {env.kubeconfig}" for c in commands]
    follow(held.stderr, env.kubeconfig, tmp_path, _status_ok)
    assert crash.run(env.kubeconfig, *APPLY1).code == 0


# ---- the plan, the state -----------------------------------------------------------------------

def test_a_stale_plan(fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(monitor=False)
    plan = tmp_path / "plan.json"
    assert crash.run(env.kubeconfig, "plan", "--out", str(plan)).code == 0
    edit_object(env.sim.store, kinds.DAEMONSET, NS, "nvidia-dcgm-dra",
                lambda ds: ds["metadata"]["labels"].update(team="gpu-infra"))
    stale = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "--plan", str(plan))
    assert stale.code == 4, stale.output
    commands = fix_commands(stale.stderr)
    assert [shlex.split(c)[1] for c in commands] == ["plan", "apply"], commands
    follow(stale.stderr, env.kubeconfig, tmp_path)
    status = crash.run(env.kubeconfig, "status", "-o", "json")
    assert json.loads(status.stdout)["phases"][0]["status"] == "completed"  # applied


def _backup(env: Env, into: Path) -> None:
    """The runbook's backup ("Restoring the state"): the two data keys, exactly as stored."""
    if KUBECTL is None:
        pytest.skip("kubectl is not on PATH")
    for key in ("state.json", "state.sha256"):
        done = subprocess.run(
            [KUBECTL, "-n", NS, "get", "configmap", STATE_CM, "--kubeconfig", env.kubeconfig,
             "-o", f'go-template={{{{index .data "{key}"}}}}'],
            capture_output=True, text=True, check=True, env={**os.environ, "HOME": str(into)})
        (into / key).write_text(done.stdout)


def test_a_corrupt_state(fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, *APPLY1).code == 0
    _backup(env, tmp_path)
    cm = copy.deepcopy(env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM))
    cm["data"]["state.json"] = cm["data"]["state.json"].replace('"completed"', '"done"', 1)
    env.sim.store.update(kinds.CONFIGMAP, cm)
    refused = crash.run(env.kubeconfig, "status")
    assert refused.code == 3, refused.output
    commands = follow(refused.stderr, env.kubeconfig, tmp_path)
    assert [c.split()[3] for c in commands] == ["get", "delete", "create", "label"], commands
    status = crash.run(env.kubeconfig, "status", "-o", "json")
    assert status.code in STATUS_CODES, status.output
    assert json.loads(status.stdout)["phases"][0]["status"] == "completed"  # the backup's
    assert crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s"
                     ).code == 0


def test_a_lost_state(fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "2", "--yes", "--settle", "0s"
                     ).code == 0
    _backup(env, tmp_path)
    env.sim.store.delete(kinds.CONFIGMAP, NS, STATE_CM)
    apply3 = ("apply", "--phase", "3", "--yes", "--settle", "0s")
    refused = crash.run(env.kubeconfig, *apply3)
    assert refused.code == 2, refused.output
    commands = follow(refused.stderr, env.kubeconfig, tmp_path, _status_ok)
    assert [c.split()[3] if c.startswith("kubectl") else c.split()[1] for c in commands] == [
        "create", "label", "status"], commands
    assert crash.run(env.kubeconfig, *apply3).code == 0


# ---- the namespace -----------------------------------------------------------------------------

def _service_account(env: Env, tmp_path: Path) -> str:
    """A kubeconfig with only the permissions docs/rbac.yaml grants (a Role in gpu-operator)."""
    token = "fix-lines-sa-token-5e1d"  # a test credential, for the sim only
    env.sim.server.access.add_token(token, RBAC.read_text())
    path = tmp_path / "kubeconfig-sa"
    path.write_text(yaml.safe_dump(kubeconfig_document(env.sim.url, NS, token)))
    return str(path)


@pytest.mark.parametrize("who", ["admin", "service-account"])
@pytest.mark.parametrize("argv", [("status",), ("apply", "--phase", "1", "--yes")],
                         ids=["status", "apply"])
def test_a_wrong_namespace(fresh: Callable[..., Env], tmp_path: Path, who: str,
                           argv: tuple[str, ...]) -> None:
    """The least-privilege identity may read nothing in `default`: still a wrong namespace
    (exit 2, "they run in namespace 'gpu-operator'"), not a missing permission (exit 3)."""
    env = fresh(monitor=False, insecure_port=who == "admin")
    kubeconfig = env.kubeconfig if who == "admin" else _service_account(env, tmp_path)
    wrong = crash.run(kubeconfig, *argv, "-n", "default")
    assert wrong.code == 2, wrong.output
    assert "they run in namespace 'gpu-operator'" in wrong.stderr or (
        "DaemonSets run in namespace 'gpu-operator'" in wrong.stderr), wrong.stderr
    [command] = follow(wrong.stderr, kubeconfig, tmp_path, _status_ok)
    assert shlex.split(command)[-2:] == ["-n", "gpu-operator"], command


# ---- waits and gates ---------------------------------------------------------------------------

def test_a_timeout_shorter_than_a_pod_start(fresh: Callable[..., Env], tmp_path: Path) -> None:
    """Pods take 2 s to start; a 1 s progress deadline runs out with nothing wrong with them:
    the fix is a longer --timeout (never "fix those nodes")."""
    env = fresh(monitor=False, time_scale=1.0)
    # --rolling: pods to start (in place, phase 1 starts none)
    short = crash.run(env.kubeconfig, "apply", "--phase", "1", "--rolling", "--yes",
                      "--timeout", "1s")
    assert short.code == 1, short.output
    assert "fix those nodes" not in short.stderr
    [command] = follow(short.stderr, env.kubeconfig, tmp_path)
    assert shlex.split(command)[-2:] == ["--timeout", "10m"], command


def test_a_gate_that_stops_the_run(fresh: Callable[..., Env], tmp_path: Path) -> None:
    """A pod outside the DaemonSets carries the common label: phase 3 refuses. The fix line
    names no command to run blindly (what to do depends on that pod); every command it does
    name works, and once the cause is gone the same command goes through."""
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "2", "--yes", "--settle", "0s"
                     ).code == 0
    env.sim.store.create(kinds.POD, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stray", "namespace": NS,
                     "labels": {"nvidia.com/gpu-operator.dcgm": "true"}},
        "spec": {"nodeName": "gpu-node-0001", "containers": [{"name": "c", "image": "x"}]}})
    apply3 = ("apply", "--phase", "3", "--yes", "--settle", "0s")
    stopped = crash.run(env.kubeconfig, *apply3)
    assert stopped.code == 1, stopped.output
    assert "no-foreign-pods/nvidia-dcgm" in stopped.stderr
    for command in fix_commands(stopped.stderr):
        assert run_as_written(command, env.kubeconfig, tmp_path).code == 0, command
    env.sim.store.delete(kinds.POD, NS, "stray")
    assert crash.run(env.kubeconfig, *apply3).code == 0



def test_preflight_of_a_wrong_namespace_as_the_service_account(fresh: Callable[..., Env],
                                                               tmp_path: Path) -> None:
    env = fresh(monitor=False, insecure_port=False)
    kubeconfig = _service_account(env, tmp_path)
    checked = crash.run(kubeconfig, "preflight", "-n", "default", "-o", "json")
    assert checked.code == 1, checked.output
    check = next(c for c in json.loads(checked.stdout)["checks"]
                 if c["name"] == "namespace/default")
    assert "they run in namespace 'gpu-operator'" in check["detail"] or (
        "DaemonSets run in namespace 'gpu-operator'" in check["detail"]), check
    assert check["detail"].endswith("Fix: pass -n gpu-operator."), check
