"""The guard's verdict in its loop (engine/guard.py): it reads the namespace whole once, then
judges again only when an event shows something the verdict reads changed — here a node
stopping reporting, whose pods the node lifecycle controller marks not Ready — and logs the new
verdict naming the node. A quiet cluster is not judged again (docs/performance.md, "Guard with
both stacks": the whole read is nearly all of the guard's steady-state bytes). With default
settings the `dcgm_migrate_verdict_ok` gauge follows a node failure within seconds of the API
server showing it: the verdict is taken from the guard's caches after each change."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from migrator.engine.guard import Guard, GuardSettings
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model.outcome import Verdict
from migrator.model.stacks import load_catalog
from tests.e2e.conftest import E2E, NS
from tests.helpers.clock import SeenClock

VERDICT_SECONDS = 0.5  # real seconds: the guard runs on the real clock


def _counted(guard: Guard) -> list[Verdict]:
    """Every verdict the loop takes, in order (the reconciler's own method, counted)."""
    taken: list[Verdict] = []
    judge = guard.verdict

    def counting(*, cached: bool = False) -> Verdict:
        verdict = judge(cached=cached)
        taken.append(verdict)
        return verdict

    guard.verdict = counting  # type: ignore[method-assign]  # counted here only
    return taken


def _until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)
    return predicate()


def test_the_guard_judges_again_only_when_what_it_reads_changed(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", nodes=3)
    kube = Kube.connect(env.sim.kubeconfig)
    log: list[str] = []
    settings = GuardSettings(identity="guard-a", retry_seconds=0.2,
                             min_pass_seconds=0.05, verdict_seconds=VERDICT_SECONDS)
    clock = SeenClock()  # the guard's own clock: the waits below are spans it lived through
    guard = Guard(kube, NS, load_catalog(), settings, log=log.append, clock=clock)
    taken = _counted(guard)
    stop = threading.Event()
    thread = threading.Thread(target=guard.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert _until(lambda: len(taken) >= 1, 15), log
        # The start's own lists count as changes: the second verdict comes one period later.
        assert _until(lambda: len(taken) >= 2, 15), log
        env.sim.wait_idle()
        assert clock.lived_through(2 * VERDICT_SECONDS)
        settled = len(taken)
        # Ten verdict periods of a quiet cluster, as the guard's loop itself lived them.
        assert clock.lived_through(10 * VERDICT_SECONDS)
        assert len(taken) == settled, f"a quiet cluster was judged again: {log}"
        node = sorted(p["spec"]["nodeName"] for p in env.pods("nvidia-dcgm-dra"))[0]
        with env.monitor.expected_outage():
            env.sim.fail_node(node)
            assert _until(lambda: any(node in line for line in log
                                      if line.startswith("verdict:")), 30), log
            assert len(taken) > settled
            env.sim.heal_node(node)
            assert _until(lambda: taken[-1].summary() == taken[0].summary(), 30), log
    finally:
        stop.set()
        thread.join(10)
        kube.close()


def _api_shows_failure(kube: Kube, node: str) -> bool:
    """Does the API server show the node's DCGM endpoint not ready (what the node lifecycle
    controller's `MarkPodsNotReady` leads to)?"""
    for sl in kube.list(kinds.ENDPOINTSLICE, NS,
                        label_selector="kubernetes.io/service-name=nvidia-dcgm").items:
        for ep in sl.get("endpoints") or ():
            if ep.get("nodeName") == node and not (ep.get("conditions") or {}).get("ready"):
                return True
    return False


def test_the_verdict_gauge_drops_within_seconds_of_a_node_failure(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", nodes=3)
    applied = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert applied.code == 0, applied.stdout + applied.stderr
    kube = Kube.connect(env.sim.kubeconfig)
    guard = Guard(kube, NS, load_catalog(), GuardSettings(identity="guard-a"))  # defaults
    registry = guard.metrics.registry
    stop = threading.Event()
    thread = threading.Thread(target=guard.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert _until(lambda: registry.get_sample_value("dcgm_migrate_verdict_ok") == 1, 30)
        env.sim.wait_idle()
        node = sorted(p["spec"]["nodeName"] for p in env.pods("nvidia-dcgm-dra"))[0]
        with env.monitor.expected_outage():
            env.sim.fail_node(node)
            assert _until(lambda: _api_shows_failure(kube, node), 60)
            shown = time.monotonic()
            # the whole read's cadence (300 s) is far off: only the cached verdict can do it
            assert _until(lambda: registry.get_sample_value("dcgm_migrate_verdict_ok") == 0,
                          10)
            print(f"gauge dropped {time.monotonic() - shown:.2f} s after the API showed it")
            judged = guard.metrics.status.verdict
            assert judged is not None and any(node in f.detail for f in judged.findings
                                              if not f.ok), judged
            env.sim.heal_node(node)
            assert _until(lambda: registry.get_sample_value("dcgm_migrate_verdict_ok") == 1,
                          60)
    finally:
        stop.set()
        thread.join(10)
        kube.close()
