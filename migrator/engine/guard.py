"""`dcgm-migrate guard`, composed as controller-runtime's `Manager`: informer caches, leader
election on its own thread (whose fence closes the writers), the reconciler, the loop, and
metrics and probes on one port (docs/architecture.md, "engine/guard").
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock
from migrator.engine.guardloop import VERDICT, WAKE, Cadence, Queued, timing, verdict_due
from migrator.engine.guardreconcile import GuardSettings, PassResult, Reconciler, slice_view
from migrator.engine.informer import Informer, Reflector, pod_selectors, whole
from migrator.engine.leader import LeaderElector
from migrator.engine.serving import Health, MetricsServer
from migrator.engine.wholepods import WholePods
from migrator.errors import APIError, ClusterError
from migrator.model import kinds
from migrator.model.snapshot import PodView
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
Log = Callable[[str], None]
__all__ = ["Guard", "GuardSettings", "PassResult", "verdict_due"]


class Guard(Reconciler):
    """One guard replica, its own reconciler: `reconcile` once or `run` until stopped."""

    def __init__(self, kube: Kube, namespace: str, catalog: Catalog,
                 settings: GuardSettings | None = None, *, log: Log = lambda _: None,
                 clock: Clock | None = None) -> None:
        super().__init__(kube, namespace, catalog, settings, log=log, clock=clock)
        self.health = Health(self.clock, self.settings.stall_seconds)
        self.elector = LeaderElector(
            self.lease, timing(self.settings), self.clock, on_attempt=self._attempted,
            on_error=lambda _: self.metrics.api_errors.labels("lease").inc())

    def _attempted(self, leading: bool) -> None:
        self.health.leading = leading

    def _start(self, cache: Reflector[Any], stop: threading.Event) -> None:
        """Start one informer, retrying while the API refuses (a pass lists meanwhile)."""
        while not stop.is_set():
            try:
                cache.start()
                self.health.synced(f"watch/{_key(cache)}")
                return
            except (APIError, ClusterError) as exc:
                self.metrics.api_errors.labels("watch").inc()
                self.log(f"watch of {cache.kind.plural} failed ({exc}); retrying")
                stop.wait(self.settings.retry_seconds)

    def run(self, stop: threading.Event, *, server: MetricsServer | None = None) -> None:
        """Until `stop`: elect, react to events, resync; give the Lease up on the way out.
        `server`: where to answer `/metrics`, `/healthz`, `/readyz` (its owner closes it)."""
        if server is not None:
            server.serve(self.metrics.registry, self.health)
            self.log(f"serving /metrics, /healthz, /readyz on {server.url}")
        events: queue.Queue[Queued] = queue.Queue()

        def changed(etype: str, obj: Obj) -> None:
            events.put((etype, obj, self.clock.monotonic()))

        watch = functools.partial(Reflector, self.kube, namespace=self.namespace,
                                  changed=changed, clock=self.clock)
        informer = self.informer = Informer(
            watch(kinds.DAEMONSET, keep=whole), watch(kinds.SERVICE, keep=whole),
            watch(kinds.ENDPOINTSLICE, keep=slice_view, label_selector=self.slice_selector()),
            tuple(watch(kinds.POD, keep=PodView.of, label_selector=sel, printed=True,
                        changed=lambda _e, _o: changed(VERDICT, {}))
                  for sel in pod_selectors(self.catalog)),
            whole=WholePods(max_gets=0))
        objects = (informer.daemonsets, informer.services, informer.endpointslices)
        self.metrics.status.watches = lambda: {_key(r): (r.failures, r.relists)
                                               for r in informer.reflectors}
        self.writers.fence = self.elector.leading
        self.elector.on_started = self.elector.on_stopped = functools.partial(changed, WAKE, {})
        self.health.beat("loop")
        for r in informer.reflectors:
            self.health.expect(f"watch/{_key(r)}")
            self.health.check(f"watch/{_key(r)}", functools.partial(_thread_ended, r, stop))
        unobserve = self.kube.observe(informer.saw)  # a read waits for the guard's own write
        loop = Cadence(self, self.elector.leading, self.health,
                       lambda: sum(r.relists for r in objects))  # pods are the verdict's only
        self.recorder.start()
        self.elector.start()
        try:
            for r in informer.reflectors:
                self._start(r, stop)
                if r in objects:
                    changed("RESYNC", {"kind": r.kind.kind})  # its list is a change
            while not stop.is_set():
                loop.tick(events, stop)
        finally:
            stop.set()
            loop.close()
            unobserve()
            self.informer = None
            informer.close()
            self.recorder.stop()
            self.elector.stop()
            self.metrics.status.leading(False)
            if self.elector.released:
                self.log(f"released Lease/{self.settings.lease_name}")


def _key(cache: Reflector[Any]) -> str:
    """A watched resource's name on `/metrics` and the probes: its plural, or "pods <selector>"."""
    return f"pods {cache.label_selector}" if cache.printed else cache.kind.plural


def _thread_ended(cache: Reflector[Any], stop: threading.Event) -> str:
    return "" if cache.alive or stop.is_set() or not cache.rv else "its watch thread ended"
