"""Scrape targets per DCGM exporter pod from a real Prometheus-compatible discovery (VM 1.79)."""

# What is asserted is the oracle's own answer, so these tests document it. The reasons are
# the Kubernetes discovery of Prometheus and of VictoriaMetrics 1.79 (their `pod` and
# `endpoints` roles), which agree on every count here:
#
# * role `pod` gives one target per (container, port), and one bare-pod-IP target per
#   container without ports; init containers count too (`__meta_kubernetes_pod_container_init`).
#   A target without a port is scraped on the scheme's default port (80).
# * role `endpoints` gives one target per Endpoints address and port, plus one per container
#   port of a seen pod that no endpoint port covers (regular containers only, no init ones).
# * After relabeling, targets with the same labels and scrape URL are one target.

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from dcgm_sim.access import ADMIN_USER
from migrator.model import kinds
from migrator.model.gates import rollout_complete
from tests.e2e.conftest import E2E, NS
from tests.helpers.oracle import DiscoveryOracle

pytestmark = pytest.mark.timeout(120)

# stack -> (the exporter DaemonSet, its pods' `app` label, the annotated Service selecting them)
EXPORTERS = {
    "gpucluster": ("nvidia-dcgm-exporter-dra",) * 3,
    "clusterpolicy": ("nvidia-dcgm-exporter",) * 3,
}
SERVICE_JOBS = ("kubernetes-service-endpoints", "kubernetes-service-endpoints-slow")
POD_JOBS = ("kubernetes-pods", "kubernetes-pods-slow")
MERGE = "application/merge-patch+json"


@pytest.fixture(params=sorted(EXPORTERS))
def env(request: pytest.FixtureRequest, e2e_factory: Callable[..., E2E]) -> E2E:
    # tls: the oracle reads the sim over HTTPS; no operator imitation: it would re-render the
    # exporter DaemonSet and take the test's pod-template annotations away.
    return e2e_factory(request.param, nodes=3, tls=True, operator_reconcile_seconds=None)


@pytest.fixture
def api(env: E2E) -> Iterator[client.ApiClient]:
    api: client.ApiClient = config.new_client_from_config(
        str(env.sim.kubeconfig_for(ADMIN_USER)))
    yield api
    api.close()


def _exporter(env: E2E) -> tuple[str, str, str]:
    return EXPORTERS[env.sim.stack]


def _targets(oracle: DiscoveryOracle, env: E2E, jobs: tuple[str, ...]
             ) -> dict[str, list[dict[str, Any]]]:
    """Each live exporter pod -> its settled targets of `jobs`. Every pod the oracle names
    must be a live pod of the sim (no stale targets)."""
    per_pod = oracle.targets_per_pod(NS)
    live = {p["metadata"]["name"] for p in env.sim.store.list(kinds.POD, NS)[0]
            if not p["metadata"].get("deletionTimestamp")}
    assert set(per_pod) <= live, f"targets of pods that are gone: {set(per_pod) - live}"
    _, app, _ = _exporter(env)
    return {name: [t for t in per_pod.get(name, []) if t["job"] in jobs]
            for name in (p["metadata"]["name"] for p in env.pods(app))}


def _counts(per_pod: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    return {pod: len(targets) for pod, targets in per_pod.items()}


def _ip(env: E2E, pod: str) -> str:
    return str(env.sim.store.get(kinds.POD, NS, pod)["status"]["podIP"])


def _roll(env: E2E, api: client.ApiClient, body: Any, content_type: str) -> None:
    """Patch the exporter DaemonSet through the API and wait for the sim's rollout."""
    ds_name, app, _ = _exporter(env)
    with env.monitor.expected_outage():  # the test rolls the exporter on purpose
        client.AppsV1Api(api).patch_namespaced_daemon_set(
            ds_name, NS, body, _content_type=content_type)
        template = env.ds(ds_name)["spec"]["template"]
        want = template["metadata"].get("annotations") or {}
        ports = template["spec"]["containers"][0].get("ports")

        def rolled() -> bool:
            pods = env.pods(app)
            return bool(rollout_complete(env.ds(ds_name)).ok and len(pods) == env.sim.nodes
                        and all((p["metadata"].get("annotations") or {}) == want
                                and p["spec"]["containers"][0].get("ports") == ports
                                for p in pods))

        env.sim.wait_for(rolled, timeout=30)
        env.sim.wait_idle()


def test_seeded_exporter_pods_get_one_target_through_their_annotated_service(
        env: E2E, discovery_oracle: Callable[..., DiscoveryOracle]) -> None:
    # (a) the Service (`prometheus.io/scrape: "true"`, port gpu-metrics 9400 -> 9400) has one
    # Endpoints address per exporter pod; its port is the container's only port, so no
    # uncovered-port targets: exactly 1 target per pod, job kubernetes-service-endpoints.
    # The pods themselves carry no annotation: 0 targets through kubernetes-pods.
    oracle = discovery_oracle(env.sim)
    _, _, service = _exporter(env)
    assert _counts(_targets(oracle, env, POD_JOBS)) == dict.fromkeys(
        (p["metadata"]["name"] for p in env.pods(_exporter(env)[1])), 0)
    per_pod = _targets(oracle, env, SERVICE_JOBS)
    assert per_pod and all(
        [(t["job"], t["service"], t["instance"]) for t in targets]
        == [("kubernetes-service-endpoints", service, f"{_ip(env, pod)}:9400")]
        for pod, targets in per_pod.items()), per_pod


def test_pod_annotations_give_targets_through_kubernetes_pods(
        env: E2E, api: client.ApiClient,
        discovery_oracle: Callable[..., DiscoveryOracle]) -> None:
    oracle = discovery_oracle(env.sim)
    gpucluster = env.sim.stack == "gpucluster"

    def through_pods() -> dict[str, list[tuple[str, str, bool]]]:
        return {pod: sorted((t["instance"], t["container"], t["init"]) for t in targets)
                for pod, targets in _targets(oracle, env, POD_JOBS).items()}

    # seeded: no pod annotation, the chart's first `keep` drops every pod target.
    assert all(v == [] for v in through_pods().values())

    # (b) `prometheus.io/scrape: "true"` on the pod template: one target per container port,
    # plus (ClusterPolicy) the port-less init container `toolkit-validation`, scraped at the
    # bare pod IP, i.e. port 80: 1 target per pod (GPUCluster), 2 (ClusterPolicy).
    # Prometheus gives the same count; the init container's target is `instance="<ip>:80"` in
    # VM as in Prometheus 2, `instance="<ip>"` in Prometheus 3 (same URL). Prometheus
    # releases that listed regular containers only gave ClusterPolicy's pods 1.
    _roll(env, api, {"spec": {"template": {"metadata": {"annotations": {
        "prometheus.io/scrape": "true"}}}}}, MERGE)
    got = through_pods()
    for pod, targets in got.items():
        ip = _ip(env, pod)
        exporter = [(f"{ip}:9400", _exporter(env)[1], False)]
        init = [] if gpucluster else [(f"{ip}:80", "toolkit-validation", True)]
        assert targets == sorted(exporter + init), (pod, targets)
    assert {len(t) for t in got.values()} == ({1} if gpucluster else {2})

    # a second container port (9401) is one more target: 2 per pod (GPUCluster), 3 (ClusterPolicy)
    _roll(env, api, [{"op": "add", "path": "/spec/template/spec/containers/0/ports/-",
                      "value": {"name": "debug", "containerPort": 9401}}],
          "application/json-patch+json")
    assert {len(t) for t in through_pods().values()} == ({2} if gpucluster else {3})
    # ... and, through the annotated Service, the endpoints role's target for the container
    # port no endpoint port covers: 2 per pod, <ip>:9400 (the Service's) and <ip>:9401.
    assert all(sorted((t["service"], t["instance"]) for t in targets)
               == [(_exporter(env)[2], f"{_ip(env, pod)}:9400"),
                   (_exporter(env)[2], f"{_ip(env, pod)}:9401")]
               for pod, targets in _targets(oracle, env, SERVICE_JOBS).items())

    # (c) `prometheus.io/port: "9400"` rewrites every target's address to <pod IP>:9400; the
    # container and port meta labels go with relabeling, so the 2 or 3 targets of a pod end
    # with the same labels and URL: 1 target per pod (VM logs the others as duplicates).
    _roll(env, api, {"spec": {"template": {"metadata": {"annotations": {
        "prometheus.io/port": "9400"}}}}}, MERGE)
    got = through_pods()
    assert all(len(targets) == 1 and targets[0][0] == f"{_ip(env, pod)}:9400"
               for pod, targets in got.items()), got
    assert any("duplicate scrape target" in line for line in oracle.discovery_errors())


def test_a_second_annotated_service_gives_each_pod_a_second_target(
        env: E2E, api: client.ApiClient,
        discovery_oracle: Callable[..., DiscoveryOracle]) -> None:
    # (d) each annotated Service selecting the pods is its own Endpoints object, so its own
    # targets (they differ in the `service` label): 2 per pod. A second Service without the
    # annotation is dropped by the chart's first `keep`: it adds nothing.
    _, app, service = _exporter(env)
    core = client.CoreV1Api(api)
    for name, notes in (("dcgm-exporter-scraped-twice", {"prometheus.io/scrape": "true"}),
                              ("dcgm-exporter-unannotated", {})):
        core.create_namespaced_service(NS, client.V1Service(
            metadata=client.V1ObjectMeta(name=name, namespace=NS, annotations=notes),
            spec=client.V1ServiceSpec(selector={"app": app}, ports=[client.V1ServicePort(
                name="gpu-metrics", port=9400, target_port=9400, protocol="TCP")])))
    oracle = discovery_oracle(env.sim)
    per_pod = _targets(oracle, env, SERVICE_JOBS)
    assert per_pod and all(
        sorted((t["service"], t["instance"]) for t in targets)
        == sorted([(service, f"{_ip(env, pod)}:9400"),
                   ("dcgm-exporter-scraped-twice", f"{_ip(env, pod)}:9400")])
        for pod, targets in per_pod.items()), per_pod
