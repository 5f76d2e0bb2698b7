"""Secrets: the kubeconfig's bearer token never appears in any command's stdout or stderr (every
output format, and the --debug tracebacks of forced errors: 401, 403, a failing write), in the
state ConfigMap, in a saved plan file, or in the sim's request log."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from pathlib import Path

import yaml

from dcgm_sim.cluster import kubeconfig_document
from migrator.model import kinds
from tests.helpers import crash
from tests.reliability.conftest import NS, Env

RBAC = Path(crash.REPO) / "docs" / "rbac.yaml"


def _needles(token: str) -> list[str]:
    """The token and the forms it could leak in (base64, the Authorization header)."""
    return [token, token[4:-4], base64.b64encode(token.encode()).decode().rstrip("="),
            f"Bearer {token}"]


def _kubeconfig(tmp_path: Path, url: str, token: str, name: str) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(kubeconfig_document(url, NS, token)))
    return str(path)


def _leaks(text: str, token: str) -> list[str]:
    return [n for n in _needles(token) if n in text]


def test_the_token_never_leaks(fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(insecure_port=False)
    token = "tok-" + secrets.token_hex(16)
    env.sim.server.access.add_token(token, RBAC.read_text())
    kubeconfig = _kubeconfig(tmp_path, env.sim.url, token, "kubeconfig")
    plan_file = tmp_path / "plan.json"
    outputs: list[tuple[tuple[str, ...], crash.Proc]] = []

    def run(*argv: str, config: str = kubeconfig) -> crash.Proc:
        done = crash.run(config, *argv)
        outputs.append((argv, done))
        return done

    assert run("preflight", "-o", "yaml").code == 0
    assert run("plan", "--out", str(plan_file)).code == 0
    assert run("apply", "--phase", "3", "--yes", "--settle", "0s", "--plan",
               str(plan_file), "--debug").code == 0
    assert run("status", "-o", "yaml").code == 0
    # Forced errors, with --debug so tracebacks (and their chained causes) are printed.
    # Every request 429 with Retry-After: 0: the retry budget is spent at once, exit 3.
    env.sim.server.faults.update(error_rate=1.0, error_codes=[429], retry_after_seconds=0)
    failed = run("rollback", "--phase", "3", "--yes", "--settle", "0s", "--debug")
    assert failed.code == 3 and "Traceback" in failed.stderr, failed.output
    env.sim.server.faults.reset()
    narrow = "tok-" + secrets.token_hex(16)
    env.sim.server.access.add_token(narrow, RBAC.read_text().replace(
        "nvidia-dcgm-exporter]", "]"))  # no delete of the exporter alias
    forbidden = run("rollback", "--phase", "2", "--yes", "--settle", "0s", "--debug",
                    config=_kubeconfig(tmp_path, env.sim.url, narrow, "narrow"))
    assert forbidden.code == 3, forbidden.output
    assert "Traceback" in forbidden.stderr, forbidden.output  # refused before any write:
    assert "may not delete services/nvidia-dcgm-exporter" in forbidden.stderr, forbidden.output
    wrong = "tok-" + secrets.token_hex(16)  # not registered: 401
    unauthorized = run("status", "--debug",
                       config=_kubeconfig(tmp_path, env.sim.url, wrong, "wrong"))
    assert unauthorized.code == 3, unauthorized.output
    assert "Traceback" in unauthorized.stderr and "401" in unauthorized.stderr
    assert run("rollback", "--phase", "3", "--yes", "--settle", "0s", "-o", "json").code == 0

    for argv, done in outputs:
        for t in (token, narrow, wrong):
            assert not _leaks(done.stdout + done.stderr, t), f"{argv} printed a token"
    assert not _leaks(plan_file.read_text(), token)
    cm = env.sim.store.get(kinds.CONFIGMAP, NS, crash.STATE_CM)
    assert not _leaks(yaml.safe_dump(cm), token)
    log = "\n".join(repr(r) for r in env.sim.server.log.entries())
    for t in (token, narrow, wrong):
        assert not _leaks(log, t)
    assert not env.finish()
