"""The images built for the tests that run them (tests/image, tests/deploy).

DCGM_MIGRATE_IMAGE names the one images/build wrote (its folder, or the archive);
DCGM_MIGRATE_CONTAINERFILE_IMAGE the one images/buildah built from the Containerfile. When a
build is still running beside the tests (`.ci/run` starts the suite without waiting for it),
<VARIABLE>_BUILD_RC names the file its exit code will be written to: the first test that
needs the image waits for it, and a failed build fails those tests naming its log. Without
an image (or root, or the tools) the tests skip locally and fail under CI=true: CI must run
them.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

BUILD_WAIT_SECONDS = 900.0  # a build is 1.5 to 3 minutes; a hung one must not hang the suite


IMAGES = {"images/build": "DCGM_MIGRATE_IMAGE",
          "Containerfile": "DCGM_MIGRATE_CONTAINERFILE_IMAGE",
          "images/build arm64": "DCGM_MIGRATE_ARM64_IMAGE"}
# Built where asked for only (ARCH=arm64 images/build, through qemu-user on an x86_64 host: several
# minutes, which .ci/run cannot afford): its tests run when its variable names it.
OPTIONAL = frozenset({"images/build arm64"})


def wanted() -> list[str]:
    """The images the tests run on: every one CI builds, and an optional one that was built."""
    return [name for name, variable in IMAGES.items()
            if name not in OPTIONAL or os.environ.get(variable)]


def require(what: str, needs_tools: tuple[str, ...], why_root: str,
            built_by: str = "images/build") -> Path:
    """The path of the image `built_by` made (a key of IMAGES), after any build in progress
    ended; else skip (locally) or fail (CI=true) with the one reason."""
    variable = IMAGES[built_by]
    reason = _unavailable(variable, built_by, needs_tools, why_root)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the {what}", pytrace=False)
        pytest.skip(reason)
    _wait_for_build(variable, built_by)
    return Path(os.environ[variable])


def _unavailable(variable: str, built_by: str, needs_tools: tuple[str, ...],
                 why_root: str) -> str | None:
    if not os.environ.get(variable):
        builder = {"Containerfile": "images/buildah",
                   "images/build arm64": "ARCH=arm64 images/build"}.get(built_by, "images/build")
        return f"{variable} names no built image ({builder})"
    if os.geteuid() != 0:
        return why_root
    missing = [tool for tool in needs_tools if shutil.which(tool) is None]
    return f"{', '.join(missing)} missing" if missing else None


def _wait_for_build(variable: str, built_by: str) -> None:
    """Wait for the exit code of a build running beside the tests; fail if it failed."""
    rc_file = os.environ.get(f"{variable}_BUILD_RC")
    if not rc_file:
        return
    path = Path(rc_file)
    deadline = time.monotonic() + BUILD_WAIT_SECONDS
    while not path.is_file() or not path.read_text().strip():
        if time.monotonic() > deadline:
            pytest.fail(f"the {built_by} image's build did not end within "
                        f"{BUILD_WAIT_SECONDS:.0f}s "
                        f"(its exit code goes to {path})", pytrace=False)
        time.sleep(1.0)
    code = path.read_text().strip()
    if code != "0":
        log = path.with_suffix(".log")
        pytest.fail(f"the {built_by} image's build failed (exit {code}); its log: {log}",
                    pytrace=False)
