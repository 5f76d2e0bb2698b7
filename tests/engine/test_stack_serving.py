"""change-stack's `await-serving` step against the simulated cluster over HTTP: every node is
served again only when the *new* stack's pods serve it. The old stack's pods outlive its CR for
a while (the garbage collector reaches them in its own time) and stay Ready behind the stable
names meanwhile; counting them let a change run the new stack's phases before its DaemonSets
existed. Here the ClusterPolicy stack serves every node: waiting for it as the new stack ends at
once, waiting for the GPUCluster stack runs out of time, having listed the pods once: the old
pods are judged once, not on every poll; the slices are watched, not listed on every poll."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.engine.gaps import GapMeter
from migrator.engine.progress import Listener
from migrator.engine.stackchange import ACTIONS, POLL_SECONDS, StackRun
from migrator.engine.state import ConfigMapStateStore, RunSession
from migrator.engine.state.document import State
from migrator.engine.state.store import LOCK_TTL_SECONDS
from migrator.errors import GateFailed
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model import stackchange as sc
from migrator.model.stacks import load_catalog, pod_selectors
from tests.helpers.clock import FakeClock

NS = "gpu-operator"
NODES = 3


@contextlib.contextmanager
def _run(sim: SimCluster, to: str, timeout: float = 5.0
         ) -> Iterator[tuple[StackRun, sc.StackStep]]:
    """The `await-serving` step of a change to `to`, under a run lock on the sim's state
    ConfigMap (its saves and heartbeat the run's), on a fake clock."""
    catalog, clock = load_catalog(), FakeClock()
    kube = Kube.connect(sim.kubeconfig)
    state = State(NS, stack_change={"to": to, "steps": {}})
    store = ConfigMapStateStore(kube, NS, catalog.common, clock)
    with RunSession(store, version=None, holder="test@host pid 1", clock=clock,
                    listener=Listener()) as held, \
            GapMeter.watching(kube, NS, sc.stable_names(catalog), clock) as meter:
        yield (StackRun(kube, NS, catalog, clock, Listener(), state, held.save,
                        heartbeat=held.heartbeat, timeout=timeout, meter=meter),
               sc.StackStep(sc.SERVING, catalog.stack(to).cr.kind, "the-new-cr"))


def _every_node_served(sim: SimCluster) -> bool:
    slices, _ = sim.store.list(kinds.ENDPOINTSLICE, NS)
    return all(len({ep["nodeName"] for sl in slices
                    if sl["metadata"]["labels"].get("kubernetes.io/service-name") == name
                    for ep in sl.get("endpoints") or [] if ep["conditions"].get("ready")}) == NODES
               for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"))


@pytest.fixture
def clusterpolicy(make_sim: Callable[..., SimCluster]) -> SimCluster:
    sim = make_sim(nodes=NODES, stack="clusterpolicy")
    sim.wait_for(lambda: _every_node_served(sim), 60)
    return sim


def test_the_new_stacks_pods_serving_every_node_end_the_wait(clusterpolicy: SimCluster) -> None:
    with _run(clusterpolicy, "clusterpolicy") as (run, step):
        assert run.meter is not None
        run.meter.sample()
        began = run.clock.monotonic()
        ACTIONS[step.action](run, step)
        assert run.clock.monotonic() == began  # no poll was needed
        assert run.meter.nodes == {name: {f"gpu-node-{i:04d}" for i in range(1, NODES + 1)}
                                   for name in ("nvidia-dcgm", "nvidia-dcgm-exporter")}


def test_the_old_stacks_pods_still_ready_do_not_end_the_wait(clusterpolicy: SimCluster) -> None:
    """...and the wait reads the slices from its watch and the pods once, not on every poll."""
    with _run(clusterpolicy, "gpucluster") as (run, step):
        assert run.meter is not None
        run.meter.sample()
        mark, began = clusterpolicy.server.log.last_seq, run.clock.monotonic()
        with pytest.raises(GateFailed, match="every node served again by the stable names: "
                                             "not within 5 s"):
            ACTIONS[step.action](run, step)
        assert run.clock.monotonic() - began > 5  # it polled all along
        assert run.meter.all_served()  # every node had a Ready endpoint all along: old pods'
    log = clusterpolicy.server.log
    assert log.find(mark, verb="list", resource="endpointslices") == []  # watched
    assert len(log.find(mark, verb="list", resource="pods")) == len(_selectors("gpucluster"))


def _selectors(stack: str) -> list[str]:
    return pod_selectors(load_catalog().stack(stack).components)


def test_a_wait_longer_than_the_lock_ttl_keeps_the_run_lock_renewed(
        clusterpolicy: SimCluster) -> None:
    """At scale a change waits minutes (the new stack's pods on every node, a GPUCluster's
    finalizer while its operator drains): its lock is renewed meanwhile, as during a phase's
    waits, or another run would find it expired, take it over, and both would write."""
    with _run(clusterpolicy, "gpucluster", timeout=LOCK_TTL_SECONDS + 10) as (run, step):
        with pytest.raises(GateFailed, match="not within 130 s"):
            ACTIONS[step.action](run, step)
        now = run.clock.now()
        info = ConfigMapStateStore(run.kube, NS, run.catalog.common, run.clock).lock_info()
        assert info is not None and info.renewed is not None, info
        assert info.live(now), info  # never expired: renewed on the way
        assert (now - info.renewed).total_seconds() <= LOCK_TTL_SECONDS / 4 + POLL_SECONDS
