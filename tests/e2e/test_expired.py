"""410 Expired end to end (docs/architecture.md, "The simulated cluster"): on a busy cluster with a
tiny event window, list continue tokens expire between pages and watches expire before they start;
plan and apply must still finish (reads restart, waits relist) with the same result as on a quiet
cluster.

"Busy" is a thread writing an unrelated ConfigMap as fast as it can, as the rest of a real
cluster moves etcd's revision; the window (`watch_window`) is a few events, and the tool's page
size is 1 (`Kube(page_size=...)`), so nearly every paginated read spans several revisions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from dcgm_sim import writes
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator import commands
from migrator.commands import RunRequest, Session
from migrator.engine import informer
from migrator.engine.loop import RunSettings
from migrator.engine.waiting import Waiter
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model.gates import GateResult
from migrator.model.planning import Options
from migrator.model.stacks import load_catalog
from tests.e2e.conftest import E2E, NS

WINDOW = 3


@contextmanager
def _busy(store: Store) -> Iterator[list[int]]:
    """Keep writing an unrelated ConfigMap until the block ends; yields [writes so far]."""
    writes.create(store, kinds.NAMESPACE, {"metadata": {"name": "busy"}})
    writes.create(store, kinds.CONFIGMAP, {"metadata": {"name": "ticker"}}, namespace="busy")
    done = threading.Event()
    count = [0]

    def write() -> None:
        count[0] += 1
        writes.patch(store, kinds.CONFIGMAP, "application/merge-patch+json",
                     {"data": {"n": str(count[0])}}, namespace="busy", name="ticker")

    def tick() -> None:
        while not done.is_set():
            write()
            time.sleep(0.0005)

    # However the machine's load starves the thread above, the cluster is busy where it
    # matters: before the server checks a list's version, more than the window's worth of
    # writes land, so every continue token (and every list at an exact version) has expired.
    # The 410 paths are taken by construction, not by a race with the load.
    checked = store.expired

    def expired_after_writes(resource_version: int) -> bool:
        for _ in range(WINDOW + 1):
            write()
        return checked(resource_version)

    store.expired = expired_after_writes  # type: ignore[method-assign]  # patched for this one test

    worker = threading.Thread(target=tick, name="busy-cluster", daemon=True)
    worker.start()
    try:
        yield count
    finally:
        store.expired = checked  # type: ignore[method-assign]  # patched for this one test
        done.set()
        worker.join(5)


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy"])
def test_plan_and_apply_finish_while_continue_tokens_and_watches_expire(
        e2e_factory: Callable[..., E2E], stack: str) -> None:
    env = e2e_factory(stack, watch_window=WINDOW)
    kube = Kube.for_server(env.sim.url, ADMIN_TOKEN, page_size=1)
    session = Session(kube, NS)
    mark = env.mark()
    try:
        with _busy(env.sim.store) as ticks:
            plan = commands.plan(session, Options())
            result = commands.apply(session, RunRequest(
                phase=3, settings=RunSettings(timeout=120.0, settle=0.0)))
    finally:
        kube.close()
    assert ticks[0] > 100, "the cluster was not busy"
    assert plan.stack == stack
    assert result.result.writes > 0
    assert [p["status"] for p in env.state()["phases"]] == ["completed"] * 3
    log = env.sim.server.log.since(mark)
    expired_pages = [r for r in log if r.verb == "list" and r.code == 410
                     and "continue=" in r.query]
    assert expired_pages, "no continue token expired: the test did not test the 410 path"
    # Every expired read was restarted and ended in a complete list: the last try of a read is
    # one unpaginated list, which cannot expire.
    assert [r for r in log if r.verb == "list" and r.code == 410 and "continue=" not in r.query] \
        == []
    assert any(r.verb == "list" and r.code == 200 and "limit=" not in r.query
               and r.resource == "pods" for r in log)


def test_a_gate_wait_whose_watch_expires_lists_again_for_a_new_version() -> None:
    """With no event window at all, every watch the wait opens expires as soon as anything
    changes (an ERROR 410 in the stream): the wait must take a new resourceVersion from a fresh
    list each time, not retry the expired one."""
    store = Store(event_log_size=0)
    writes.create(store, kinds.NAMESPACE, {"metadata": {"name": NS}})
    checks: list[int] = []

    def check() -> list[GateResult]:
        checks.append(len(checks))
        return [GateResult("settled", len(checks) >= 4, "")]

    with ApiServer(store) as server, _busy(store):
        kube = Kube.for_server(server.url, ADMIN_TOKEN)
        try:
            waiter = Waiter(kube, NS, recheck_min=0.01, recheck_max=0.05)
            results = waiter.until(check, time.monotonic() + 30, wake_kind=kinds.CONFIGMAP)
        finally:
            kube.close()
        log = server.log.entries()
    assert [r.ok for r in results] == [True] and len(checks) == 4
    relists = [r for r in log if r.verb == "list" and r.resource == "configmaps"]
    watches = [r for r in log if r.verb == "watch" and r.resource == "configmaps"]
    assert len(watches) == 3 and len(relists) == 3, [(r.verb, r.query) for r in log]


def test_the_run_cache_lists_again_when_its_watch_expires(
        e2e_factory: Callable[..., E2E]) -> None:
    """A cache whose watch is cut while the cluster moves on cannot resume from its version
    (410 Expired, as client-go's reflector sees it): it lists the kind again and follows
    from there, so a change made while it was cut still reaches its readers."""
    env = e2e_factory("gpucluster", watch_window=WINDOW, operator_reconcile_seconds=None)
    kube = Kube.for_server(env.sim.url, ADMIN_TOKEN)
    try:
        with informer.opened(kube, NS, load_catalog()) as cache:
            services = cache.services
            name = services.items()[0]["metadata"]["name"]
            mark = env.mark()
            with _busy(env.sim.store) as ticks:
                while ticks[0] < 10 * WINDOW:  # the window moves past the cache's version
                    time.sleep(0.01)
                with services._cond:
                    stream = services._stream
                assert stream is not None
                stream.stop()  # a dropped connection: the reflector re-watches at once
                deadline = time.monotonic() + 10
                while services.relists == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
            assert services.relists >= 1, "the re-watch did not expire: nothing was tested"
            writes.patch(env.sim.store, kinds.SERVICE, "application/merge-patch+json",
                         {"metadata": {"annotations": {"test/after-410": "1"}}},
                         namespace=NS, name=name)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # no fence: only the watch can bring it
                live = next(s for s in services.items() if s["metadata"]["name"] == name)
                if (live["metadata"].get("annotations") or {}).get("test/after-410"):
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the cache did not follow the Service after relisting")
        log = env.sim.server.log.since(mark)
    finally:
        kube.close()
    assert [r for r in log if r.verb == "list" and r.resource == "services" and r.code == 200]
