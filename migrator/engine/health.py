"""The guard's probes, as answers: is it alive (`/healthz`), is it ready (`/readyz`)?

Liveness is "the loop still turns and every watch still makes progress": the run loop beats
(`beat`) at every turn, and a beat older than `stall_seconds` means a hang no retry will end (a
pass blocked on a dead connection); each informer's `check` says whether its watch thread
still runs (a watch request ends within its timeout, and the transport's read timeout ends a
silent stream, after which the informer retries: it cannot hang past that bound). The
bound is generous because a verdict at 15,000 nodes is a whole read of the namespace that the
loop waits for; the kubelet restarts a pod whose liveness probe keeps failing, so a false
failure costs a restart and the Lease's hand-over.

Readiness is "its view is complete": every cache has listed once (`synced`) and the Lease has
been tried, so it knows whether it leads or stands by. Both are ready: a standby is a healthy
replica (nothing routes traffic to the guard; the probe is for rollouts and `kubectl get
pods`). Time is the guard's clock, so tests drive it without waiting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from migrator.engine.clock import Clock

Check = Callable[[], str]  # "" when fine, else what is wrong


class Health:
    """Beats and sync marks from the guard's threads, read by the probe handlers."""

    def __init__(self, clock: Clock, stall_seconds: float) -> None:
        self.clock = clock
        self.stall_seconds = stall_seconds
        self._lock = threading.Lock()
        self._beats: dict[str, float] = {}
        self._synced: dict[str, bool] = {}
        self._checks: dict[str, Check] = {}
        self.leading: bool | None = None  # None: the Lease has not been tried yet

    def watch(self, name: str) -> None:
        """Expect beats and a first sync from `name` from now on."""
        with self._lock:
            self._beats[name] = self.clock.monotonic()
            self._synced.setdefault(name, False)

    def expect(self, name: str) -> None:
        """Expect a first sync from `name` (a cache whose progress `check` judges)."""
        with self._lock:
            self._synced.setdefault(name, False)

    def beat(self, name: str) -> None:
        """A sign of progress from `name`; its first beat also starts expecting more (a loop:
        nothing to sync)."""
        with self._lock:
            self._beats[name] = self.clock.monotonic()

    def synced(self, name: str) -> None:
        with self._lock:
            self._synced[name] = True
            if name in self._beats:
                self._beats[name] = self.clock.monotonic()

    def check(self, name: str, check: Check) -> None:
        """Another condition of liveness (a cache's own thread is still running)."""
        with self._lock:
            self._checks[name] = check

    def alive(self) -> tuple[bool, str]:
        now = self.clock.monotonic()
        with self._lock:
            beats, checks = dict(self._beats), dict(self._checks)
        stale = [f"{name}: no progress for {now - at:.0f} s (bound {self.stall_seconds:.0f} s)"
                 for name, at in sorted(beats.items()) if now - at > self.stall_seconds]
        failing = [f"{name}: {why}" for name, c in sorted(checks.items()) if (why := c())]
        problems = stale + failing
        return not problems, "; ".join(problems) or "ok"

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            waiting = sorted(n for n, done in self._synced.items() if not done)
            leading = self.leading
        if waiting:
            return False, f"caches not synced yet: {', '.join(waiting)}"
        if leading is None:
            return False, "the Lease has not been tried yet"
        return True, "ok: leading" if leading else "ok: standing by"
