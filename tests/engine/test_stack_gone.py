"""change-stack's `await-gone` step against the simulated cluster over HTTP: while the old CR is
being deleted it keeps the stable Services out of its reach on every poll, reading each Service
once a poll (it had read each twice: once to see whether it was garbage-collected, once to keep
it), and past --timeout it names the finalizer that holds the CR."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.engine.progress import Listener
from migrator.engine.stackchange import ACTIONS, StackRun
from migrator.engine.state.document import State
from migrator.errors import GateFailed
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model import stackchange as sc
from migrator.model.stacks import load_catalog
from tests.conftest import edit_cr
from tests.helpers.clock import FakeClock

NS = "gpu-operator"
CR = "gpu-cluster-policy"
HOLD = "example.com/hold"
STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")


def test_each_stable_service_is_read_once_a_poll_while_the_old_cr_goes(
        make_sim: Callable[..., SimCluster]) -> None:
    sim = make_sim(nodes=2, stack="clusterpolicy")
    edit_cr(sim.store, kinds.CLUSTER_POLICY,
            lambda cp: cp["metadata"].__setitem__("finalizers", [HOLD]))
    sim.store.delete(kinds.CLUSTER_POLICY, None, CR)  # marked; the finalizer holds it
    catalog = load_catalog()
    run = StackRun(Kube.connect(sim.kubeconfig), NS, catalog, FakeClock(), Listener(),
                   State(NS, stack_change={"to": "gpucluster", "steps": {}}),
                   lambda _, later=False: None, timeout=5.0)
    mark = sim.server.log.last_seq
    with pytest.raises(GateFailed, match=f"its finalizers hold it \\({HOLD}\\)"):
        ACTIONS[sc.GONE](run, sc.StackStep(sc.GONE, "ClusterPolicy", CR))
    polls = sim.server.log.find(mark, verb="list", resource="clusterpolicies")
    assert len(polls) > 5
    for name in STABLE:
        reads = sim.server.log.find(mark, verb="get", resource="services", name=name)
        assert len(reads) == len(polls) - 1, name  # the last read of the CR names its holder
        kept = sim.store.get(kinds.SERVICE, NS, name)
        assert not any(r.get("kind") == "ClusterPolicy"
                       for r in kept["metadata"].get("ownerReferences") or [])
