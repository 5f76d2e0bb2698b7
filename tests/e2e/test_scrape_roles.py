"""ServiceMonitor discovery roles on a cluster running both stacks (docs/monitoring.md,
"Discovery roles"), against VictoriaMetrics' Kubernetes discovery with the jobs the Prometheus
Operator generates from the cluster's ServiceMonitors (tests/helpers/oracle.py
`service_monitor_jobs`) next to the Prometheus chart's annotation jobs.

After `apply --phase 3` and one guard pass, the tool's EndpointSlices give the GPUCluster
exporter pods to the ClusterPolicy operator's `nvidia-dcgm-exporter`. The GPUCluster's own
ServiceMonitor (`nvidia-dcgm-exporter-dra`, as its operator renders it when enabled) selects
its `-dra` Service. A Prometheus CR in the namespace selects both monitors with the role
under test. Under each role VM's targets per pod are what `monitoring.scrape_paths` predicts:

* role endpoints: the Endpoints object follows the selector, the tool's slices are never seen:
  one Prometheus Operator target per exporter pod;
* role endpointslice: the ClusterPolicy monitor reads the tool's slices too: two for each
  GPUCluster pod, and `verify`'s scrape-once check is red with the ClusterPolicy field as fix;
  with that relabeling in the ClusterPolicy (rendered into its monitor by the operator
  imitation), one target each again and scrape-once green.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from migrator.engine.reads import read_snapshot
from migrator.kube.client import Kube
from migrator.model import kinds, monitoring
from migrator.model import monitoring as promdiscovery
from migrator.model.stacks import load_catalog
from tests.conftest import edit_cr
from tests.e2e.conftest import E2E, NS
from tests.helpers.oracle import DiscoveryOracle, service_monitor_jobs

pytestmark = pytest.mark.timeout(240)

EXPORTERS = ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra")
ROLES = {"endpoints": "Endpoints", "endpointslice": "EndpointSlice"}
DROP = promdiscovery.drop_relabeling("dcgm-migrate")


def _dra_service_monitor() -> dict[str, Any]:
    """The GPUCluster's ServiceMonitor as upstream renders it with `dcgmExporter.serviceMonitor.
    enabled: true` (NVIDIA/gpu-operator manifests/state-dcgm-exporter/0600_service_monitor.yaml);
    the sim's GPUCluster imitation does not render it, so the test creates it."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": "nvidia-dcgm-exporter-dra", "namespace": NS,
                         "labels": {"app": "nvidia-dcgm-exporter-dra"}},
            "spec": {"jobLabel": "app", "namespaceSelector": {"matchNames": [NS]},
                     "selector": {"matchLabels": {"app": "nvidia-dcgm-exporter-dra"}},
                     "endpoints": [{"port": "gpu-metrics", "path": "/metrics",
                                    "honorLabels": False}]}}


def _prometheus(role: str) -> dict[str, Any]:
    """A Prometheus CR selecting every ServiceMonitor of its own namespace with `role`."""
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": "k8s", "namespace": NS},
            "spec": {"serviceMonitorSelector": {}, "serviceDiscoveryRole": ROLES[role]}}


@pytest.fixture
def oracles(discovery_oracle: Callable[..., DiscoveryOracle]
            ) -> Callable[[E2E, str], DiscoveryOracle]:
    """`start(env, role)`: VM with the chart's jobs and the Prometheus Operator's jobs of the
    cluster's ServiceMonitors under `role` (the e2e `discovery_oracle`: a skip without the
    binary, a failure under CI)."""
    return lambda env, role: discovery_oracle(env.sim, extra_jobs=_monitor_jobs(env, role))


def _monitor_jobs(env: E2E, role: str) -> list[dict[str, Any]]:
    return [job for sm in env.sim.store.list(kinds.SERVICE_MONITOR, NS)[0]
            for job in service_monitor_jobs(sm, role)]


def _migrated(env: E2E, role: str) -> None:
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    assert env.cli("guard", "--once").code == 0
    env.sim.store.create(kinds.SERVICE_MONITOR, _dra_service_monitor())
    env.sim.store.create(kinds.PROMETHEUS, _prometheus(role))
    env.sim.wait_idle()


def _predicted(env: E2E) -> dict[str, list[tuple[str, str]]]:
    """`monitoring.scrape_paths` on the tool's own read: pod -> (mechanism, Service)."""
    snap = read_snapshot(Kube.connect(env.sim.kubeconfig), NS, load_catalog())
    return {pod: sorted((p.mechanism, p.service) for p in paths)
            for pod, paths in monitoring.scrape_paths(snap, EXPORTERS).items()}


def _discovered(oracle: DiscoveryOracle, pods: list[str]) -> dict[str, list[tuple[str, str]]]:
    """VM's targets per exporter pod: (mechanism, Service); the chart's jobs are annotation
    discovery, the rest the Prometheus Operator's."""
    per_pod = oracle.targets_per_pod(NS)
    return {pod: sorted((monitoring.ANNOTATION if t["pool"].startswith("kubernetes-")
                         else monitoring.OPERATOR, t["service"])
                        for t in per_pod.get(pod, [])) for pod in pods}


def _exporter_pods(env: E2E) -> dict[str, list[str]]:
    return {ds: sorted(p["metadata"]["name"] for p in env.pods(ds)) for ds in EXPORTERS}


def _operator_targets(found: dict[str, list[tuple[str, str]]], pods: list[str]
                      ) -> set[int]:
    return {sum(m == monitoring.OPERATOR for m, _ in found[p]) for p in pods}


def _scrape_once(env: E2E) -> list[dict[str, Any]]:
    doc = env.cli("verify", "-o", "json").json()
    return [c for c in doc["verdict"]["checks"] if c["name"].startswith("scrape-once/")]


@pytest.mark.parametrize("role", sorted(ROLES))
def test_targets_per_pod_are_what_the_model_predicts_under_each_role(
        e2e_factory: Callable[..., E2E], oracles: Callable[[E2E, str], DiscoveryOracle],
        role: str) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4, tls=True)
    _migrated(env, role)
    shared = [s for s in env.sim.store.list(kinds.ENDPOINTSLICE, NS)[0]
              if s["metadata"]["name"].startswith("nvidia-dcgm-exporter-dcgm-migrate-")]
    assert shared, "the guard made no shared slice of nvidia-dcgm-exporter"
    oracle = oracles(env, role)
    pods = _exporter_pods(env)
    every = [p for names in pods.values() for p in names]
    found = _discovered(oracle, every)
    assert found == {p: v for p, v in _predicted(env).items() if p in every}
    gpucluster, clusterpolicy = pods["nvidia-dcgm-exporter-dra"], pods["nvidia-dcgm-exporter"]
    assert gpucluster and clusterpolicy
    assert _operator_targets(found, clusterpolicy) == {1}
    checks = _scrape_once(env)
    if role == "endpoints":
        # the Endpoints object lists the selector's pods only: one operator target each
        assert _operator_targets(found, gpucluster) == {1}
        assert all(c["ok"] for c in checks), checks
        return
    # endpointslice: the ClusterPolicy monitor reads the tool's slices as well
    assert _operator_targets(found, gpucluster) == {2}
    assert all(sorted(s for m, s in found[p] if m == monitoring.OPERATOR)
               == ["nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra"] for p in gpucluster)
    bad = [c for c in checks if not c["ok"]]
    assert [c["name"] for c in bad] == ["scrape-once/exporters"], checks
    cp = env.sim.store.list(kinds.CLUSTER_POLICY)[0][0]["metadata"]["name"]
    assert (f"to ClusterPolicy/{cp} spec.dcgmExporter.serviceMonitor.relabelings"
            in bad[0]["fix"]), bad[0]
    assert "regex: dcgm-migrate" in bad[0]["fix"] and bad[0]["phase"] == 2


def test_the_clusterpolicy_relabeling_leaves_one_target_per_pod_under_endpointslice(
        e2e_factory: Callable[..., E2E],
        oracles: Callable[[E2E, str], DiscoveryOracle]) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4, tls=True)
    _migrated(env, "endpointslice")
    edit_cr(env.sim.store, kinds.CLUSTER_POLICY, lambda cr: cr["spec"]["dcgmExporter"]
            .setdefault("serviceMonitor", {}).__setitem__("relabelings", [DROP]))

    def rendered() -> bool:  # the operator imitation re-renders its ServiceMonitor
        sm = env.sim.store.get(kinds.SERVICE_MONITOR, NS, "nvidia-dcgm-exporter")
        return bool(sm["spec"]["endpoints"][0].get("relabelings") == [DROP])

    env.sim.wait_for(rendered, timeout=30)
    oracle = oracles(env, "endpointslice")
    pods = _exporter_pods(env)
    every = [p for names in pods.values() for p in names]
    found = _discovered(oracle, every)
    assert found == {p: v for p, v in _predicted(env).items() if p in every}
    assert _operator_targets(found, every) == {1}
    assert all(sorted(s for m, s in found[p] if m == monitoring.OPERATOR)
               == ["nvidia-dcgm-exporter-dra"] for p in pods["nvidia-dcgm-exporter-dra"])
    assert all(c["ok"] for c in _scrape_once(env)), _scrape_once(env)
