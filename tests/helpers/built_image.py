"""The image images/build wrote, for the tests that run it (tests/image, tests/deploy).

DCGM_MIGRATE_IMAGE names it (the folder images/build wrote to, or the archive). When the build
is still running beside the tests (`.ci/run` starts the suite without waiting for it),
DCGM_MIGRATE_IMAGE_BUILD_RC names the file the build's exit code will be written to: the
first test that needs the image waits for it, and a failed build fails those tests naming its
log. Without an image (or root, or the tools) the tests skip locally and fail under CI=true:
CI must run them.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

BUILD_WAIT_SECONDS = 900.0  # a build is 1.5 to 3 minutes; a hung one must not hang the suite


def require(what: str, needs_tools: tuple[str, ...], why_root: str) -> Path:
    """The built image's path, after any build in progress ended; else skip (locally) or fail
    (CI=true) with the one reason."""
    reason = _unavailable(needs_tools, why_root)
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run the {what}", pytrace=False)
        pytest.skip(reason)
    _wait_for_build()
    return Path(os.environ["DCGM_MIGRATE_IMAGE"])


def _unavailable(needs_tools: tuple[str, ...], why_root: str) -> str | None:
    if not os.environ.get("DCGM_MIGRATE_IMAGE"):
        return "DCGM_MIGRATE_IMAGE names no built image (images/build)"
    if os.geteuid() != 0:
        return why_root
    missing = [tool for tool in needs_tools if shutil.which(tool) is None]
    return f"{', '.join(missing)} missing" if missing else None


def _wait_for_build() -> None:
    """Wait for the exit code of a build running beside the tests; fail if it failed."""
    rc_file = os.environ.get("DCGM_MIGRATE_IMAGE_BUILD_RC")
    if not rc_file:
        return
    path = Path(rc_file)
    deadline = time.monotonic() + BUILD_WAIT_SECONDS
    while not path.is_file() or not path.read_text().strip():
        if time.monotonic() > deadline:
            pytest.fail(f"images/build did not end within {BUILD_WAIT_SECONDS:.0f}s "
                        f"(its exit code goes to {path})", pytrace=False)
        time.sleep(1.0)
    code = path.read_text().strip()
    if code != "0":
        log = path.with_name("build.log")
        pytest.fail(f"images/build failed (exit {code}); its log: {log}", pytrace=False)
