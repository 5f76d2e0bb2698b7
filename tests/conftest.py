"""Project-wide fixtures: a running simulated GPU cluster (`sim`) and a factory (`make_sim`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from migrator.sim.cluster import SimCluster


@pytest.fixture
def make_sim() -> Iterator[Callable[..., SimCluster]]:
    """`make_sim(nodes=5, stack="clusterpolicy", ...)`: started `SimCluster`s (any
    constructor argument; time_scale defaults to 0.02), all stopped at teardown."""
    made: list[SimCluster] = []

    def make(**kwargs: Any) -> SimCluster:
        kwargs.setdefault("time_scale", 0.02)
        sim = SimCluster(**kwargs)
        made.append(sim)
        return sim.start()

    yield make
    for sim in reversed(made):
        sim.stop()


@pytest.fixture
def sim(make_sim: Callable[..., SimCluster]) -> SimCluster:
    """A 3-node GPUCluster-stack simulated cluster, stopped after the test."""
    return make_sim(nodes=3, stack="gpucluster")
