"""`dcgm-migrate guard`: keeps the tool-owned aliases safe while the operator re-renders, and
shares the stable names when both stacks run (docs/architecture.md, "engine/guard").

Composed as controller-runtime's `Manager` composes a controller (pkg/manager/internal.go,
`controllerManager.Start`): small parts with one job each, wired here and nowhere else.

- the **cache**: one informer per watched resource (`engine/informer.py`): DaemonSets and
  Services whole, the stable names' EndpointSlices without managedFields, and the DCGM pods as
  printed rows (one per pod selector of the catalog, for the verdict only); a pass reads them,
  not the API, and a read waits for the guard's own last write (`_saw`). The verdict is taken
  from them after each change (debounced), the whole read kept as its periodic cross-check;
- **leader election** on its own thread (`engine/elector.py`): one replica leads, renewing
  its Lease however long a pass takes; its fence closes the writers the moment a renewal
  misses its deadline;
- the **reconciler** (`engine/guardreconcile.py`), whose decisions are pure
  (`model/guarding.py`, `model/sharing.py`), and the **writers** (`engine/guardwrites.py`);
- the **loop** that says when (`engine/guardloop.py`);
- **metrics** (`engine/metrics.py`) and **probes** (`engine/health.py`), served on one port by
  `engine/serving.py` when `run` is given one, and **Events** (`engine/events.py`).

Shared slices belong to the guard's Lease (`sharing.Keeper`): deleting the guard with its
manifest lets the garbage collector remove them, and `verify` requires the Lease renewed
wherever the stable names depend on them (`model/outcome.py`).
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.elector import LeaderElector
from migrator.engine.events import Recorder
from migrator.engine.guardloop import VERDICT, WAKE, Cadence, Queued
from migrator.engine.guardreconcile import PassResult, Reconciler, slice_view
from migrator.engine.guardsettings import DEFAULT_LEASE, GuardSettings, timing, verdict_due
from migrator.engine.guardwrites import Writers
from migrator.engine.informer import Informer, Reflector, pod_selectors, pod_view
from migrator.engine.leader import LeaseLock
from migrator.engine.serving import GuardMetrics, Health, MetricsServer
from migrator.engine.wholepods import WholePods
from migrator.errors import APIError, ClusterError
from migrator.model import kinds
from migrator.model.kinds import Kind
from migrator.model.outcome import Verdict
from migrator.model.snapshot import PodView
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
Log = Callable[[str], None]
__all__ = ["DEFAULT_LEASE", "Guard", "GuardSettings", "PassResult", "verdict_due"]


class Guard:
    """One guard replica: its parts (module docstring), `reconcile` once or `run` until
    stopped."""

    def __init__(self, kube: Kube, namespace: str, catalog: Catalog,
                 settings: GuardSettings | None = None, *, log: Log = lambda _: None,
                 clock: Clock | None = None, lease: LeaseLock | None = None,
                 metrics: GuardMetrics | None = None) -> None:
        self.kube, self.namespace, self.catalog = kube, namespace, catalog
        self.settings = settings = settings or GuardSettings()
        self.log = log
        self.clock: Clock = clock or SystemClock()  # the loop's, the election's, the caches'
        mb = catalog.common.managed_by
        self.lease = lease or LeaseLock(kube, namespace, settings.lease_name, settings.identity,
                                        lease_seconds=settings.lease_seconds, clock=self.clock,
                                        labels={mb.key: mb.value})
        self.metrics = metrics or GuardMetrics()  # its own registry (engine/metrics.py)
        self.health = Health(self.clock, settings.stall_seconds)
        self._noted: set[str] = set()
        self.recorder = Recorder(kube, settings.identity, self.clock, log=self.note,
                                 counted=self.metrics.event)
        self.elector = LeaderElector(self.lease, timing(settings), self.clock,
                                     on_attempt=self._attempted,
                                     on_error=lambda _: self.metrics.api_error("lease"))
        # Unfenced until `run`: `guard --once` writes without the Lease (guarded patches).
        self.writers = Writers(kube, namespace, self.clock, self.metrics, self.recorder,
                               log=log, note=self.note, concurrency=settings.write_concurrency)
        self.reconciler = Reconciler(kube, namespace, catalog, settings, clock=self.clock,
                                     lease=self.lease, metrics=self.metrics,
                                     recorder=self.recorder, writers=self.writers, log=log,
                                     note=self.note)
        self.caches: dict[str, Reflector[Obj]] = {}
        self.pod_caches: dict[str, Reflector[PodView]] = {}  # "pods <selector>" → cache
        self.metrics.status.watches = self._watches

    @property
    def passes(self) -> int:
        """Full passes completed (a pass that raised is not one)."""
        return self.reconciler.passes

    def reconcile(self, since: float | None = None) -> PassResult:
        """One full pass (`guard --once`, and the loop's)."""
        return self.reconciler.reconcile(since)

    def verdict(self) -> Verdict:
        return self.reconciler.verdict()

    def note(self, message: str) -> None:
        """Log a standing condition once, not on every pass."""
        if message not in self._noted:
            self._noted.add(message)
            self.log(message)

    def _attempted(self, leading: bool) -> None:
        self.health.leading = leading

    def _watches(self) -> dict[str, tuple[int, int]]:
        """(failures, relists) of every watch the loop runs, for the metrics."""
        caches: list[tuple[str, Reflector[Any]]] = [*self.caches.items(),
                                                    *self.pod_caches.items()]
        return {plural: (r.failures, r.relists) for plural, r in caches}

    def _saw(self, kind: Kind, obj: Obj) -> None:
        """The guard wrote or read `obj` (`Kube.observe`): a cache read waits until its watch
        has delivered that version (engine/informer.py), so a pass never decides again on a
        view older than its own last write."""
        for cache in self.caches.values():
            cache.saw(kind, obj)
        for pods in self.pod_caches.values():
            pods.saw(kind, obj)

    def _start(self, key: str, cache: Reflector[Any], stop: threading.Event) -> None:
        """Start one informer, retrying while the API refuses (a pass lists meanwhile);
        `key`: its name among the caches, under which readiness waits for it."""
        name = f"watch/{key}"
        while not stop.is_set():
            try:
                cache.start()
                self.health.synced(name)
                return
            except (APIError, ClusterError) as exc:
                self.metrics.api_error("watch")
                self.log(f"watch of {cache.kind.plural} failed ({exc}); retrying")
                stop.wait(self.settings.retry_seconds)

    def run(self, stop: threading.Event, *, serve: tuple[str, int] | None = None) -> None:
        """Until `stop` is set: elect (on the elector's thread), react to events, resync; on
        the way out give the Lease up so a standby takes over at once. `serve`: (host, port)
        to serve `/metrics`, `/healthz` and `/readyz` on meanwhile.

        Each informer lists, then watches from that version and is retried however its watch
        fails; every event reaches the loop with its arrival time. A watch request ends
        within its timeout, so liveness checks only that each informer's thread still runs."""
        server = MetricsServer(serve, self.metrics.registry, self.health) if serve else None
        if server is not None:
            self.log(f"serving /metrics, /healthz, /readyz on {server.url}")
        events: queue.Queue[Queued] = queue.Queue()

        def changed(etype: str, obj: Obj) -> None:
            events.put((etype, obj, self.clock.monotonic()))

        def wake() -> None:
            changed(WAKE, {})

        def judge_again(_etype: str, _pod: Obj) -> None:
            changed(VERDICT, {})

        self.caches = {kind.plural: Reflector(self.kube, kind, self.namespace, keep, selector,
                                              changed=changed, clock=self.clock)
                       for kind, keep, selector in (
                           (kinds.DAEMONSET, _whole, None), (kinds.SERVICE, _whole, None),
                           (kinds.ENDPOINTSLICE, slice_view, self.reconciler.slice_selector()))}
        self.pod_caches = {f"pods {sel}": Reflector(self.kube, kinds.POD, self.namespace,
                                                    pod_view, sel, printed=True,
                                                    changed=judge_again, clock=self.clock)
                           for sel in pod_selectors(self.catalog)}
        self.reconciler.caches = self.caches
        self.reconciler.verdict_cache = Informer(
            self.kube, self.namespace, self.caches[kinds.DAEMONSET.plural],
            self.caches[kinds.SERVICE.plural], self.caches[kinds.ENDPOINTSLICE.plural],
            tuple(self.pod_caches.values()), whole=WholePods(max_gets=0))
        every: dict[str, Reflector[Any]] = {**self.caches, **self.pod_caches}
        self.writers.fence = self.elector.leading
        self.elector.on_started = self.elector.on_stopped = wake
        self.health.beat("loop")
        for plural, cache in every.items():
            self.health.expect(f"watch/{plural}")
            self.health.check(f"watch/{plural}", functools.partial(_thread_ended, cache, stop))
        unobserve = self.kube.observe(self._saw)
        loop = Cadence(self.reconciler, self.elector.leading, self.health,
                       lambda: sum(c.relists for c in self.caches.values()))
        self.recorder.start()
        self.elector.start()
        try:
            for key, cache in self.caches.items():
                self._start(key, cache, stop)
                changed("RESYNC", {"kind": cache.kind.kind})  # its list is a change, as ever
            for key, pods in self.pod_caches.items():
                self._start(key, pods, stop)
            while not stop.is_set():
                loop.tick(events, stop)
        finally:
            stop.set()
            loop.close()
            unobserve()
            self.reconciler.verdict_cache = None
            for cache in every.values():
                cache.stop()
            self.recorder.stop()
            self.elector.stop()
            self.metrics.status.leading(False)
            if self.elector.released:
                self.log(f"released Lease/{self.settings.lease_name}")
            if server is not None:
                server.close()


def _whole(obj: Obj) -> Obj:
    return obj


def _thread_ended(cache: Reflector[Any], stop: threading.Event) -> str:
    return "" if cache.alive or stop.is_set() or not cache.rv else "its watch thread ended"
