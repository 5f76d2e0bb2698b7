"""kubectl pointed at a simulated cluster's kubeconfig, as a test runs it: its own HOME and
discovery cache, every call expected to succeed."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest


def kubectl_for(kubeconfig: str, tmp_path: Path) -> Callable[..., str]:
    """`kubectl(*args)` → its stdout, failing the test on a non-zero exit; the test is skipped
    where kubectl is not on the PATH."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HOME": str(tmp_path),
           "KUBECACHEDIR": str(tmp_path / "cache")}

    def kubectl(*args: str) -> str:
        out = subprocess.run([binary, *args], env=env, capture_output=True, text=True,
                             timeout=90, check=False)
        assert out.returncode == 0, out.stderr
        return out.stdout

    return kubectl
