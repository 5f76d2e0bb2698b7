"""When the guard reconciles. Each `tick` follows the election, runs a full pass when due, starts
the verdict on its own thread, and waits for watch events, holding at once where a DaemonSet lost
the common label. A standby only waits: the elector wakes it.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migrator.engine.events import NORMAL, WARNING
from migrator.engine.guardreconcile import GuardSettings, Reconciler
from migrator.engine.leader import JITTER_FACTOR, Timing
from migrator.engine.serving import Health
from migrator.errors import APIError, ClusterError
from migrator.model import guarding, kinds
from migrator.model import objects as o

Obj = dict[str, Any]
Queued = tuple[str, Obj, float]  # a watch event and when it reached the guard (monotonic)
WAKE = "WAKE"  # an event type of the loop's own: look again (the election changed)
VERDICT = "VERDICT"  # and another: something only the verdict reads changed (a pod)
VERDICT_DEBOUNCE_MAX = 5.0  # a burst of changes delays the cached verdict at most 5 debounces
# After a cached verdict that took t seconds the next waits 4 t: at most a fifth of a core.
VERDICT_COST_FACTOR = 4.0


def timing(settings: GuardSettings) -> Timing:
    """The renew deadline two thirds of the lease; the retry period shortened so that client-go's
    rule (deadline > 1.2 retries) holds for short leases."""
    deadline = settings.lease_seconds * 2.0 / 3.0
    retry = min(settings.retry_seconds, deadline / (JITTER_FACTOR + 0.3))
    return Timing(float(settings.lease_seconds), deadline, retry)


def verdict_due(settings: GuardSettings, now: float, last: float | None,
                changed: bool) -> bool:
    """Is the whole read's verdict due, the last taken at `last` (None: never)? A quiet cluster
    is read once per `verdict_idle_seconds` (nearly all of the guard's steady API bytes)."""
    if last is None:
        return True
    elapsed = now - last
    return elapsed >= settings.verdict_idle_seconds or (changed and
                                                         elapsed >= settings.verdict_seconds)


def cached_verdict_due(settings: GuardSettings, now: float, first: float | None,
                       last: float, *, previous_end: float = float("-inf"),
                       previous_cost: float = 0.0) -> bool:
    """Is the cached verdict due? `first`/`last`: the first and latest unjudged change (None:
    none), debounced; `previous_end`/`_cost`: the last one's end and cost."""
    return now >= _cached_verdict_at(settings, first, last, previous_end, previous_cost)


def _cached_verdict_at(settings: GuardSettings, first: float | None, last: float,
                       previous_end: float, previous_cost: float) -> float:
    if first is None:
        return float("inf")
    wait = settings.verdict_debounce_seconds
    return max(min(last + wait, first + wait * VERDICT_DEBOUNCE_MAX),
               previous_end + previous_cost * VERDICT_COST_FACTOR)


@dataclass
class Cadence:
    """The guard's clocks: when the next full pass is due, when the next verdict."""

    reconciler: Reconciler
    leading_now: Callable[[], bool]  # the elector's fence
    health: Health
    relists: Callable[[], int]  # the informers' relists so far
    next_pass: float = 0.0
    last_judged: float | None = None  # when the last verdict was taken
    changed: bool = True  # an event (or a relist) since the last verdict
    last_verdict: str = ""
    last_pass: float = float("-inf")
    dirty: bool = True
    hot_until: float = float("-inf")  # a stable name changed hands: no throttle until then
    since: float | None = None  # when the oldest event no pass has answered yet arrived
    leading: bool = False
    holders: dict[str, str] = field(default_factory=dict)  # stable name → its holder
    judging: threading.Thread | None = None  # the verdict being taken, off the loop's thread
    seen_relists: int = 0  # a relist is a change the loop was not told of
    unjudged_first: float | None = None  # when the first change no verdict judged yet arrived
    unjudged_last: float = float("-inf")  # and the latest
    cached_end: float = float("-inf")  # when the last verdict from the caches ended
    cached_cost: float = 0.0  # and how long it took (seconds of the loop's clock)

    def start_judging(self, *, cached: bool = False) -> None:
        """Take the verdict on a thread of its own (a takeover must not wait for a whole read)."""
        if not cached:
            self.last_judged, self.changed = self.reconciler.clock.monotonic(), False
        self.unjudged_first, self.unjudged_last = None, float("-inf")
        self.judging = threading.Thread(target=self._judged, args=(cached,), daemon=True,
                                        name="guard-verdict")
        self.judging.start()

    def _unjudged(self, at: float) -> None:
        self.unjudged_first = at if self.unjudged_first is None else min(self.unjudged_first, at)
        self.unjudged_last = max(self.unjudged_last, at)

    def close(self) -> None:
        if self.judging is not None:
            self.judging.join(10.0)

    def _judged(self, cached: bool) -> None:
        """Check the verdict; log it (and record it on the state ConfigMap) when it changed."""
        r = self.reconciler
        began = r.clock.monotonic()
        try:
            verdict = r.verdict(cached=cached)
            if cached:
                self.cached_end = r.clock.monotonic()
                self.cached_cost = self.cached_end - began
        except (APIError, ClusterError) as exc:
            r.metrics.api_errors.labels("verdict").inc()
            r.log(f"verdict unreadable ({exc}); checked again later")
            self.changed = True  # not judged: due again after verdict_seconds
            return
        summary = verdict.summary()
        if summary != self.last_verdict:
            self.last_verdict = summary
            r.log(f"verdict: {summary}")
            r.record_on_state(NORMAL if verdict.ok else WARNING,
                              "VerdictPassed" if verdict.ok else "VerdictFailed", "Verify", summary)

    def _follow_election(self) -> None:
        r, s = self.reconciler, self.reconciler.settings
        was, self.leading = self.leading, self.leading_now()
        self.health.leading = self.leading
        r.metrics.status.leading(self.leading)
        if self.leading and not was:
            r.log(f"leading: holds Lease/{s.lease_name} as {s.identity}")
            self.dirty = self.changed = True  # a standby passed nothing
        elif was and not self.leading:
            r.log(f"lost Lease/{s.lease_name} (holder {r.lease.holder or 'none'}); "
                  "standing by")

    def _pass_at(self) -> float:
        """When the next full pass is due: a resync, or, dirty, the throttle (none while hot)."""
        throttled = self.last_pass + self.reconciler.settings.min_pass_seconds
        return min(self.next_pass, throttled) if self.dirty else self.next_pass

    def _cached_at(self) -> float:
        """When the verdict from the caches is due (never without them)."""
        if self.reconciler.informer is None:
            return float("inf")
        return _cached_verdict_at(self.reconciler.settings, self.unjudged_first,
                                  self.unjudged_last, self.cached_end, self.cached_cost)

    def tick(self, events: queue.Queue[Queued], stop: threading.Event) -> None:
        r, s = self.reconciler, self.reconciler.settings
        self.health.beat("loop")
        self._follow_election()
        now = r.clock.monotonic()
        if self.leading and (now >= self._pass_at() or (self.dirty and now < self.hot_until)):
            since, self.since = self.since, None
            try:
                r.reconcile(since)
            except (APIError, ClusterError) as exc:
                r.metrics.api_errors.labels("pass").inc()
                r.log(f"pass failed ({exc}); retrying")
            self.last_pass = r.clock.monotonic()
            self.next_pass = self.last_pass + s.resync_seconds
            self.dirty = False
        if self.leading and not (self.judging is not None and self.judging.is_alive()):
            now = r.clock.monotonic()
            if verdict_due(s, now, self.last_judged, self.changed):
                self.start_judging()
            elif now >= self._cached_at():
                self.start_judging(cached=True)
        batch = self._wait(events)
        relists = self.relists()
        if relists != self.seen_relists:
            self.seen_relists, self.changed, self.dirty = relists, True, True
            self._unjudged(r.clock.monotonic())
        batch = [q for q in batch if q[0] != WAKE]
        for _, _, at in batch:
            self._unjudged(at)
        self.changed = self.changed or bool(batch)
        batch = [q for q in batch if q[0] != VERDICT]
        if not stop.is_set() and batch:
            self._answer(batch)

    def _wait(self, events: queue.Queue[Queued]) -> list[Queued]:
        """The next batch of events, waiting at most until the next pass is due."""
        r, s = self.reconciler, self.reconciler.settings
        wake = min(self._pass_at(), self._cached_at())
        timeout = (max(0.0, min(wake - r.clock.monotonic(), s.retry_seconds)) if self.leading
                   else s.retry_seconds)
        batch: list[Queued] = []
        try:
            batch.append(events.get(timeout=timeout))
            while True:
                batch.append(events.get_nowait())
        except queue.Empty:
            pass
        return batch

    def _answer(self, batch: list[Queued]) -> None:
        """Follow each stable name's holder; while leading, hold where a template lost the label."""
        r, s = self.reconciler, self.reconciler.settings
        latest: dict[str, Queued] = {}
        for etype, obj, at in batch:
            if etype in ("ADDED", "MODIFIED") and obj.get("kind") == kinds.DAEMONSET.kind:
                latest[o.name(obj)] = (etype, obj, latest.get(o.name(obj), (etype, obj, at))[2])
            elif obj.get("kind") == kinds.SERVICE.kind and self._changed_hands(etype, obj):
                self.hot_until = at + s.takeover_seconds
        if not self.leading:
            return
        for _, ds, at in latest.values():
            try:
                r.on_daemonset(ds, at)
            except (APIError, ClusterError) as exc:
                r.metrics.api_errors.labels("hold").inc()
                r.log(f"hold check of DaemonSet/{o.name(ds)} failed ({exc})")
        first = min(at for _, _, at in batch)
        self.since = first if self.since is None else min(self.since, first)
        self.dirty = True

    def _changed_hands(self, etype: str, service: Obj) -> bool:
        """Did a stable name's Service change hands? A new holder counts once on `/metrics`."""
        r = self.reconciler
        name = o.name(service)
        if name not in {c.alias for c in r.catalog.components if c.alias}:
            return False
        after = guarding.holder(None if etype == "DELETED" else service, r.catalog)
        before = self.holders.get(name)
        self.holders[name] = after
        if not guarding.changed_hands(before, after):
            return False
        if after != guarding.NOBODY and self.leading:
            r.metrics.takeovers.labels(name).inc()
        return True
