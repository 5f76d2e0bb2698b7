"""kubectl conformance against a running SimCluster: get -o json across kinds, label, patch
(strategic and merge), and `rollout status` returning only once the rollout is really done."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.kubelet import PODS_READY_ANNOTATION
from migrator.model import kinds

NS = "gpu-operator"
DCGM = "nvidia-dcgm-dra"
COMMON = "nvidia.com/gpu-operator.dcgm"

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kubectl_for(tmp_path: Path) -> Callable[[SimCluster], Kubectl]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")

    def bind(sim: SimCluster) -> Kubectl:
        env = {**os.environ, "KUBECONFIG": sim.kubeconfig, "HOME": str(tmp_path),
               "KUBECACHEDIR": str(tmp_path / "cache")}

        def run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
            return subprocess.run([binary, *args], env=env, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        return run

    return bind


def _rolled_out(sim: SimCluster, name: str) -> bool:
    ds = sim.store.get(kinds.DAEMONSET, NS, name)
    st = ds.get("status") or {}
    want = st.get("desiredNumberScheduled", 0)
    return bool(st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled", 0) == want
                and st.get("numberAvailable", 0) == want)


def test_get_several_kinds_as_json(make_sim: Callable[..., SimCluster],
                                   kubectl_for: Callable[[SimCluster], Kubectl]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster")
    out = kubectl_for(sim)("get", "ds,svc,pods,endpointslices", "-n", NS, "-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kind"] == "List"
    counts: dict[str, int] = {}
    for item in doc["items"]:
        counts[item["kind"]] = counts.get(item["kind"], 0) + 1
    assert counts == {"DaemonSet": 2, "Service": 2, "Pod": 6, "EndpointSlice": 2}
    ds = next(i for i in doc["items"] if i["kind"] == "DaemonSet")
    assert ds["status"]["numberAvailable"] == 3


def test_label_and_patch(make_sim: Callable[..., SimCluster],
                         kubectl_for: Callable[[SimCluster], Kubectl]) -> None:
    sim = make_sim(nodes=2, stack="clusterpolicy")
    kubectl = kubectl_for(sim)
    out = kubectl("label", "ds", "nvidia-dcgm", f"{COMMON}=true")
    assert out.returncode == 0, out.stderr
    ds = sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")
    assert ds["metadata"]["labels"][COMMON] == "true" and ds["metadata"]["generation"] == 1
    out = kubectl("patch", "svc", "nvidia-dcgm-exporter", "-p",
                  json.dumps({"metadata": {"annotations": {"x": "y"}}}))
    assert out.returncode == 0, out.stderr
    assert sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm-exporter")["metadata"][
        "annotations"] == {"prometheus.io/scrape": "true", "x": "y"}
    out = kubectl("patch", "ds", "nvidia-dcgm", "--type", "merge", "-p", json.dumps(
        {"spec": {"template": {"metadata": {"labels": {COMMON: "true"}}}}}))
    assert out.returncode == 0, out.stderr
    assert sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")["metadata"]["generation"] == 2


def test_rollout_status_returns_once_the_rollout_is_done(
    make_sim: Callable[..., SimCluster], kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = make_sim(nodes=3, stack="gpucluster", time_scale=0.05)
    kubectl = kubectl_for(sim)
    out = kubectl("patch", "ds", DCGM, "-p", json.dumps(
        {"spec": {"template": {"metadata": {"labels": {COMMON: "true"}}}}}))
    assert out.returncode == 0, out.stderr
    assert not _rolled_out(sim, DCGM)
    out = kubectl("rollout", "status", f"ds/{DCGM}", "--timeout=60s")
    assert out.returncode == 0, out.stderr
    assert "successfully rolled out" in out.stdout
    assert _rolled_out(sim, DCGM)
    pods = [p for p in sim.store.list(kinds.POD, NS)[0]
            if p["metadata"]["labels"].get("app") == DCGM]
    assert len(pods) == 3 and all(p["metadata"]["labels"].get(COMMON) == "true" for p in pods)


def test_rollout_status_times_out_on_a_stalled_rollout(
    make_sim: Callable[..., SimCluster], kubectl_for: Callable[[SimCluster], Kubectl]
) -> None:
    sim = make_sim(nodes=2, stack="gpucluster")
    kubectl = kubectl_for(sim)
    out = kubectl("annotate", "node", "gpu-node-0001", f"{PODS_READY_ANNOTATION}=false")
    assert out.returncode == 0, out.stderr
    out = kubectl("patch", "ds", DCGM, "-p", json.dumps(
        {"spec": {"template": {"metadata": {"labels": {COMMON: "true"}}}}}))
    assert out.returncode == 0, out.stderr
    out = kubectl("rollout", "status", f"ds/{DCGM}", "--timeout=2s")
    assert out.returncode != 0
    assert not _rolled_out(sim, DCGM)
