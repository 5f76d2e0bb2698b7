"""Reliability fixtures: fresh simulated clusters (stopped at teardown), each watched by the
disruption monitor for its whole life; a sample outside the disruption budget (docs/design.md,
"Gates") fails the test."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.engine.state import lock as locking
from migrator.model import kinds
from tests.helpers import crash, forkserver
from tests.helpers.disruption import DisruptionMonitor

NS = "gpu-operator"
STATE_CM = "dcgm-migrate-state"
FAST = 0.01  # real seconds per simulated second: a pod starts in 20 ms
APPLY = ("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
ROLLBACK = ("rollback", "--phase", "1", "--yes", "--settle", "0s", "-o", "json")


@dataclass
class Env:
    sim: SimCluster
    monitor: DisruptionMonitor | None

    @property
    def kubeconfig(self) -> str:
        return self.sim.kubeconfig

    def mark(self) -> int:
        return self.sim.server.log.last_seq

    def writes(self, since: int = 0) -> list[Any]:
        return list(self.sim.server.log.writes(since=since))

    def let_the_lock_expire(self) -> str | None:
        """A killed run's lock as a rerun meets it once the lease has run out (its TTL after the
        last renewal): the expiry moved into the past, the holder kept. Returns the holder (None:
        no lock, e.g. the run was killed after releasing it). Written to the store directly,
        so it is not one of the API writes the tests count."""
        cm = self.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM)
        annotations = (cm or {}).get("metadata", {}).get("annotations") or {}
        info = locking.read(annotations)
        if cm is None or info is None:
            return None
        cm = copy.deepcopy(cm)
        cm["metadata"]["annotations"][locking.EXPIRES] = locking.format_time(
            datetime.now(UTC) - timedelta(seconds=1))
        self.sim.store.update(kinds.CONFIGMAP, cm)
        return info.holder

    def finish(self) -> list[str]:
        """Stop the monitor; its violations (empty when the budget held)."""
        if self.monitor is None:
            return []
        self.monitor.stop()
        return list(self.monitor.violations)


@pytest.fixture
def fresh() -> Iterator[Callable[..., Env]]:
    """`fresh(stack="gpucluster", nodes=2, monitor=True, **SimCluster options)`."""
    made: list[Env] = []

    def make(stack: str = "gpucluster", nodes: int = 2, *, monitor: bool = True,
             **kwargs: Any) -> Env:
        kwargs.setdefault("time_scale", FAST)
        # These tests kill and resume the tool at every write; the fixtures' readiness probe
        # delays (15 s / 45 s per pod) would only multiply their run time. The e2e suite keeps
        # them on.
        kwargs.setdefault("readiness_probes", False)
        sim = SimCluster(nodes=nodes, stack=stack, **kwargs).start()
        env = Env(sim, DisruptionMonitor(sim.store, NS).start() if monitor else None)
        made.append(env)
        return env

    yield make
    for env in made:
        if env.monitor is not None:
            env.monitor.stop()
        env.sim.stop()
    for env in made:
        if env.monitor is not None:
            env.monitor.assert_within_budget()


@pytest.fixture
def fresh_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CLI subprocess of the test a plain `python -m migrator`, not a fork server's
    child: for the tests about how a process starts and ends (signals, a kill -9 taken over),
    which keep checking the real thing."""
    monkeypatch.setenv(forkserver.SWITCH, "0")


@dataclass(frozen=True)
class EndState:
    objects: dict[str, Any]
    state: dict[str, Any]
    writes: int


@pytest.fixture(scope="session")
def migrated() -> EndState:
    """The end state of an uninterrupted, fault-free `apply --phase 3` on a fresh cluster."""
    with SimCluster(nodes=2, stack="gpucluster", time_scale=FAST) as sim:
        done = crash.run(sim.kubeconfig, *APPLY)
        assert done.code == 0, done.stderr
        return EndState(crash.comparable(sim), crash.state_summary(sim),
                        len(sim.server.log.writes()))
