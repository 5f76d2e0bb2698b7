"""What the tests that run the tool's printed commands share: a command run exactly as printed
(`dcgm-migrate …` is this checkout's CLI, `kubectl …` the one on the PATH, in its own HOME),
and the Ready stray pod those fixes are about."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.model import kinds
from tests.helpers import crash

NS = "gpu-operator"


def run_printed(command: str, cwd: Path) -> crash.Proc:
    """A printed command, exactly as printed: nothing is added to it."""
    argv = shlex.split(command)
    if argv[0] == "dcgm-migrate":
        return crash.run(None, *argv[1:], cwd=cwd, timeout=300)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH")
    done = subprocess.run([kubectl, *argv[1:]], cwd=cwd, env={**os.environ, "HOME": str(cwd)},
                          capture_output=True, text=True, timeout=120, check=False)
    return crash.Proc(done.returncode, done.stdout, done.stderr, 0.0)


def stray_pod(sim: SimCluster, name: str, labels: dict[str, str]) -> None:
    """A Ready pod no DaemonSet owns (a debug copy started by hand) on a GPU node."""
    node = sim.store.list(kinds.NODE)[0][0]["metadata"]["name"]
    sim.store.create(kinds.POD, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})
    sim.wait_for(lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (sim.store.get(kinds.POD, NS, name).get("status") or {}).get(
            "conditions") or []), 30)
