"""The README's promise on a fresh machine: a new virtualenv, the README's install command run
on a copy of the checkout, then `dcgm-migrate demo --nodes 4`, `--version` and the kubectl
plugin from that venv alone. Slow (it installs every dependency); needs the package index."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from migrator import __version__

REPO = Path(__file__).resolve().parents[2]
GUARD_SECONDS = 300  # kills a hung install instead of hanging the suite; not an assertion

pytestmark = pytest.mark.slow


def readme_install_and_demo() -> tuple[str, str]:
    """The README's one-line install-and-demo command, split at `&&`."""
    block = re.search(r"## Try it.*?```bash\n(.*?)\n```", (REPO / "README.md").read_text(),
                      re.S)
    assert block, "README has no 'Try it' bash block"
    install, demo = (part.strip() for part in block.group(1).strip().split("&&"))
    assert demo == "dcgm-migrate demo"
    return install, demo


def test_the_readme_commands_are_the_promised_ones() -> None:
    install, _ = readme_install_and_demo()
    assert install == "python3 -m pip install ."
    text = (REPO / "README.md").read_text()
    assert "python3 -m pip install -e '.[test]' && python3 -m pytest" in text


def test_fresh_venv_installs_and_runs_the_demo(tmp_path: Path) -> None:
    install, demo = readme_install_and_demo()
    src = tmp_path / "checkout"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", "build", "dist", ".*_cache", ".venv", "venv"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                   timeout=GUARD_SECONDS)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "KUBECONFIG", "NO_COLOR")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))

    def sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=GUARD_SECONDS)

    installed = sh(install, src)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-3000:]
    assert sh("command -v dcgm-migrate", tmp_path).stdout.strip() == str(
        venv / "bin" / "dcgm-migrate")

    run = sh(f"{demo} --nodes 4", tmp_path)  # outside the checkout: only the venv is used
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = run.stdout[run.stdout.rindex("Summary"):]
    assert "4 nodes" in summary
    for row in (r"1 label\s+completed\s+2", r"2 alias\s+completed\s+2",
                r"3 switch\s+completed\s+2", r"nvidia-dcgm-exporter\s+4\s+4\s+4\s+yes"):
        assert re.search(row, summary), (row, summary)
    assert "verdict OK" in summary
    assert "rollout  DaemonSet/nvidia-dcgm-exporter-dra: updated 4/4" in run.stderr

    # The repository's phases/ and plans/ folders install inside the package, never as generic
    # top-level names that would collide with anything else in site-packages.
    python = venv / "bin" / "python"
    for name in ("phases", "plans"):
        generic = sh(f"{python} -c 'import {name}'", tmp_path)
        assert generic.returncode != 0 and "ModuleNotFoundError" in generic.stderr, name
    inside = sh(f"{python} -c 'import migrator.phases as p, migrator.model.stacks as s; "
                f"print(p.__file__, [m.NAME for m in p.PHASES], "
                f"s.load_catalog().common.state_configmap)'", tmp_path)
    assert inside.returncode == 0, inside.stderr
    where, names = inside.stdout.split(" ", 1)
    assert Path(where).is_relative_to(venv) and "site-packages/migrator/phases" in where
    assert names.strip() == "['label', 'alias', 'switch'] dcgm-migrate-state"

    version = sh("dcgm-migrate --version", tmp_path)
    assert version.stdout.strip() == f"dcgm-migrate {__version__}"
    if shutil.which("kubectl"):
        plugin = sh("kubectl dcgm-migrate --help", tmp_path)
        assert plugin.returncode == 0, plugin.stderr
        assert plugin.stdout.startswith("Usage: kubectl dcgm-migrate")
