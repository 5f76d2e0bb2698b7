"""--debug adds a traceback and changes nothing else (docs/design.md, "Command line"): for every
kind of error the exit code is the same with and without it, the one-sentence error and its fix are
still the last two lines of stderr, and the traceback appears only with --debug."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.cluster import kubeconfig_document
from dcgm_sim.server import ADMIN_TOKEN
from migrator import commands
from migrator.engine.reports import StatusReport
from migrator.kube import Kube, RetryPolicy
from tests.helpers import cli
from tests.reliability.conftest import NS, Env
from tests.reliability.test_concurrency import _foreign_lock

TRACEBACK = "Traceback (most recent call last)"
# A ClusterRole that may read the namespace and nothing else: the first list is refused (403).
READ_NAMESPACE_ONLY = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: namespace-reader}
rules:
  - {apiGroups: [""], resources: [namespaces], verbs: [get]}
"""

Setup = Callable[[Env, Path, pytest.MonkeyPatch], list[str]]


def _token_kubeconfig(env: Env, tmp: Path, token: str) -> str:
    path = tmp / f"kubeconfig-{token}"
    path.write_text(yaml.safe_dump(kubeconfig_document(env.sim.url, NS, token)))
    return str(path)


def missing_kubeconfig(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    return ["status", "--kubeconfig", str(tmp / "missing")]


def bad_phase(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    return ["apply", "--phase", "4", "--yes", "--kubeconfig", env.kubeconfig]


def unreachable(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    """A stopped API server; retries without their real sleeps (the budget is tests/kube's)."""
    connect = Kube.connect  # bound to Kube: the patched one below calls it

    def no_sleep_connect(cls: type[Kube], *args: Any, **kwargs: Any) -> Kube:
        kwargs["retry"] = RetryPolicy(sleep=lambda s: None, random=lambda: 0.0)
        return connect(*args, **kwargs)

    mp.setattr(Kube, "connect", classmethod(no_sleep_connect))
    kubeconfig = _token_kubeconfig(env, tmp, ADMIN_TOKEN)  # stop() removes the sim's own
    env.sim.stop()
    return ["status", "--kubeconfig", kubeconfig]


def forbidden(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    env.sim.server.access.add_token("namespace-reader", READ_NAMESPACE_ONLY)
    return ["status", "--kubeconfig", _token_kubeconfig(env, tmp, "namespace-reader")]


def unauthorized(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    return ["status", "--kubeconfig", _token_kubeconfig(env, tmp, "not-a-registered-token")]


def lock_held(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    _foreign_lock(env, expired=False)
    return ["apply", "--phase", "1", "--yes", "--settle", "0s", "--kubeconfig", env.kubeconfig]


def unexpected(env: Env, tmp: Path, mp: pytest.MonkeyPatch) -> list[str]:
    """A bug: an exception that is not a MigrateError escapes the command."""
    def broken(session: commands.Session) -> StatusReport:
        raise RuntimeError("a bug in status")

    mp.setattr(commands, "status", broken)
    return ["status", "--kubeconfig", env.kubeconfig]


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup
    code: int
    says: str  # in the error sentence
    raised: str  # the class of the exception the traceback ends with


CASES = [
    Case("missing-kubeconfig", missing_kubeconfig, 2, "does not exist", "UsageError"),
    Case("bad-input", bad_phase, 2, "There is no phase 4", "UsageError"),
    Case("unreachable", unreachable, 3, "Cannot reach the Kubernetes API server",
         "APIUnreachable"),
    Case("forbidden", forbidden, 3, "forbidden", "APIForbidden"),
    Case("unauthorized", unauthorized, 3, "401", "APIForbidden"),
    Case("lock-held", lock_held, 4, "holds the lock", "LockHeld"),
    Case("unexpected", unexpected, 3, "unexpected RuntimeError", "RuntimeError"),
]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()][-2:]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("output", ["table", "json"])
def test_debug_adds_a_traceback_and_keeps_the_exit_code(
        case: Case, output: str, fresh: Callable[..., Env], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    env = fresh(monitor=False)
    argv = [*case.setup(env, tmp_path, monkeypatch), "-o", output]
    mark = env.mark()
    plain = cli.run(None, *argv)
    debug = cli.run(None, *argv, "--debug")
    assert (plain.code, debug.code) == (case.code, case.code), (plain.stderr, debug.stderr)
    assert TRACEBACK not in plain.stderr
    assert TRACEBACK in debug.stderr, debug.stderr
    assert f"{case.raised}: " in debug.stderr, debug.stderr  # the last line of the traceback
    error, fix = _error_lines(plain.stderr)
    assert error.startswith("error: ") and case.says in error, plain.stderr
    assert fix.startswith("fix: "), plain.stderr
    assert _error_lines(debug.stderr)[0] == error  # the same sentence, after the traceback
    assert debug.stdout == plain.stdout  # -o json: the same error document on stdout
    assert env.writes(mark) == []
