"""Pods read as printed rows (model/printed.py, engine/wholepods.py) against the simulated
cluster over HTTP: a healthy namespace costs rows only and gives the views whole pods give; the
pods of a node that stopped reporting (their rows still show ready containers) are read whole,
so the nodes-reporting gate still names the node; a run's cache reads a pod that stays sick
whole once, not once per gate check."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dcgm_sim.controllers import pods as P
from dcgm_sim.requestlog import RequestRecord
from dcgm_sim.server import ADMIN_TOKEN
from migrator.engine import informer, stalls
from migrator.engine.reads import read_snapshot
from migrator.kube.client import Kube
from migrator.model import gates as g
from migrator.model import kinds
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import load_catalog
from tests.e2e.conftest import E2E, NS

BAD = "gpu-node-0002"


def _comparable(view: PodView) -> tuple[Any, ...]:
    return (view.name, view.uid, view.node, dict(view.labels), view.ready, view.deleting,
            view.owner_kind, view.owner_name, view.node_lost, view.why)


def _store_views(env: E2E) -> dict[str, PodView]:
    items, _ = env.sim.store.list(kinds.POD, NS)
    return {p["metadata"]["uid"]: PodView.of(p) for p in items}


def _pod_lists(env: E2E, since: int) -> list[RequestRecord]:
    return [r for r in env.sim.server.log.since(since)
            if r.verb == "list" and r.resource == "pods"]


def _pod_gets(env: E2E, since: int) -> list[str]:
    return [r.name for r in env.sim.server.log.since(since)
            if r.verb == "get" and r.resource == "pods"]


def _whole(records: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in records if "includeObject=Metadata" not in r.query]


def _read(env: E2E) -> Iterator[tuple[Kube, Callable[[], Snapshot]]]:
    kube = Kube.for_server(env.sim.url, ADMIN_TOKEN)
    try:
        yield kube, lambda: read_snapshot(kube, NS, load_catalog())
    finally:
        kube.close()


def _with_lost_node(e2e_factory: Callable[..., E2E], stack: str, nodes: int) -> E2E:
    """A cluster whose node BAD stopped reporting, once its pods are marked not Ready and the
    EndpointSlices say so (the rows of those pods still show 1/1 Running)."""
    env = e2e_factory(stack, nodes=nodes, node_monitor_grace_seconds=5,
                      operator_reconcile_seconds=None)
    with env.monitor.expected_outage():
        env.sim.fail_node(BAD)
        env.sim.wait_for(lambda: (pods := [p for p in env.sim.store.list(kinds.POD, NS)[0]
                                           if P.node_name(p) == BAD])
                         and not any(P.is_pod_ready(p) for p in pods), timeout=20)
        env.sim.wait_idle()
    return env


def test_a_healthy_namespace_is_read_as_rows_that_give_the_whole_pods_views(
        e2e: E2E) -> None:
    mark = e2e.mark()
    for _, read in _read(e2e):
        snap = read()
    whole = _store_views(e2e)
    assert snap.pods and all(p.printed and p.ready for p in snap.pods)
    assert {p.uid: _comparable(p) for p in snap.pods} == {
        uid: _comparable(v) for uid, v in whole.items()}
    lists = _pod_lists(e2e, mark)
    assert lists and not _whole(lists), [r.query for r in lists]


def test_the_pods_of_a_node_that_stopped_reporting_are_read_whole(
        e2e_factory: Callable[..., E2E]) -> None:
    env = _with_lost_node(e2e_factory, "clusterpolicy", nodes=4)
    mark = env.mark()
    for _, read in _read(env):
        snap = read()
    on_bad = [p for p in snap.pods if p.node == BAD]
    assert on_bad and all(not p.printed and not p.ready and p.node_lost for p in on_bad)
    assert all(p.printed and p.ready for p in snap.pods if p.node != BAD)
    gate = g.nodes_reporting("nvidia-dcgm", snap.pods_of("nvidia-dcgm"))
    assert not gate.ok and BAD in gate.detail
    # Those pods are read by name; no pod list is whole.
    assert sorted(_pod_gets(env, mark)) == sorted(p.name for p in on_bad)
    assert not _whole(_pod_lists(env, mark))


def test_a_run_cache_reads_a_pod_that_stays_sick_whole_once(
        e2e_factory: Callable[..., E2E]) -> None:
    env = _with_lost_node(e2e_factory, "gpucluster", nodes=3)
    mark = env.mark()
    for kube, _ in _read(env):
        with informer.opened(kube, NS, load_catalog()) as cache:
            first, second = (read_snapshot(kube, NS, load_catalog(), cache=cache)
                             for _ in range(2))
            reads = cache.whole.reads
    assert [p for p in first.pods if p.node_lost] == [p for p in second.pods if p.node_lost]
    lost = sorted(p.name for p in first.pods if p.node_lost)
    assert lost and {p.node for p in first.pods if p.node_lost} == {BAD}
    assert sorted(_pod_gets(env, mark)) == lost, "a pod that stayed sick was read twice"
    assert reads == len(lost)


def test_a_stalled_rollouts_probe_names_the_lost_node_from_rows_and_one_get(
        e2e_factory: Callable[..., E2E]) -> None:
    env = _with_lost_node(e2e_factory, "clusterpolicy", nodes=4)
    mark = env.mark()
    for kube, _ in _read(env):
        detail = stalls.lost_nodes_detail(kube, NS, env.ds("nvidia-dcgm"))
    assert BAD in detail and "not reporting" in detail, detail
    assert not _whole(_pod_lists(env, mark))
    on_bad = [p["metadata"]["name"] for p in env.pods("nvidia-dcgm") if P.node_name(p) == BAD]
    assert _pod_gets(env, mark) == on_bad and len(on_bad) == 1  # only its pod there, by name
