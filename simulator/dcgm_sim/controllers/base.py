"""The loop every simulated controller shares: store events and timers in, one thread out.

The store calls `on_event` synchronously under its lock, so that callback only appends to a
queue (never writes, never blocks). One `ControllerLoop` thread (kube-controller-manager and
the kubelets, in Kubernetes terms) drains the queues in batches: each controller updates its
caches (an informer) and reconciles the keys that changed, so a burst of 5000 pod events costs
one reconcile per affected object, not 5000.

One thread for all controllers, not one each: a rollout wave is a chain of hand-offs (kubelet
marks a pod Ready → DaemonSet controller deletes the next old pod → kubelet terminates it → the
DaemonSet controller creates its replacement). With a thread per controller each hand-off woke
another thread, which then waited for the GIL behind the EndpointSlice and watch threads. Here
the loop always serves the first controller in priority order that has work, so the next link
of the chain runs at once and bookkeeping (EndpointSlices, garbage collection) fills the waits.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.store import Event, Store

log = logging.getLogger(__name__)


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    key: Hashable = field(compare=False)
    background: bool = field(compare=False, default=False)


class ControllerLoop:
    """The one thread that runs a set of controllers, highest priority first."""

    def __init__(self, clock: SimClock, name: str = "sim-controllers") -> None:
        self.clock = clock
        self.name = name
        self.cond = threading.Condition()  # guards every member controller's queue and timers
        self.controllers: list[Controller] = []
        self._stopping = False
        self._thread: threading.Thread | None = None

    def add(self, controller: Controller) -> None:
        """Join `controller` (before `start`); the order of joining is the priority order."""
        controller.loop = self
        self.controllers.append(controller)

    def start(self) -> None:
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _next(self) -> tuple[Controller, list[Event], list[Hashable]] | None:
        """Under `cond`: the first controller with queued events or due timers, its work taken
        (and marked busy); None when nobody has work."""
        now = self.clock.now()
        for c in self.controllers:
            if c.stopped:
                continue
            due = c.pop_due(now)
            if c.events or due:
                events, c.events = c.events, []
                c.busy = True
                return c, events, due
        return None

    def _wait_seconds(self) -> float | None:
        dues = [c.timers[0].due for c in self.controllers if c.timers]
        if not dues:
            return None
        return self.clock.to_real(min(dues) - self.clock.now())

    def _run(self) -> None:
        while True:
            with self.cond:
                while True:
                    if self._stopping:
                        return
                    work = self._next()
                    if work is not None:
                        break
                    self.cond.wait(self._wait_seconds())
            controller, events, due = work
            try:
                controller.handle(events, due)
            except Exception:
                controller.errors += 1
                log.exception("sim %s controller: reconcile failed", controller.name)
            finally:
                with self.cond:
                    controller.busy = False
                    self.cond.notify_all()


def run_together(controllers: Sequence[Controller], clock: SimClock) -> ControllerLoop:
    """One loop for `controllers` (in priority order): subscribed and primed, then started."""
    loop = ControllerLoop(clock)
    for c in controllers:
        loop.add(c)
    for c in controllers:
        c.attach()
    loop.start()
    return loop


class NodeCache(dict[str, dict[str, Any]]):
    """The Nodes a controller keeps from its Node events, by name (an informer's lister)."""

    def prime(self, store: Store) -> None:
        self.update((node["metadata"]["name"], node) for node in store.list(kinds.NODE)[0])

    def note(self, event: Event) -> str:
        """Apply one Node event; returns the node's name."""
        name = str(event.object["metadata"]["name"])
        if event.type == "DELETED":
            self.pop(name, None)
        else:
            self[name] = event.object
        return name


class Controller:
    """Base class: subclasses set `resources` and implement `prime` and `handle`. Run by a
    `ControllerLoop` (`run_together`), or alone by `start()`."""

    name = "controller"
    resources: frozenset[str] = frozenset()  # Kind keys whose events this controller wants

    def __init__(self, store: Store, clock: SimClock) -> None:
        self.store = store
        self.clock = clock
        self.errors = 0
        self.loop: ControllerLoop | None = None
        self.events: list[Event] = []  # guarded by loop.cond
        self.timers: list[_Timer] = []  # a heap, guarded by loop.cond
        self.busy = False
        self.stopped = False  # by `stop()`: its loop (shared with others) no longer serves it
        self._seq = itertools.count()
        self._own_loop: ControllerLoop | None = None

    # ---- wiring ----------------------------------------------------------------------------

    def attach(self) -> None:
        """Subscribe and take the initial snapshot atomically."""
        with self.store.lock:
            self.store.subscribe(self.on_event)
            self.prime()

    def start(self) -> None:
        """Run this controller alone, on a loop of its own."""
        self._own_loop = run_together([self], self.clock)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop reconciling: no more events, and pending work is dropped. A reconcile already
        running on the shared loop finishes first (as a stopped thread's would)."""
        self.store.unsubscribe(self.on_event)
        if self.loop is not None:
            with self._cond:
                self.stopped = True
                self.events.clear()
                self.timers.clear()
        if self._own_loop is not None:
            self._own_loop.stop(timeout)
            self._own_loop = None

    @property
    def _cond(self) -> threading.Condition:
        assert self.loop is not None, f"controller {self.name} is not on a loop"
        return self.loop.cond

    def on_event(self, event: Event) -> None:
        """Store callback (under the store lock): enqueue only."""
        if event.resource.key not in self.resources or not self.wants(event):
            return
        with self._cond:
            self.events.append(event)
            self._cond.notify()

    def wants(self, event: Event) -> bool:
        """Cheap filter (under the store lock): False for events the controller would ignore,
        so they cost the loop nothing."""
        return True

    def schedule(self, key: Hashable, delay: float, *, background: bool = False) -> None:
        """Reconcile `key` after `delay` simulated seconds. Background timers (periodic resyncs)
        do not count as pending work for `idle()`."""
        timer = _Timer(self.clock.now() + max(0.0, delay), next(self._seq), key, background)
        with self._cond:
            heapq.heappush(self.timers, timer)
            self._cond.notify()

    def unschedule(self, key: Hashable) -> None:
        """Drop every pending timer of `key`."""
        with self._cond:
            self.timers = [t for t in self.timers if t.key != key]
            heapq.heapify(self.timers)

    def idle(self) -> bool:
        """No queued events, no reconcile running, no pending (non-background) timer."""
        with self._cond:
            return (
                not self.busy
                and not self.events
                and not any(not t.background for t in self.timers)
            )

    def pop_due(self, now: float) -> list[Hashable]:
        """Under the loop's lock: the keys of timers due by `now`, removed."""
        due: list[Hashable] = []
        while self.timers and self.timers[0].due <= now:
            due.append(heapq.heappop(self.timers).key)
        return due

    # ---- subclass hooks --------------------------------------------------------------------

    def prime(self) -> None:
        """Read the initial state (called under the store lock, must not write)."""

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        """Apply a batch of events to the caches and reconcile what changed."""
        raise NotImplementedError
