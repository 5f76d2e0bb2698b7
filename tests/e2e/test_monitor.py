"""The disruption monitor every end-to-end and reliability test runs under
(tests/helpers/disruption.py) catches what it is there for: a ready endpoint lost outside a
rollout is a violation, sampled at the commit that lost it, not by its periodic poll."""

from __future__ import annotations

from collections.abc import Callable

from dcgm_sim.cluster import SimCluster
from migrator.model import kinds
from tests.helpers.disruption import DisruptionMonitor

NS = "gpu-operator"
SERVICE = "nvidia-dcgm-exporter-dra"


def _ready(sim: SimCluster) -> int:
    slices, _ = sim.store.list(kinds.ENDPOINTSLICE, NS)
    return sum(1 for sl in slices
               if sl["metadata"]["labels"].get("kubernetes.io/service-name") == SERVICE
               for ep in sl.get("endpoints") or [] if ep["conditions"].get("ready"))


def test_a_lost_ready_endpoint_is_a_violation_seen_at_its_commit(
        make_sim: Callable[..., SimCluster]) -> None:
    sim = make_sim(nodes=2, stack="gpucluster", readiness_probes=False)
    sim.wait_for(lambda: _ready(sim) == 2, 30)
    monitor = DisruptionMonitor(sim.store, NS, interval=3600.0).start()  # no periodic sample
    try:
        with sim.clock.held():  # the DaemonSet's new pod cannot turn Ready meanwhile
            pods, _ = sim.store.list(kinds.POD, NS)
            victim = next(p for p in pods if p["metadata"]["name"].startswith(f"{SERVICE}-"))
            sim.store.delete(kinds.POD, NS, victim["metadata"]["name"])
            sim.wait_for(lambda: monitor.violations, 10)
    finally:
        monitor.stop()
    assert monitor.violations[0].startswith(f"Service/{SERVICE}: "), monitor.violations
    assert monitor.lowest[SERVICE] == (1, 2), monitor.lowest
