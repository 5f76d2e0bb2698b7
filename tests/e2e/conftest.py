"""End-to-end fixtures: a simulated cluster, the CLI pointed at it, and the disruption monitor
running for the whole test (any sample outside the disruption budget, docs/design.md "Gates",
fails the test at teardown)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from dcgm_sim.access import ADMIN_USER
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.controllers.operatorqueue import NOT_READY_REQUEUE as REQUEUE_SECONDS
from migrator.model import kinds
from tests.helpers import cli, crash
from tests.helpers.disruption import DisruptionMonitor
from tests.helpers.oracle import DiscoveryOracle, OracleUnavailable

NS = "gpu-operator"
REAL_FLOOR = 30.0  # real seconds no `E2E.until` gives up before


@dataclass
class E2E:
    sim: SimCluster
    monitor: DisruptionMonitor

    def cli(self, *args: str) -> cli.Result:
        return cli.run(self.sim.kubeconfig, *args)

    def writes(self, since: int = 0) -> list[Any]:
        return list(self.sim.server.log.writes(since=since))

    def mark(self) -> int:
        entries = self.sim.server.log.entries()
        return entries[-1].seq if entries else 0

    def ds(self, name: str) -> dict[str, Any]:
        return self.sim.store.get(kinds.DAEMONSET, NS, name)

    def svc(self, name: str) -> dict[str, Any] | None:
        return self.sim.store.find(kinds.SERVICE, NS, name)

    def service(self, name: str) -> dict[str, Any]:
        """The Service `name`, which the test knows exists here."""
        svc = self.svc(name)
        assert svc is not None, f"Service/{name} does not exist"
        return svc

    def pods(self, app: str) -> list[dict[str, Any]]:
        items, _ = self.sim.store.list(kinds.POD, NS)
        return [p for p in items if (p["metadata"].get("labels") or {}).get("app") == app
                and not p["metadata"].get("deletionTimestamp")]

    def objects(self) -> dict[str, Any]:
        """DaemonSets and Services without what every write changes, to compare."""
        return crash.comparable(self.sim, NS, same_cluster=True)

    def state(self) -> dict[str, Any]:
        import json

        cm = self.sim.store.get(kinds.CONFIGMAP, NS, "dcgm-migrate-state")
        return dict(json.loads(cm["data"]["state.json"]))

    def phase_status(self, number: int) -> str:
        return str(next(p for p in self.state()["phases"] if p["number"] == number)["status"])

    def clusterpolicy_settled(self) -> None:
        """Wait until the ClusterPolicy reports Ready and its last 5-s requeue is behind it:
        from then on the released operator reconciles it again only on an event (of its CR,
        its DaemonSets, node labels) or its informers' resync
        (dcgm_sim/controllers/operatorqueue.py)."""
        def ready() -> bool:
            cr = self.sim.store.list(kinds.CLUSTER_POLICY)[0][0]
            return any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in (cr.get("status") or {}).get("conditions") or [])
        self.until(ready, 120, "ClusterPolicy Ready")
        began = self.sim.clock.now()
        self.until(lambda: self.sim.clock.now() - began > REQUEUE_SECONDS + 1, 60,
                   "its last requeue")

    def until(self, predicate: Callable[[], object], sim_seconds: float, what: str,
              detail: Callable[[], object] = str) -> float:
        """Poll until `predicate` holds; the simulated seconds it took. Fails once
        `sim_seconds` of the sim's own clock have passed, but never before REAL_FLOOR real
        seconds: the sim's clock is real time scaled, and what reacts (the guard, a thread of
        this process, and the CLI) runs on the real clock, which a loaded machine slows.
        `detail()` is added to the failure."""
        start, began = self.sim.clock.now(), time.monotonic()
        while not predicate():
            assert (self.sim.clock.now() - start < sim_seconds
                    or time.monotonic() - began < REAL_FLOOR), (
                f"{what}: not within {sim_seconds} s {detail()}")
            time.sleep(0.01)
        return self.sim.clock.now() - start


@pytest.fixture
def e2e_factory() -> Iterator[Callable[..., E2E]]:
    made: list[E2E] = []

    def make(stack: str = "gpucluster", nodes: int = 3, **kwargs: Any) -> E2E:
        kwargs.setdefault("time_scale", 0.02)
        # The operator reconciles on every real cluster: the suite runs with it on;
        # a test that needs a stationary cluster passes `operator_reconcile_seconds=None`.
        kwargs.setdefault("operator_reconcile_seconds", RESYNC_SECONDS)
        sim = SimCluster(nodes=nodes, stack=stack, **kwargs)
        sim.__enter__()
        env = E2E(sim, DisruptionMonitor(sim.store, NS).start())
        made.append(env)
        return env

    yield make
    for env in made:
        env.monitor.stop()
        env.sim.stop()
    for env in made:
        env.monitor.assert_within_budget()


@pytest.fixture(params=["gpucluster", "clusterpolicy"])
def e2e(request: pytest.FixtureRequest, e2e_factory: Callable[..., E2E]) -> E2E:
    return e2e_factory(request.param)


@pytest.fixture
def discovery_oracle() -> Iterator[Callable[..., DiscoveryOracle]]:
    """`discovery_oracle(sim)`: VictoriaMetrics' Kubernetes discovery with the Prometheus Helm
    chart's pod-reaching jobs (tests/helpers/oracle.py) and any `extra_jobs`, started on `sim`
    (its HTTPS listener when it has one) for `namespace`, and settled after `sim.wait_idle()`
    on every read;
    stopped at teardown. No binary: a skip locally, a failure under CI=true."""
    started: list[DiscoveryOracle] = []

    def start(sim: SimCluster, namespace: str = NS,
              extra_jobs: Sequence[dict[str, Any]] = ()) -> DiscoveryOracle:
        kubeconfig = sim.kubeconfig_for(ADMIN_USER) if sim.tls else sim.kubeconfig
        oracle = DiscoveryOracle(kubeconfig, [namespace], settle=sim.wait_idle,
                                 extra_jobs=list(extra_jobs))
        started.append(oracle)
        try:
            return oracle.start()
        except OracleUnavailable as exc:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{exc}; CI must have it", pytrace=False)
            pytest.skip(str(exc))

    yield start
    for oracle in started:
        oracle.stop()
