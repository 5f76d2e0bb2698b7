"""OpenShift on the sim (`platform="openshift"`, dcgm_sim/openshift.py): docs/rbac.yaml and
docs/guard.yaml applied with kubectl run there unchanged — the guard's pods get a UID from the
namespace's `openshift.io/sa.scc.uid-range` and its ServiceAccount may write EndpointSlices with
pod addresses — while the manifests as they were (`runAsUser: 10001`, no
`endpointslices/restricted` rule) are refused as OpenShift refuses them; `preflight` names the
missing rule."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim import kinds
from dcgm_sim.access import ADMIN_USER
from dcgm_sim.cluster import SimCluster
from dcgm_sim.openshift import UID_RANGE_ANNOTATION, admit_pod, uid_range
from dcgm_sim.serve import ServeError, ServeOptions, build
from dcgm_sim.store import Store
from tests.helpers import cli

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-operator"
GUARD = "dcgm-migrate-guard"
GUARD_SA = f"system:serviceaccount:{NS}:{GUARD}"
FIRST, LAST = 1000680000, 1000689999  # the operator's namespace: 1000680000/10000
RESTRICTED = {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices/restricted"],
              "verbs": ["create"]}


def _kubectl(home: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")

    def run(kubeconfig: Path, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HOME": str(home), "KUBECACHEDIR": str(home / "cache")}
        env.pop("KUBECONFIG", None)
        return subprocess.run([binary, "--kubeconfig", str(kubeconfig), *args], input=stdin,
                              env=env, capture_output=True, text=True, timeout=60, check=False)
    return run


def _old_guard_yaml() -> str:
    """docs/guard.yaml as it was: a fixed `runAsUser: 10001`, no `endpointslices/restricted`."""
    docs = [d for d in yaml.safe_load_all((REPO / "docs" / "guard.yaml").read_text()) if d]
    for doc in docs:
        if doc["kind"] == "Role":
            assert RESTRICTED in doc["rules"]  # what the shipped manifest grants
            doc["rules"].remove(RESTRICTED)
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            assert "runAsUser" not in pod["securityContext"]  # what the shipped one leaves out
            pod["securityContext"]["runAsUser"] = 10001
    return yaml.safe_dump_all(docs)


def _guard_pods(sim: SimCluster) -> list[dict[str, Any]]:
    pods, _ = sim.store.list(kinds.POD, NS)
    return [p for p in pods if p["metadata"]["name"].startswith(f"{GUARD}-")]


def _addressed(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Both guard pods once each has its address (one with an address and one without is not
    enough: the test moves a slice from one pod's address to the other's)."""
    return pods if len(pods) == 2 and all(p["status"].get("podIP") for p in pods) else []


def _slice(name: str, address: str) -> str:
    """An EndpointSlice as the guard writes one for a stable name (its pod's address)."""
    return yaml.safe_dump({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "nvidia-dcgm-exporter"}},
        "addressType": "IPv4", "endpoints": [{"addresses": [address]}],
        "ports": [{"name": "gpu-metrics", "port": 9400, "protocol": "TCP"}]})


@pytest.fixture
def openshift(make_sim: Callable[..., SimCluster]) -> SimCluster:
    return make_sim(nodes=2, stack="gpucluster", tls=True, platform="openshift")


def test_the_docs_manifests_run_on_openshift_unchanged(openshift: SimCluster,
                                                       tmp_path: Path) -> None:
    sim, kubectl = openshift, _kubectl(tmp_path)
    namespace = sim.store.find(kinds.NAMESPACE, None, NS)
    assert namespace is not None and uid_range(namespace) == (FIRST, LAST), namespace
    admin = sim.kubeconfig_for(ADMIN_USER)
    applied = kubectl(admin, "apply", "-f", str(REPO / "docs" / "rbac.yaml"),
                      "-f", str(REPO / "docs" / "guard.yaml"))
    assert applied.returncode == 0, applied.stderr
    pods = sim.wait_for(lambda: _addressed(_guard_pods(sim)), timeout=30)
    for pod in pods:  # restricted-v2 gave each container the range's first UID
        assert "runAsUser" not in pod["spec"]["securityContext"]
        assert [c["securityContext"]["runAsUser"] for c in pod["spec"]["containers"]] == [FIRST]
        assert pod["metadata"]["annotations"]["openshift.io/scc"] == "restricted-v2"
    # The guard's ServiceAccount writes a slice of its own with a pod's address, and moves it.
    guard = sim.kubeconfig_for(GUARD_SA)
    address = pods[0]["status"]["podIP"]
    created = kubectl(guard, "create", "-f", "-", stdin=_slice("shared-1", address))
    assert created.returncode == 0, created.stderr
    moved = kubectl(guard, "replace", "-f", "-",
                    stdin=_slice("shared-1", pods[1]["status"]["podIP"]))
    assert moved.returncode == 0, moved.stderr
    stored = sim.store.find(kinds.ENDPOINTSLICE, NS, "shared-1")
    assert stored is not None and stored["endpoints"][0]["addresses"] == [
        pods[1]["status"]["podIP"]]
    can = kubectl(admin, "auth", "can-i", "create", "endpointslices.discovery.k8s.io",
                  "--subresource=restricted", "-n", NS, "--as", GUARD_SA)
    assert can.stdout.strip() == "yes"


def test_the_old_manifests_are_refused_as_openshift_refuses_them(
        openshift: SimCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    sim, kubectl = openshift, _kubectl(tmp_path)
    caplog.set_level(logging.INFO, logger="dcgm_sim.controllers.replicasets")
    admin = sim.kubeconfig_for(ADMIN_USER)
    applied = kubectl(admin, "apply", "-f", str(REPO / "docs" / "rbac.yaml"), "-f", "-",
                      stdin=_old_guard_yaml())
    assert applied.returncode == 0, applied.stderr  # the API takes the Deployment ...
    refusal = ("unable to validate against any security context constraint: [provider "
               '"nonroot-v2": Forbidden: not usable by user or serviceaccount')
    range_error = ("provider restricted-v2: .containers[0].runAsUser: Invalid value: 10001: "
                   f"must be in the ranges: [{FIRST}, {LAST}]")

    def refused() -> bool:
        return any(refusal in r.getMessage() and range_error in r.getMessage()
                   for r in caplog.records)
    sim.wait_for(refused, timeout=30)  # ... and SCC admission refuses every pod of it
    assert _guard_pods(sim) == []
    # Its ServiceAccount may write slices, but not with a pod's (or a Service's) address ...
    guard = sim.kubeconfig_for(GUARD_SA)
    for address in ("10.128.0.9", "10.96.0.12"):
        res = kubectl(guard, "create", "-f", "-", stdin=_slice("shared-1", address))
        assert res.returncode == 1
        assert res.stderr.strip().endswith(
            'endpointslices.discovery.k8s.io "shared-1" is forbidden: endpoint address '
            f"{address} is not allowed"), res.stderr
    # ... while an address outside the cluster's networks passes (openshift/origin
    # test/extended/networking/endpoint_admission.go: the restricted ranges only).
    outside = kubectl(guard, "create", "-f", "-", stdin=_slice("outside-1", "192.0.2.10"))
    assert outside.returncode == 0, outside.stderr
    assert sim.store.find(kinds.ENDPOINTSLICE, NS, "shared-1") is None


def test_preflight_names_the_guards_missing_restricted_rule(openshift: SimCluster,
                                                            tmp_path: Path) -> None:
    sim, kubectl = openshift, _kubectl(tmp_path)
    admin = sim.kubeconfig_for(ADMIN_USER)
    before = cli.run(sim.kubeconfig, "preflight", "-o", "json")
    checks = {c["name"]: c for c in before.json()["checks"]}
    assert checks["rbac/guard"]["ok"] and "not deployed yet" in checks["rbac/guard"]["detail"]
    applied = kubectl(admin, "apply", "-f", "-", stdin=_old_guard_yaml())
    assert applied.returncode == 0, applied.stderr
    old = cli.run(sim.kubeconfig, "preflight")
    assert old.code == 1, old.stdout
    assert ("rbac/guard/create endpointslices.discovery.k8s.io/restricted: not allowed to "
            f"ServiceAccount {NS}/{GUARD}") in old.stdout, old.stdout
    assert f"ServiceAccount {NS}/{GUARD}: 3/4 of the guard's writes" in old.stdout
    fixed = kubectl(admin, "apply", "-f", str(REPO / "docs" / "guard.yaml"))
    assert fixed.returncode == 0, fixed.stderr
    now = cli.run(sim.kubeconfig, "preflight", "-o", "json")
    checks = {c["name"]: c for c in now.json()["checks"]}
    assert checks["rbac/guard"] == {"name": "rbac/guard", "ok": True, "detail":
                                    f"ServiceAccount {NS}/{GUARD}: 4/4 of the guard's writes"}
    assert not any(n.startswith("rbac/guard/") for n in checks)


def test_restricted_v2_keeps_a_uid_inside_the_range_and_refuses_the_pods_own_outside() -> None:
    store = Store(platform="openshift")
    store.create(kinds.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NS, "annotations": {UID_RANGE_ANNOTATION: f"{FIRST}/10000"}}})

    def pod(uid: int) -> dict[str, Any]:
        return {"metadata": {"name": "p", "namespace": NS},
                "spec": {"securityContext": {"runAsUser": uid}, "containers": [{"name": "c"}]}}
    kept = admit_pod(store, pod(LAST))  # the container runs as the pod's UID: left as it was
    assert kept["spec"]["securityContext"] == {"runAsUser": LAST}
    assert "runAsUser" not in kept["spec"]["containers"][0]["securityContext"]
    with pytest.raises(Exception, match=r"\.spec\.securityContext\.runAsUser: Invalid value: "
                                        rf"{LAST + 1}: must be in the ranges"):
        admit_pod(store, pod(LAST + 1))


def test_sim_serve_takes_the_platform() -> None:
    assert build(ServeOptions(platform="openshift")).store.platform == "openshift"
    assert build(ServeOptions()).store.platform == "kubernetes"
    with pytest.raises(ServeError, match="--platform must be one of kubernetes, openshift"):
        build(ServeOptions(platform="okd"))
