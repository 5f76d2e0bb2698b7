"""How often a migration reads the namespace (issue 7): once per gate check, no more, and the
pods (nearly all of a read) only when a write may have moved them.

A full read lists the DaemonSets once, so `list daemonsets` requests count the reads. The
runner's pre-write check reuses the read the previous step's gates just made (or the command's
own first read), but every write is followed by a fresh read before its gates can pass. A gate
check that fails waits on an EndpointSlice watch and then reads again, so between two writes
there is exactly one read per check: 1 + the EndpointSlice watches between them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from migrator import commands
from migrator.commands import RunRequest, Session
from migrator.engine.runner import REUSE_SECONDS, Runner, RunSettings
from migrator.engine.state import State
from migrator.kube.client import Kube
from migrator.model.stacks import load_catalog
from migrator.sim.requestlog import RequestRecord
from migrator.sim.server import ADMIN_TOKEN
from tests.e2e.conftest import E2E, NS
from tests.helpers.clock import FakeClock


def _is_read(r: RequestRecord) -> bool:
    return r.verb == "list" and r.resource == "daemonsets"


def _is_cluster_write(r: RequestRecord) -> bool:
    return r.is_write and r.resource != "configmaps"  # the state ConfigMap is not the cluster


def _is_pod_list(r: RequestRecord) -> bool:
    return r.verb == "list" and r.resource == "pods" and "continue=" not in r.query


def _is_recheck(r: RequestRecord) -> bool:
    return r.verb == "watch" and r.resource == "endpointslices"


def _intervals(records: list[RequestRecord]) -> list[list[RequestRecord]]:
    """The requests before the first cluster write, between each two, and after the last."""
    out: list[list[RequestRecord]] = [[]]
    for r in records:
        if _is_cluster_write(r):
            out.append([])
        else:
            out[-1].append(r)
    return out


def _apply(env: E2E, clock: FakeClock) -> dict[str, Any]:
    """`apply --phase 3` in process, on a clock that moves only by the waiter's sleeps: whether
    a read is reused depends on what the runner did, not on how busy the machine is."""
    kube = Kube.for_server(env.sim.url, ADMIN_TOKEN)
    try:
        return commands.apply(Session(kube, NS, clock=clock), RunRequest(
            phase=3, settings=RunSettings(timeout=60.0, settle=0.0)))
    finally:
        kube.close()


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy"])
def test_apply_reads_once_per_gate_check(e2e_factory: Callable[..., E2E], stack: str) -> None:
    env = e2e_factory(stack)
    mark = env.mark()
    clock = FakeClock()
    report = _apply(env, clock)
    records = env.sim.server.log.since(mark)
    writes = [r for r in records if _is_cluster_write(r)]
    assert len(writes) == report["result"]["writes"] > 0
    before, *after_writes = _intervals(records)
    # The command's own read is the runner's first view: one read before the first write.
    assert sum(map(_is_read, before)) == 1
    for write, interval in zip(writes, after_writes, strict=True):
        reads = sum(map(_is_read, interval))
        rechecks = sum(map(_is_recheck, interval))
        assert reads >= 1  # every write is followed by a fresh read before its gates pass
        assert reads == 1 + rechecks, [f"{r.verb} {r.resource}" for r in interval]
        pod_lists = sum(map(_is_pod_list, interval))
        if write.resource == "services":
            # A Service write moves no pod: its checks reuse the pods of the last read (the
            # fake clock moved less than REUSE_SECONDS since), and read the endpoints afresh.
            assert pod_lists == 0
        else:
            assert pod_lists >= 1  # after a rollout the pods are read again


def test_a_view_older_than_the_reuse_window_is_read_again(e2e: E2E) -> None:
    clock = FakeClock()
    kube = Kube.for_server(e2e.sim.url, ADMIN_TOKEN)
    runner = Runner(kube, NS, load_catalog(), State(NS), save=lambda _: None, clock=clock)
    first = runner.snapshot()
    sent = kube.request_count
    clock.advance(REUSE_SECONDS / 2)
    assert runner.recent_snapshot() is first and kube.request_count == sent
    clock.advance(REUSE_SECONDS)
    assert runner.recent_snapshot() is not first and kube.request_count > sent


def test_pods_are_reused_only_while_recent(e2e: E2E) -> None:
    clock = FakeClock()
    kube = Kube.for_server(e2e.sim.url, ADMIN_TOKEN)
    runner = Runner(kube, NS, load_catalog(), State(NS), save=lambda _: None, clock=clock)
    base = runner.snapshot()

    def pod_lists_during(read: Callable[[], object]) -> int:
        mark = e2e.mark()
        read()
        return sum(map(_is_pod_list, e2e.sim.server.log.since(mark)))

    clock.advance(REUSE_SECONDS / 2)
    assert pod_lists_during(lambda: runner._fresh(base, recent_pods=True)) == 0
    assert pod_lists_during(lambda: runner._fresh(base)) > 0  # a rollout's check: always
    clock.advance(REUSE_SECONDS * 2)
    assert pod_lists_during(lambda: runner._fresh(base, recent_pods=True)) > 0
