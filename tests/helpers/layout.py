"""mypy and import-linter over the package as it installs.

Both tools find a package's modules by walking its folder, so they see `migrator.phases` only in
a folder `migrator/phases`, and the checkout has none: setuptools' `package-dir` maps the
top-level phases/ and plans/ into the package when it builds or installs it (the editable
install's import finder does the same at import time). This lays the package out as it
installs — migrator/ plus each `package-dir` folder of pyproject.toml at its package's place —
in a temporary folder, runs the tool there on the checkout's own configuration, and prints the
tool's paths as the checkout's (`migrator/phases/alias.py` as `phases/alias.py`). The
simulated cluster's packages (simulator/dcgm_sim, simulator/dcgm_sim_cli: a distribution of
its own) and the test suite (tests/, with the benchmarks/ it imports) are copied beside the
package, so that mypy checks the tests against the package as it installs too.

    python3 -m tests.helpers.layout mypy            # `mypy --strict` of migrator and tests
    python3 -m tests.helpers.layout lint-imports    # the contracts of .importlinter

Further arguments go to the tool; its exit code is the command's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "migrator"
# Checked beside the package, laid out by import name: the simulated cluster's packages (their
# own distribution, simulator/), the test suite, and the benchmarks it imports.
BESIDE = {"dcgm_sim": "simulator/dcgm_sim", "dcgm_sim_cli": "simulator/dcgm_sim_cli",
          "tests": "tests", "benchmarks": "benchmarks"}


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """pyproject.toml's `package-dir` entries: package name -> folder in the checkout."""
    config = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"].get("package-dir", {})
    return {name: repo / folder for name, folder in mapping.items() if name}


def lay_out(into: Path, repo: Path = REPO) -> dict[str, str]:
    """Copy the package to `into` as it installs; returns each copied folder's path relative to
    `into` mapped to its folder relative to the checkout (with a trailing separator)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(repo / PACKAGE, into / PACKAGE, ignore=skip)
    folders = {PACKAGE + os.sep: PACKAGE + os.sep}
    for name, source in sorted(package_dirs(repo).items()):
        target = into.joinpath(*name.split("."))
        if target.exists():
            raise SystemExit(f"{target.relative_to(into)} exists in the checkout as well as in "
                             f"package-dir ({source.relative_to(repo)}): remove one")
        shutil.copytree(source, target, ignore=skip)
        folders[str(target.relative_to(into)) + os.sep] = str(source.relative_to(repo)) + os.sep
    for name, source_folder in BESIDE.items():
        shutil.copytree(repo / source_folder, into / name, ignore=skip)
        folders[name + os.sep] = source_folder + os.sep
    return folders


def as_checkout_paths(text: str, folders: dict[str, str], into: Path) -> str:
    """The tool's output with the laid-out paths named as the checkout's files."""
    prefixes = sorted(folders, key=len, reverse=True)
    lines = []
    for line in text.replace(str(into) + os.sep, "").splitlines(keepends=True):
        for prefix in prefixes:
            if line.startswith(prefix):
                line = folders[prefix] + line[len(prefix):]
                break
        lines.append(line)
    return "".join(lines)


USAGE = "usage: python3 -m tests.helpers.layout mypy|lint-imports [ARGS...]"


def command(tool: str, args: list[str]) -> list[str]:
    if tool == "mypy":
        return [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                *args]
    if tool == "lint-imports":
        found = (shutil.which("lint-imports", path=str(Path(sys.executable).parent))
                 or shutil.which("lint-imports"))
        if not found:
            raise SystemExit("lint-imports is not installed: pip install -e '.[lint]'")
        return [found, *args]  # finds the .importlinter copied beside the package
    raise SystemExit(USAGE)


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(USAGE)
    run = command(argv[0], argv[1:])
    with tempfile.TemporaryDirectory(prefix="dcgm-migrate-layout-") as tmp:
        into = Path(tmp)
        folders = lay_out(into)
        shutil.copy2(REPO / ".importlinter", into / ".importlinter")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run(run, cwd=into, env=env, capture_output=True, text=True,
                              check=False)
        sys.stdout.write(as_checkout_paths(done.stdout, folders, into))
        sys.stderr.write(as_checkout_paths(done.stderr, folders, into))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
