"""docs/ as a kustomize base (docs/kustomization.yaml) and deploy/openshift, its overlay into
nvidia-gpu-operator: `kubectl kustomize` renders every object and binding subject into the
overlay's namespace with nothing left naming gpu-operator; the base is exactly the plain
manifests; the overlay applied to a sim whose operator runs in nvidia-gpu-operator (OpenShift's
admission on) brings the guard up; in a pod the tool defaults -n to the pod's namespace."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from dcgm_sim import kinds
from dcgm_sim.access import ADMIN_USER
from dcgm_sim.cluster import SimCluster
from migrator.cli import options
from migrator.cli.app import app

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "deploy" / "openshift"
NS = "nvidia-gpu-operator"
MANIFESTS = ("rbac.yaml", "job.yaml", "guard.yaml")  # docs/kustomization.yaml's resources
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding"}


def _kubectl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    env = {**os.environ, "HOME": str(home), "KUBECACHEDIR": str(home / "cache")}
    env.pop("KUBECONFIG", None)
    return subprocess.run([binary, *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


def _render(tmp_path: Path, where: Path) -> tuple[str, list[dict[str, Any]]]:
    res = _kubectl(tmp_path, "kustomize", str(where))
    assert res.returncode == 0, res.stderr
    return res.stdout, [d for d in yaml.safe_load_all(res.stdout) if d]


def _key(doc: dict[str, Any]) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def test_the_overlay_renders_every_object_into_its_namespace(tmp_path: Path) -> None:
    text, docs = _render(tmp_path, OVERLAY)
    plain = [d for m in MANIFESTS for d in yaml.safe_load_all((REPO / "docs" / m).read_text())
             if d]
    assert sorted(map(_key, docs)) == sorted(map(_key, plain))  # nothing lost, nothing added
    for doc in docs:
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], _key(doc)
        else:
            assert doc["metadata"]["namespace"] == NS, _key(doc)
        for subject in doc.get("subjects") or []:
            assert subject["namespace"] == NS, (_key(doc), subject)
    bindings = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert len(bindings) == 3  # the migration's two and the guard's
    # nothing else names the default namespace: no argument, no resourceName, no env
    assert re.findall(r"(?<!nvidia-)gpu-operator", text) == []


def test_the_base_is_exactly_the_plain_manifests(tmp_path: Path) -> None:
    """One source of truth: `kubectl apply -k docs/` applies what `kubectl apply -f` of the
    three files does, and every docs/ manifest of the tool's own objects is in the base."""
    _, docs = _render(tmp_path, REPO / "docs")
    plain = {_key(d): d for m in MANIFESTS
             for d in yaml.safe_load_all((REPO / "docs" / m).read_text()) if d}
    assert {_key(d): d for d in docs} == plain
    kustomization = yaml.safe_load((REPO / "docs" / "kustomization.yaml").read_text())
    assert tuple(kustomization["resources"]) == MANIFESTS
    others = {p.name for p in (REPO / "docs").glob("*.yaml")} - {*MANIFESTS, "kustomization.yaml"}
    assert others == {"prometheusrule.yaml"}  # the monitoring stack's CRDs: applied on its own


def test_the_overlay_brings_the_guard_up_in_the_olm_namespace(
        make_sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    sim = make_sim(nodes=2, stack="clusterpolicy", tls=True, namespace=NS, platform="openshift")
    admin = sim.kubeconfig_for(ADMIN_USER)
    applied = _kubectl(tmp_path, "--kubeconfig", str(admin), "apply", "-k", str(OVERLAY))
    assert applied.returncode == 0, applied.stderr

    def ready_guards() -> list[dict[str, Any]]:
        pods, _ = sim.store.list(kinds.POD, NS)
        return [p for p in pods if p["metadata"]["name"].startswith("dcgm-migrate-guard-")
                and any(c["type"] == "Ready" and c["status"] == "True"
                        for c in p.get("status", {}).get("conditions") or [])]

    pods = sim.wait_for(lambda: ready_guards() if len(ready_guards()) == 2 else [], timeout=60)
    assert {p["spec"]["serviceAccountName"] for p in pods} == {"dcgm-migrate-guard"}
    # the Deployment controller counts the ready pods on its own next pass, as `kubectl rollout
    # status` waits for it to
    def ready_deployment() -> dict[str, Any]:
        found = sim.store.find(kinds.DEPLOYMENT, NS, "dcgm-migrate-guard")
        return found if found and found["status"].get("readyReplicas") == 2 else {}

    assert sim.wait_for(ready_deployment, timeout=30)["status"]["replicas"] == 2
    assert sim.store.find(kinds.DEPLOYMENT, "gpu-operator", "dcgm-migrate-guard") is None
    # the Job's pod too, under restricted-v2 with the namespace's first UID (no fixed one)
    def job_pods() -> list[dict[str, Any]]:
        pods, _ = sim.store.list(kinds.POD, NS)
        return [p for p in pods if p["metadata"]["name"].startswith("dcgm-migrate-apply-")]

    job_pod = sim.wait_for(job_pods, timeout=60)[0]
    assert [c["securityContext"]["runAsUser"] for c in job_pod["spec"]["containers"]] == [
        1000680000]
    # its RBAC is bound in that namespace: the guard's ServiceAccount may patch the alias there
    can = _kubectl(tmp_path, "--kubeconfig", str(admin), "auth", "can-i", "patch",
                   "services/nvidia-dcgm-exporter", "-n", NS,
                   "--as", f"system:serviceaccount:{NS}:dcgm-migrate-guard")
    assert can.stdout.strip() == "yes"


def test_in_a_pod_the_namespace_defaults_to_the_pods_own(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    account = tmp_path / "namespace"
    account.write_text(NS + "\n")
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "HOME": str(tmp_path)}  # no ~/.kube/config
    assert options.default_namespace(None, account, pod) == NS
    assert options.default_namespace(None, account, {**pod, "POD_NAMESPACE": "x"}) == "x"
    assert options.default_namespace(None, tmp_path / "absent", pod) == "gpu-operator"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    # where a kubeconfig is used, or outside a cluster, it stays gpu-operator
    assert options.default_namespace(str(kubeconfig), account, pod) == "gpu-operator"
    assert options.default_namespace(None, account, {**pod, "KUBECONFIG": str(kubeconfig)}
                                     ) == "gpu-operator"
    assert options.default_namespace(None, account, {"HOME": str(tmp_path)}) == "gpu-operator"
    # the commands the manifests run (no -n in their args) take it; an -n given wins
    monkeypatch.setattr(options, "SERVICE_ACCOUNT_NAMESPACE", account)
    for name, value in pod.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    group = typer.main.get_group(app)
    commands = []
    for manifest in ("job.yaml", "guard.yaml"):
        for doc in yaml.safe_load_all((REPO / "docs" / manifest).read_text()):
            spec = (doc or {}).get("spec") or {}
            template = (spec.get("jobTemplate") or {}).get("spec", spec).get("template")
            if template:
                commands += [c["args"] for c in template["spec"]["containers"]]
    assert [a[0] for a in commands] == ["apply", "verify", "guard"]
    for name, *args in commands:
        assert "--namespace" not in args and "-n" not in args
        assert group.commands[name].make_context(name, list(args)).params["namespace"] == NS
        given = group.commands[name].make_context(name, [*args, "-n", "gpu-operator"])
        assert given.params["namespace"] == "gpu-operator"
