"""`kubectl dcgm-migrate` through kubectl's own plugin mechanism (PATH lookup of the console
script `kubectl-dcgm_migrate` that pyproject.toml declares)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from dcgm_sim.cluster import SimCluster
from tests.helpers.cli import validate

REPO = Path(__file__).resolve().parents[2]
PLUGIN = "kubectl-dcgm_migrate"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not on PATH")


def _entry_point() -> str:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["dcgm-migrate"] == scripts[PLUGIN]
    return str(scripts[PLUGIN])


@pytest.fixture
def plugin_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose PATH holds `kubectl-dcgm_migrate`: the one pip installed, or else
    the same launcher pip writes for the declared entry point."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KUBECONFIG", None)
    if shutil.which(PLUGIN) is None:
        module, func = _entry_point().split(":")
        launcher = tmp_path / "bin" / PLUGIN
        launcher.parent.mkdir()
        launcher.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                            f"sys.exit({func}())\n")
        launcher.chmod(0o755)
        env["PATH"] = f"{launcher.parent}{os.pathsep}{env['PATH']}"
    return env


def _kubectl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_kubectl_finds_the_plugin_and_shows_its_help(plugin_path: dict[str, str]) -> None:
    listed = _kubectl(plugin_path, "plugin", "list")
    assert PLUGIN in listed.stdout, listed.stdout + listed.stderr
    res = _kubectl(plugin_path, "dcgm-migrate", "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: kubectl dcgm-migrate [OPTIONS] COMMAND")
    for command in ("plan", "apply", "rollback", "status", "verify", "unlock", "preflight",
                    "demo"):
        assert f"  {command} " in res.stdout


def test_kubectl_plugin_runs_a_real_command(plugin_path: dict[str, str],
                                            make_sim: Callable[..., SimCluster]) -> None:
    sim = make_sim(nodes=2, stack="clusterpolicy")
    res = _kubectl(plugin_path, "dcgm-migrate", "plan", "-o", "json", "--kubeconfig",
                   sim.kubeconfig)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    validate("plan", doc)
    assert doc["stack"] == "clusterpolicy"
    bad = _kubectl(plugin_path, "dcgm-migrate", "apply", "--phase", "7", "--kubeconfig",
                   sim.kubeconfig)
    assert bad.returncode == 2  # kubectl passes the plugin's exit code through
    assert "There is no phase 7" in bad.stderr
