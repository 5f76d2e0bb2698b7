"""The lowest version of every runtime dependency pyproject.toml declares, as pip constraints.

`.ci/run` installs exactly these floors into a venv of its own and runs the connection tests
there (FLOOR_TESTS): a floor that no longer holds — an API the tool calls that the lowest
declared version lacks — fails CI, as a user's resolver may well pick that version.

    python3 -m tests.helpers.floors > constraints.txt   # name==floor, one a line
    python3 -m tests.helpers.floors --check              # this interpreter has exactly those
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
# Every path of the tool to a cluster, and what exercises each dependency: the kubeconfig
# loader and its proxy (kubernetes, pyyaml), exec plugins and in-cluster configuration through
# the CLI (typer, rich), the retry budget (tenacity), the guard's /metrics (prometheus-client).
FLOOR_TESTS = (
    "tests/kube/test_connection.py",
    "tests/kube/test_config.py",
    "tests/kube/test_retrying.py",
    "tests/kube/test_priority_fairness.py",
    "tests/cli/test_exec_plugin.py",
    "tests/cli/test_incluster.py",
    "tests/engine/test_guard_signals.py",
    "tests/e2e/test_guard_metrics.py",
)


def floors() -> dict[str, Version]:
    """Each runtime dependency's lower bound (`>=`), by name; SystemExit when one has none."""
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    found: dict[str, Version] = {}
    for line in declared:
        requirement = Requirement(line)
        lower = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "==")]
        if not lower:
            raise SystemExit(f"pyproject.toml: {requirement.name} declares no floor (>=)")
        found[requirement.name] = max(lower)
    return found


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        wrong = [f"{name} {metadata.version(name)} (floor {floor})"
                 for name, floor in floors().items()
                 if Version(metadata.version(name)) != floor]
        if wrong:
            print("not the declared floors: " + ", ".join(wrong), file=sys.stderr)
            return 1
        print("floors installed: " + ", ".join(f"{n}=={v}" for n, v in floors().items()))
        return 0
    if argv == ["--tests"]:
        print(" ".join(FLOOR_TESTS))
        return 0
    if argv:
        print("usage: python3 -m tests.helpers.floors [--check | --tests]", file=sys.stderr)
        return 2
    for name, floor in floors().items():
        print(f"{re.sub(r'[-_.]+', '-', name).lower()}=={floor}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
