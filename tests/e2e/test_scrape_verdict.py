"""The tool's per-pod scrape-target count equals a real discovery's (VictoriaMetrics' Kubernetes
discovery with the prometheus chart's default jobs), in adversarial setups and through a whole
migration on each stack, and `verify` is red exactly when that oracle sees a duplicate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from migrator.engine.reads import read_snapshot
from migrator.kube.client import Kube
from migrator.model import kinds, monitoring
from migrator.model.gates import rollout_complete
from migrator.model.stacks import load_catalog
from tests.conftest import edit_object
from tests.e2e.conftest import E2E, NS
from tests.helpers.oracle import DiscoveryOracle

pytestmark = pytest.mark.timeout(170)

EXPORTER = {"gpucluster": "nvidia-dcgm-exporter-dra", "clusterpolicy": "nvidia-dcgm-exporter"}
CAT = load_catalog()


@pytest.fixture(params=sorted(EXPORTER))
def env(request: pytest.FixtureRequest, e2e_factory: Callable[..., E2E]) -> E2E:
    # tls: the oracle reads over HTTPS; no operator imitation: it would re-render the exporter
    # DaemonSet and take the test's pod-template annotations away.
    return e2e_factory(request.param, nodes=3, tls=True, operator_reconcile_seconds=None)


def _tool(env: E2E) -> dict[str, int]:
    """What verify counts: annotation-discovery targets per live exporter pod."""
    kube = Kube.connect(env.sim.kubeconfig, None)
    try:
        snap = read_snapshot(kube, NS, CAT)
    finally:
        kube.close()
    paths = monitoring.scrape_paths(snap, [EXPORTER[env.sim.stack]])
    return {pod: sum(1 for p in found if p.mechanism == monitoring.ANNOTATION)
            for pod, found in paths.items()}


def _oracle(oracle: DiscoveryOracle, env: E2E) -> dict[str, int]:
    per_pod = oracle.targets_per_pod(NS)
    names = [p["metadata"]["name"] for p in env.pods(EXPORTER[env.sim.stack])]
    return {name: len(per_pod.get(name, [])) for name in names}


def _agree(oracle: DiscoveryOracle, env: E2E, expected: int) -> None:
    env.sim.wait_idle()
    tool, seen = _tool(env), _oracle(oracle, env)
    assert tool == seen, f"tool {tool} != oracle {seen}"
    assert set(seen.values()) == {expected}, seen


def _template(env: E2E, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the exporter's pod template and wait until every pod runs it."""
    name = EXPORTER[env.sim.stack]
    with env.monitor.rolling():
        edit_object(env.sim.store, kinds.DAEMONSET, NS, name,
                    lambda ds: change(ds["spec"]["template"]))
        env.sim.wait_for(lambda: rollout_complete(env.ds(name)).ok and env.ds(name)["status"].get(
            "observedGeneration") == env.ds(name)["metadata"]["generation"], 60)


def _annotate_pods(**annotations: str) -> Callable[[dict[str, Any]], None]:
    def change(template: dict[str, Any]) -> None:
        template["metadata"].setdefault("annotations", {}).update(annotations)
    return change


def _second_service(env: E2E, name: str, annotations: dict[str, str],
                    ports: list[dict[str, Any]]) -> None:
    app = EXPORTER[env.sim.stack]
    env.sim.store.create(kinds.SERVICE, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"selector": {"app": app}, "ports": ports}})


def test_the_tools_count_equals_the_oracles_in_adversarial_setups(
        env: E2E, discovery_oracle: Callable[..., DiscoveryOracle]) -> None:
    oracle = discovery_oracle(env.sim)
    init = 1 if env.sim.stack == "clusterpolicy" else 0  # its exporter has a port-less init
    _agree(oracle, env, 1)  # the operator's annotated Service

    # A pod annotation: the kubernetes-pods job adds the container port, and a port-free
    # target per container without ports (the ClusterPolicy exporter's init container).
    _template(env, _annotate_pods(**{"prometheus.io/scrape": "true"}))
    _agree(oracle, env, 2 + init)
    bad = env.cli("verify", "-o", "json")
    assert bad.code == 1 and not next(c for c in bad.json()["verdict"]["checks"]
                                      if c["name"] == "scrape-once/exporters")["ok"]

    # prometheus.io/port collapses the pod job's targets into one.
    _template(env, _annotate_pods(**{"prometheus.io/port": "9400"}))
    _agree(oracle, env, 2)

    # A second annotated Service with two ports: one target per port (no port annotation) ...
    _second_service(env, "exporter-two-ports", {"prometheus.io/scrape": "true"}, [
        {"name": "a", "port": 9400, "targetPort": 9400},
        {"name": "b", "port": 9500, "targetPort": "metrics"}])  # named: resolves to 9400
    _agree(oracle, env, 3)
    # ... and a slow one with a port annotation and a port that names nothing: one target.
    _second_service(env, "exporter-slow", {"prometheus.io/scrape_slow": "true",
                                           "prometheus.io/port": "9400"}, [
        {"name": "x", "port": 9401, "targetPort": 9401},
        {"name": "y", "port": 9402, "targetPort": "no-such-port"}])
    _agree(oracle, env, 4)
    # A Service without the annotation adds nothing.
    _second_service(env, "exporter-plain", {}, [{"name": "m", "port": 9400}])
    _agree(oracle, env, 4)


def test_every_exporter_pod_has_one_target_through_a_whole_migration(
        env: E2E, discovery_oracle: Callable[..., DiscoveryOracle]) -> None:
    oracle = discovery_oracle(env.sim)
    _agree(oracle, env, 1)
    for phase in ("1", "2", "3"):
        res = env.cli("apply", "--phase", phase, "--yes", "--settle", "0s")
        assert res.code == 0, res.stderr
        _agree(oracle, env, 1)
    verdict = env.cli("verify", "-o", "json")
    assert verdict.code == 0, verdict.stdout
    for phase in ("3", "1"):
        res = env.cli("rollback", "--phase", phase, "--yes", "--settle", "0s")
        assert res.code == 0, res.stderr
        _agree(oracle, env, 1)
