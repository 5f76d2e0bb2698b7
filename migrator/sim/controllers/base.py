"""The loop every simulated controller shares: store events and timers in, one thread out.

The store calls `on_event` synchronously under its lock, so that callback only appends to a
queue (never writes, never blocks). The controller's own thread drains the queue in batches,
updates its caches (an informer, in Kubernetes terms) and reconciles the keys that changed, so a
burst of 5000 pod events costs one reconcile per affected object, not 5000.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

from migrator.sim.clock import SimClock
from migrator.sim.store import Event, Store

log = logging.getLogger(__name__)


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    key: Hashable = field(compare=False)
    background: bool = field(compare=False, default=False)


class Controller:
    """Base class: subclasses set `resources` and implement `prime` and `handle`."""

    name = "controller"
    resources: frozenset[str] = frozenset()  # Kind keys whose events this controller wants

    def __init__(self, store: Store, clock: SimClock) -> None:
        self.store = store
        self.clock = clock
        self.errors = 0
        self._cond = threading.Condition()
        self._events: list[Event] = []
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ---- wiring ----------------------------------------------------------------------------

    def start(self) -> None:
        """Subscribe and take the initial snapshot atomically, then start the thread."""
        with self.store.lock:
            self.store.subscribe(self.on_event)
            self.prime()
        self._thread = threading.Thread(target=self._run, name=f"sim-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.store.unsubscribe(self.on_event)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def on_event(self, event: Event) -> None:
        """Store callback (under the store lock): enqueue only."""
        if event.resource.key not in self.resources or not self.wants(event):
            return
        with self._cond:
            self._events.append(event)
            self._cond.notify()

    def wants(self, event: Event) -> bool:
        """Cheap filter (under the store lock): False for events the controller would ignore,
        so they do not wake its thread (each wake-up costs every thread some GIL time)."""
        return True

    def schedule(self, key: Hashable, delay: float, *, background: bool = False) -> None:
        """Reconcile `key` after `delay` simulated seconds. Background timers (periodic resyncs)
        do not count as pending work for `idle()`."""
        timer = _Timer(self.clock.now() + max(0.0, delay), next(self._seq), key, background)
        with self._cond:
            heapq.heappush(self._timers, timer)
            self._cond.notify()

    def idle(self) -> bool:
        """No queued events, no reconcile running, no pending (non-background) timer."""
        with self._cond:
            return (
                not self._busy
                and not self._events
                and not any(not t.background for t in self._timers)
            )

    # ---- subclass hooks --------------------------------------------------------------------

    def prime(self) -> None:
        """Read the initial state (called under the store lock, must not write)."""

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        """Apply a batch of events to the caches and reconcile what changed."""
        raise NotImplementedError

    # ---- the loop --------------------------------------------------------------------------

    def _pop_due(self) -> list[Hashable]:
        now = self.clock.now()
        due: list[Hashable] = []
        while self._timers and self._timers[0].due <= now:
            due.append(heapq.heappop(self._timers).key)
        return due

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    due = self._pop_due()
                    if self._events or due:
                        break
                    wait = None
                    if self._timers:
                        wait = self.clock.to_real(self._timers[0].due - self.clock.now())
                    self._cond.wait(wait)
                events, self._events = self._events, []
                self._busy = True
            try:
                self.handle(events, due)
            except Exception:
                self.errors += 1
                log.exception("sim %s controller: reconcile failed", self.name)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
