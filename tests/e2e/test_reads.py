"""How often a migration reads the namespace (docs/performance.md, "API load per apply"):
`apply` lists each cached kind once, its gates read the run's cache (engine/informer.py), and
the only lists after the first are the ones a DaemonSet rollout's quiet period asks for (that
DaemonSet's pods, the DaemonSets, the EndpointSlices) — never one per gate check.

Before the cache, every gate check listed the DaemonSets, the Services, the EndpointSlices
and (unless reused) the pods: these pins count the list requests in the server's request log,
with a fake clock so nothing depends on how busy the machine is.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dcgm_sim import writes
from dcgm_sim.requestlog import RequestRecord
from dcgm_sim.server import ADMIN_TOKEN
from dcgm_sim.watching import IDLE_SECONDS
from migrator import commands
from migrator.commands import RunRequest, Session
from migrator.engine import informer
from migrator.engine.loop import RunSettings
from migrator.engine.reports import RunReport
from migrator.errors import UsageError
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.planning import Options
from migrator.model.stacks import load_catalog
from tests.e2e.conftest import E2E, NS
from tests.helpers.clock import FakeClock

CACHED = ("daemonsets", "services", "endpointslices", "pods")


def _first_pages(records: list[RequestRecord]) -> Counter[tuple[str, str]]:
    """List requests of the cached kinds (a read's first page), by (resource, selector);
    not the waiter's one-item lists for a version to watch from (`limit=1`), which read no
    namespace, nor its reads of the one DaemonSet it follows (a list by name)."""
    out: Counter[tuple[str, str]] = Counter()
    for r in records:
        params = r.query.split("&")
        if (r.verb == "list" and r.resource in CACHED and "limit=1" not in params
                and not any(p.startswith(("continue=", "fieldSelector=metadata.name"))
                            for p in params)):
            selector = next((p.partition("=")[2] for p in r.query.split("&")
                             if p.startswith("labelSelector=")), "")
            out[(r.resource, selector)] += 1
    return out


def _open_watches(env: E2E) -> list[RequestRecord]:
    return [r for r in env.sim.server.log.entries() if r.verb == "watch" and r.open]


def _informer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("informer-")]


def _apply(env: E2E, clock: FakeClock) -> RunReport:
    kube = Kube.for_server(env.sim.url, ADMIN_TOKEN)
    try:
        return commands.apply(Session(kube, NS, clock=clock), RunRequest(
            phase=3, settings=RunSettings(timeout=60.0, settle=0.0,
                                          options=Options(rolling=True))))
    finally:
        kube.close()


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy"])
def test_apply_lists_each_kind_once_and_again_only_after_a_rollout(
        e2e_factory: Callable[..., E2E], stack: str) -> None:
    env = e2e_factory(stack)  # the rolling path (phase 1 in place rolls nothing)
    mark = env.mark()
    report = _apply(env, FakeClock())
    records = env.sim.server.log.since(mark)
    assert report.result.writes > 0
    rollouts = [r for r in records if r.is_write and r.resource == "daemonsets"]
    assert rollouts, "phase 1 rolled no DaemonSet: the test tests nothing"
    lists = _first_pages(records)
    # One list per kind for the whole run, however many gate checks it made; a rollout's
    # quiet period lists the DaemonSets and EndpointSlices once more when it ends.
    assert lists[("services", "")] == 1
    assert lists[("daemonsets", "")] == 1 + len(rollouts)
    assert lists[("endpointslices", "")] == 1 + len(rollouts)
    pod_lists = {sel: n for (res, sel), n in lists.items() if res == "pods"}
    selectors = informer.pod_selectors(load_catalog())
    assert len(pod_lists) == len(selectors)
    # Each pod selector is listed once, plus once per rollout of its own DaemonSet.
    assert sum(pod_lists.values()) == len(selectors) + len(rollouts)
    # Pods are listed and watched as printed rows with their metadata (a sixth of the bytes);
    # a healthy run reads none of them whole (engine/wholepods.py).
    pod_reads = [r for r in records if r.resource == "pods" and r.verb in ("list", "watch")]
    assert pod_reads and all("includeObject=Metadata" in r.query for r in pod_reads)
    assert not [r for r in records if r.code == 410], "no expiry here: no relist either"
    assert not _informer_threads(), "the run's watch threads outlived it"
    # Each rollout is followed by its DaemonSet's printed rows (no object): a status change
    # costs its counts, not the whole DaemonSet; completion is confirmed by a read of that
    # DaemonSet alone (a list by name, whose version the next watch starts from).
    followed = [r for r in records if r.verb == "watch" and r.resource == "daemonsets"
                and "fieldSelector=metadata.name" in r.query]
    assert {r.query.count("includeObject=None") for r in followed} == {1}
    read_alone = {p.partition("%3D")[2] or p.partition("=")[2].partition("=")[2]
                  for r in records if r.verb == "list" and r.resource == "daemonsets"
                  for p in r.query.split("&") if p.startswith("fieldSelector=metadata.name")}
    assert read_alone == {r.name for r in rollouts}


def test_no_cache_outlives_its_run_even_when_the_run_fails(e2e: E2E) -> None:
    kube = Kube.for_server(e2e.sim.url, ADMIN_TOKEN)
    session = Session(kube, NS, clock=FakeClock())
    try:
        with pytest.raises(UsageError, match="never applied"):
            commands.rollback(session, RunRequest(phase=1))  # nothing applied: bad input
        commands.apply(session, RunRequest(phase=1, settings=RunSettings(timeout=60.0,
                                                                         settle=0.0)))
    finally:
        kube.close()
    assert not _informer_threads()
    # The server notices a closed stream at its next idle check (IDLE_SECONDS).
    deadline = time.monotonic() + 10 * IDLE_SECONDS
    while time.monotonic() < deadline and _open_watches(e2e):
        time.sleep(0.05)
    assert [r for r in e2e.sim.server.log.entries() if r.verb == "watch"]
    assert not _open_watches(e2e), "a watch stream was left open"


@contextlib.contextmanager
def _held_back(reflector: informer.Reflector[Any]) -> Iterator[threading.Event]:
    """The reflector's stream delivers nothing until the yielded event is set."""
    hold = threading.Event()
    original = reflector._apply

    def held(etype: str, obj: dict[str, Any]) -> None:
        hold.wait(10)
        original(etype, obj)

    reflector._apply = held  # type: ignore[method-assign]  # patched for this one test
    try:
        yield hold
    finally:
        hold.set()


def _read_waits(reflector: informer.Reflector[Any], hold: threading.Event,
                name: str) -> dict[str, Any]:
    """Read while the stream is held back: the read must block until it is released."""
    seen: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: seen.extend(reflector.items()))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive() and not seen, "the read answered from the older cache"
    hold.set()
    reader.join(10)
    return next(s for s in seen if s["metadata"]["name"] == name)


def _version(obj: dict[str, Any]) -> int:
    return o.int_version(obj["metadata"]["resourceVersion"])


def test_a_write_is_seen_by_the_next_read_even_before_its_event_arrives(e2e: E2E) -> None:
    """Read your writes: with the Service stream held back, a read after the tool's own write
    waits for the write's version instead of answering from the older cache."""
    kube = Kube.for_server(e2e.sim.url, ADMIN_TOKEN)
    try:
        with informer.opened(kube, NS, load_catalog()) as cache:
            name = cache.services.items()[0]["metadata"]["name"]
            with _held_back(cache.services) as hold:
                written = kube.patch(kinds.SERVICE, name, NS,
                                     {"metadata": {"annotations": {"test/ryw": "1"}}})
                mine = _read_waits(cache.services, hold, name)
            # The write itself, or newer (the operator may already have reconciled it).
            assert _version(mine) >= _version(written)
            assert cache.relists == 0  # the watch delivered it: no list was needed
    finally:
        kube.close()


def test_a_gate_woken_by_an_endpointslice_event_reads_that_event(e2e: E2E) -> None:
    """The endpoint-loss gate is woken by the waiter's own EndpointSlice watch: the cache's
    view must include the event that woke it, even if the cache's stream is behind."""
    kube = Kube.for_server(e2e.sim.url, ADMIN_TOKEN)
    try:
        with informer.opened(kube, NS, load_catalog()) as cache:
            rv = str(cache.endpointslices.rv)
            name = cache.endpointslices.items()[0]["metadata"]["name"]
            with _held_back(cache.endpointslices) as hold:
                writes.patch(e2e.sim.store, kinds.ENDPOINTSLICE,
                             "application/merge-patch+json",
                             {"metadata": {"annotations": {"test/woke": "1"}}},
                             namespace=NS, name=name)
                stream = kube.watch(kinds.ENDPOINTSLICE, NS, resource_version=rv,
                                    timeout_seconds=5)
                _, woke = next(iter(stream))
                stream.stop()
                mine = _read_waits(cache.endpointslices, hold, name)
            assert _version(mine) >= _version(woke)
    finally:
        kube.close()
