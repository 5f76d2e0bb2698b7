"""A kubeconfig whose user is an exec plugin, as EKS (`aws eks get-token`), GKE
(`gke-gcloud-auth-plugin`), AKS (`kubelogin`) and OIDC helpers write it: the tool runs the
plugin through the official client's loader, sends the token it prints over TLS, and runs it
again when the credential it printed expires. The sim serves its HTTPS listener only
(`insecure_port=False`), so every request it records as answered carried a token."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dcgm_sim.access import ADMIN_TOKEN, ADMIN_USER
from dcgm_sim.cluster import SimCluster
from tests.helpers import crash
from tests.helpers.cli import run

PLUGIN = """#!{python}
import json, os, sys
with open({calls!r}, "a") as fh:
    fh.write(os.environ.get("KUBERNETES_EXEC_INFO", "") + "\\n")
status = {{"token": {token!r}}}
if {expires!r}:
    status["expirationTimestamp"] = {expires!r}
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}}))
"""


def exec_kubeconfig(sim: SimCluster, tmp_path: Path, token: str, expires: str = "") -> Path:
    """The sim's TLS kubeconfig with its user's token replaced by an exec plugin that prints
    `token` (and an `expirationTimestamp` when `expires` is given)."""
    plugin = tmp_path / "get-token.py"
    plugin.write_text(PLUGIN.format(python=sys.executable, calls=str(tmp_path / "calls"),
                                    token=token, expires=expires))
    plugin.chmod(0o700)
    path = sim.kubeconfig_for(ADMIN_USER, tmp_path / "kubeconfig")
    doc = yaml.safe_load(path.read_text())
    doc["users"][0]["user"] = {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
        "args": [], "interactiveMode": "Never"}}
    path.write_text(yaml.safe_dump(doc))
    return path


def calls(tmp_path: Path) -> list[dict[str, object]]:
    """What the plugin was given (KUBERNETES_EXEC_INFO), one entry per run."""
    lines = (tmp_path / "calls").read_text().splitlines()
    return [json.loads(line) if line else {} for line in lines]


@pytest.fixture
def tls_sim(make_sim: Callable[..., SimCluster]) -> SimCluster:
    return make_sim(nodes=2, stack="gpucluster", tls=True, insecure_port=False,
                    time_scale=0.005)


def test_status_and_plan_authenticate_with_the_plugins_token(
        tls_sim: SimCluster, tmp_path: Path) -> None:
    kubeconfig = str(exec_kubeconfig(tls_sim, tmp_path, ADMIN_TOKEN))
    mark = tls_sim.server.log.last_seq
    status = run(kubeconfig, "status", "-o", "json")
    # an unmigrated cluster, judged live: exit 1, the stable names do not exist yet
    assert status.code == 1, status.stderr
    assert status.json()["stack"] == "gpucluster"
    plan = run(kubeconfig, "plan", "-o", "json")
    assert plan.code == 0, plan.stderr
    assert [p["number"] for p in plan.json()["phases"]] == [1, 2, 3]
    seen = tls_sim.server.log.since(mark)
    assert len(seen) >= 10 and {r.user for r in seen} == {ADMIN_USER}
    ran = calls(tmp_path)
    # once per command: the credential has no expiry, so the client keeps it for the run
    assert len(ran) == 2
    assert all(info["kind"] == "ExecCredential" and info["apiVersion"] ==
               "client.authentication.k8s.io/v1" for info in ran)
    assert ADMIN_TOKEN not in status.stderr + plan.stderr


def test_an_expiring_credential_is_fetched_again(tls_sim: SimCluster, tmp_path: Path) -> None:
    # within the client's five-minute skew: expired at every request, so the plugin runs again
    soon = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=1))
    kubeconfig = str(exec_kubeconfig(tls_sim, tmp_path, ADMIN_TOKEN,
                                     soon.strftime("%Y-%m-%dT%H:%M:%SZ")))
    mark = tls_sim.server.log.last_seq
    res = run(kubeconfig, "status", "-o", "json")
    assert res.code == 1, res.stderr
    seen = tls_sim.server.log.since(mark)
    assert {r.user for r in seen} == {ADMIN_USER}
    assert len(calls(tmp_path)) > 1


def test_a_token_the_server_rejects_is_an_api_error(tls_sim: SimCluster,
                                                    tmp_path: Path) -> None:
    kubeconfig = str(exec_kubeconfig(tls_sim, tmp_path, "not-a-token-the-sim-knows"))
    res = run(kubeconfig, "status")
    assert res.code == 3, res.stderr
    assert "rejected the credentials" in res.stderr and "Traceback" not in res.stderr
    assert "not-a-token-the-sim-knows" not in res.stdout + res.stderr
    assert len(calls(tmp_path)) == 1


def test_a_plugin_that_fails_is_shown_with_its_own_message(tls_sim: SimCluster,
                                                           tmp_path: Path) -> None:
    """In a process of its own, as a user runs it: the client sends no credentials when the
    plugin fails, so the server refuses; the error says why (the plugin's own stderr), once,
    and the fix says to log in. The client's bare `ERROR:root:` log line is not printed."""
    kubeconfig = exec_kubeconfig(tls_sim, tmp_path, ADMIN_TOKEN)
    (tmp_path / "get-token.py").write_text(
        f"#!{sys.executable}\nimport sys\n"
        "print('SSO session expired: log in again', file=sys.stderr)\nsys.exit(1)\n")
    code = ("import sys\nsys.argv[0] = 'dcgm-migrate'\nfrom migrator.cli.app import main\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code, "status", "--kubeconfig",
                           str(kubeconfig)], env=crash.cli_env(), capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr
    assert "exec: process returned 1. SSO session expired: log in again" in done.stderr
    assert "rejected the credentials" in done.stderr and "Traceback" not in done.stderr
    error = next(line for line in done.stderr.splitlines() if line.startswith("error:"))
    assert error.endswith("The kubeconfig's exec plugin failed: exec: process returned 1. "
                          "SSO session expired: log in again."), done.stderr
    assert done.stderr.count("SSO session expired") == 1 and "ERROR:root" not in done.stderr
