"""The deployment e2e tests: docs/guard.yaml and docs/job.yaml applied with kubectl to
`dcgm-migrate sim serve --images`, whose kubelet runs the built image for real
(dcgm_sim/runtime). Only the image reference (a registry's, as docs/image.md says to push it)
and the kubeconfig differ from what a real cluster gets.

DCGM_MIGRATE_IMAGE names the image images/build wrote (its folder or the archive), as for
tests/image; they need root (namespaces, chroot) and kubectl. Without them they skip locally
and fail under CI=true (.ci/run builds the image and runs them with the suite):

    OUT=/var/tmp/dcgm-img UNPACK=0 images/build
    DCGM_MIGRATE_IMAGE=/var/tmp/dcgm-img python3 -m pytest tests/deploy -n 0 -s
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.helpers import built_image

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-operator"
REGISTRY_IMAGE = "registry.example.com/gpu-tools/dcgm-migrate:0.1.0"  # as pushed (image.md)
T = TypeVar("T")


@pytest.fixture(scope="session")
def image() -> Path:
    return built_image.require("deployment tests", ("kubectl", "unshare", "nsenter", "chroot",
                                                    "setpriv"),
                               "the sim's container runtime needs root (namespaces, chroot)")


def manifest(name: str, folder: Path, replace: dict[str, str] | None = None) -> Path:
    """docs/<name> with the image pushed to a registry (the runbook's `sed`) and `replace`."""
    text = (REPO / "docs" / name).read_text()
    text = text.replace("image: dcgm-migrate:0.1.0", f"image: {REGISTRY_IMAGE}")
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text)
    return path


class Sim:
    """`dcgm-migrate sim serve --images` as a subprocess, kubectl with its admin kubeconfig."""

    def __init__(self, folder: Path, image: Path, *args: str) -> None:
        self.folder = folder
        self.kubeconfig = folder / "kubeconfig"
        self.log = folder / "sim-serve.log"
        with self.log.open("w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "migrator", "sim", "serve", "--images", str(image),
                 "--kubeconfig-out", str(self.kubeconfig), *args],
                cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], 120)
        assert readable, f"sim serve printed no READY line: {self.log.read_text()[-2000:]}"
        assert self.proc.stdout.readline().startswith("READY "), self.log.read_text()[-2000:]
        self.admin = Path(f"{self.kubeconfig}-sim-admin")

    def kubectl(self, *args: str, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        res = subprocess.run(["kubectl", "--kubeconfig", str(self.admin), "-n", NS, *args],
                             capture_output=True, text=True, timeout=timeout)
        if check:
            assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
        return res

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def tool(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "migrator", *args, "--kubeconfig",
                               str(self.admin)], cwd=REPO, capture_output=True, text=True,
                              timeout=300)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def serve(tmp_path: Path, image: Path) -> Iterator[Callable[..., Sim]]:
    """Start a sim (arguments of `sim serve`); stopped, its pods with it, at the end."""
    started: list[Sim] = []

    def start(*args: str) -> Sim:
        sim = Sim(tmp_path, image, *args)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def until(what: str, predicate: Callable[[], T], timeout: float = 120,
          interval: float = 0.2) -> T:
    """Poll `predicate` until it is truthy; its value. Fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
