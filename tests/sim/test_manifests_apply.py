"""The repository's own manifests against `sim serve`, with kubectl exactly as the runbook says:
`kubectl apply --dry-run=server -f docs/guard.yaml`, `kubectl apply -f docs/guard.yaml` (default
validation, no `--validate=false`), the same for docs/job.yaml, docs/rbac.yaml and
docs/prometheusrule.yaml (the guard's PodMonitor and alerts), and
`kubectl get` of what was created. Validation reads `/openapi/v3` only (no "failed to download
openapi"), and an unknown field of a Deployment is refused with kubectl's own message."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-operator"
# manifest -> the objects it creates: (kubectl resource, name, namespaced)
MANIFESTS = {
    "guard.yaml": [("serviceaccount", "dcgm-migrate-guard", True),
                   ("role.rbac.authorization.k8s.io", "dcgm-migrate-guard", True),
                   ("rolebinding.rbac.authorization.k8s.io", "dcgm-migrate-guard", True),
                   ("lease.coordination.k8s.io", "dcgm-migrate-guard", True),
                   ("deployment.apps", "dcgm-migrate-guard", True)],
    "prometheusrule.yaml": [("podmonitor.monitoring.coreos.com", "dcgm-migrate-guard", True),
                            ("prometheusrule.monitoring.coreos.com", "dcgm-migrate", True)],
    "job.yaml": [("serviceaccount", "dcgm-migrate", True),
                 ("job.batch", "dcgm-migrate-apply", True),
                 ("cronjob.batch", "dcgm-migrate-verify", True)],
    "rbac.yaml": [("clusterrole.rbac.authorization.k8s.io", "dcgm-migrate", False),
                  ("clusterrolebinding.rbac.authorization.k8s.io", "dcgm-migrate", False),
                  ("role.rbac.authorization.k8s.io", "dcgm-migrate", True),
                  ("rolebinding.rbac.authorization.k8s.io", "dcgm-migrate", True)],
}

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    """kubectl pointed at a `sim serve` process through the kubeconfig it writes."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "migrator", "sim", "serve", "--nodes", "2", "--stack",
         "clusterpolicy", "--kubeconfig-out", str(kubeconfig)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 30)
        assert readable, "no READY line"
        assert proc.stdout.readline().startswith("READY ")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path),
               "KUBECACHEDIR": str(tmp_path / "cache")}

        def run(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([binary, *args], env=env, capture_output=True, text=True,
                                  timeout=90, check=False, cwd=REPO)
        yield run
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    assert "failed to download openapi" not in out.stderr
    assert "warning" not in out.stderr.lower(), out.stderr
    return out.stdout


def _get(kubectl: Kubectl, resource: str, name: str,
         namespaced: bool) -> subprocess.CompletedProcess[str]:
    return kubectl("get", resource, name, "-o", "json", *(("-n", NS) if namespaced else ()))


@pytest.mark.parametrize("manifest", sorted(MANIFESTS))
def test_manifest_applies_as_the_runbook_says(kubectl: Kubectl, manifest: str) -> None:
    path = f"docs/{manifest}"
    objects = MANIFESTS[manifest]
    out = _ok(kubectl("apply", "--dry-run=server", "-f", path))
    for resource, name, _ in objects:
        assert f"{resource}/{name} created (server dry run)" in out.splitlines(), out
    for resource, name, namespaced in objects:  # a dry run stores nothing
        assert _get(kubectl, resource, name, namespaced).returncode != 0

    applied = kubectl("apply", "-f", path, "-v=6")
    for resource, name, _ in objects:
        assert f"{resource}/{name} created" in _ok(applied).splitlines(), applied.stdout
    # kubectl validated every kind from /openapi/v3 and never fell back to /openapi/v2
    assert "/openapi/v3/apis/" in applied.stderr and "/openapi/v2" not in applied.stderr
    out = _ok(kubectl("apply", "-f", path))
    for resource, name, _ in objects:
        assert f"{resource}/{name} unchanged" in out.splitlines(), out

    docs = [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]
    for (resource, name, namespaced), doc in zip(objects, docs, strict=True):
        got = json.loads(_ok(_get(kubectl, resource, name, namespaced)))
        assert (got["apiVersion"], got["kind"], got["metadata"]["name"]) == (
            doc["apiVersion"], doc["kind"], name)
        assert got["metadata"]["uid"] and got["metadata"]["resourceVersion"]
        assert got["metadata"].get("namespace") == (NS if namespaced else None)
        assert got["metadata"]["labels"] == doc["metadata"]["labels"]
        for field in ("spec", "rules", "roleRef", "subjects"):
            if field in doc:
                assert _subset(doc[field], got[field]), (field, doc[field], got[field])


def _subset(want: object, got: object) -> bool:
    """`want` is in `got`, with the server's defaults added (maps may gain keys)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _subset(v, got[k])
                                             for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(want) == len(got) and all(
            _subset(w, g) for w, g in zip(want, got, strict=True))
    return want == got


def test_get_prints_what_was_created(kubectl: Kubectl) -> None:
    for manifest in ("guard.yaml", "job.yaml"):
        _ok(kubectl("apply", "-f", f"docs/{manifest}"))
    out = _ok(kubectl("get", "deploy,job,cj,sa,role,rolebinding", "-n", NS))
    assert "deployment.apps/dcgm-migrate-guard" in out
    header = next(line for line in out.splitlines()
                  if line.startswith("NAME") and "READY" in line)
    assert header.split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    _ok(kubectl("-n", NS, "rollout", "status", "deploy/dcgm-migrate-guard", "--timeout=60s"))
    out = _ok(kubectl("get", "deploy,job,cj,sa,role,rolebinding", "-n", NS))
    row = next(line for line in out.splitlines() if "deployment.apps/" in line)
    assert row.split()[1:4] == ["2/2", "2", "2"]  # its ReplicaSet's two pods run
    row = next(line for line in out.splitlines() if "job.batch/" in line)
    assert row.split()[:3] == ["job.batch/dcgm-migrate-apply", "Running", "0/1"]
    row = next(line for line in out.splitlines() if "cronjob.batch/" in line)
    assert row.split()[1:7] == ["*/15", "*", "*", "*", "*", "<none>"]
    row = next(line for line in out.splitlines()
               if "rolebinding.rbac.authorization.k8s.io/dcgm-migrate-guard" in line)
    assert row.split()[1] == "Role/dcgm-migrate-guard"
    assert "serviceaccount/dcgm-migrate-guard" in out and "serviceaccount/dcgm-migrate " in out
    out = _ok(kubectl("get", "all", "-n", NS))
    for name in ("deployment.apps/dcgm-migrate-guard", "job.batch/dcgm-migrate-apply",
                 "cronjob.batch/dcgm-migrate-verify"):
        assert name in out
    # the runbook's follow-up commands find them by short name and kind/name
    _ok(kubectl("-n", NS, "get", "deploy/dcgm-migrate-guard", "job/dcgm-migrate-apply",
                "cj/dcgm-migrate-verify", "sa/dcgm-migrate"))


def test_discovery_lists_the_kinds_as_upstream(kubectl: Kubectl) -> None:
    rows = {line.split()[0]: line.split() for line in
            _ok(kubectl("api-resources", "--no-headers")).splitlines()}
    assert rows["serviceaccounts"][1:] == ["sa", "v1", "true", "ServiceAccount"]
    assert rows["deployments"][1:] == ["deploy", "apps/v1", "true", "Deployment"]
    assert rows["cronjobs"][1:] == ["cj", "batch/v1", "true", "CronJob"]
    assert rows["jobs"][1:] == ["batch/v1", "true", "Job"]
    for plural, scoped in (("roles", "true"), ("rolebindings", "true"),
                           ("clusterroles", "false"), ("clusterrolebindings", "false")):
        assert rows[plural][1:3] == ["rbac.authorization.k8s.io/v1", scoped]
    out = _ok(kubectl("api-resources", "--categories=all", "-o", "name"))
    assert {"deployments.apps", "replicasets.apps", "jobs.batch", "cronjobs.batch"} <= set(
        out.split())
    assert rows["replicasets"][1:] == ["rs", "apps/v1", "true", "ReplicaSet"]


def _with_unknown_field(tmp_path: Path) -> Path:
    docs = list(yaml.safe_load_all((REPO / "docs/guard.yaml").read_text()))
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["bogusField"] = 1
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(deployment))
    return path


def test_unknown_field_in_a_deployment_is_refused(kubectl: Kubectl, tmp_path: Path) -> None:
    bad = str(_with_unknown_field(tmp_path))
    message = 'strict decoding error: unknown field "spec.template.spec.bogusField"'
    for args in (("apply", "--dry-run=server", "-f", bad), ("apply", "-f", bad),
                 ("create", "-f", bad)):
        out = kubectl(*args)
        assert out.returncode != 0 and message in out.stderr, (args, out.stderr)
        assert "failed to download openapi" not in out.stderr
    assert kubectl("get", "deploy", "dcgm-migrate-guard", "-n", NS).returncode != 0
    # an existing Deployment: kubectl's patch is validated too
    _ok(kubectl("apply", "-f", "docs/guard.yaml"))
    out = kubectl("apply", "-f", bad)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert _ok(kubectl("apply", "--validate=false", "--dry-run=server", "-f", bad))
