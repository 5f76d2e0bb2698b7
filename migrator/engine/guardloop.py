"""The guard's run loop (`Guard.run` drives one): its clocks and what each turn does.

Each `tick` renews or tries the Lease, runs a full pass when one is due (every
`resync_seconds`, or after events, at most every `min_pass_seconds` — with no throttle for
`takeover_seconds` after a stable name changed hands), starts the verdict on a thread of its
own when `verdict_due` says so, and waits for the next watch events, answering a DaemonSet
that lost the common label at once (`Guard.on_daemonset`). Decisions are the guard's; this is
only when.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migrator.engine.events import NORMAL, WARNING
from migrator.engine.guardsettings import verdict_due
from migrator.errors import APIError, ClusterError
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.kinds import Kind

if TYPE_CHECKING:
    from migrator.engine.guard import Guard

Obj = dict[str, Any]
Queued = tuple[str, Obj, float]  # a watch event and when it reached the guard (monotonic)


def typed(kind: Kind, obj: Obj) -> Obj:
    """The object with its apiVersion and kind (an Event's reference names both)."""
    return {**obj, "apiVersion": obj.get("apiVersion") or kind.api_version,
            "kind": obj.get("kind") or kind.kind}


def controller_uid(obj: Obj) -> str:
    ref = o.controller_owner(obj)
    return str((ref or {}).get("uid") or "")


@dataclass
class Loop:
    """The run loop's clocks: when to renew the Lease, when the next full pass is due."""

    guard: Guard
    next_lease: float = 0.0
    next_pass: float = 0.0
    last_judged: float | None = None  # when the last verdict was taken
    changed: bool = True  # an event (or a relist) since the last verdict
    last_verdict: str = ""
    last_pass: float = float("-inf")
    dirty: bool = True
    hot_until: float = float("-inf")  # a stable name changed hands: no throttle until then
    since: float | None = None  # when the oldest event no pass has answered yet arrived
    leading: bool = False
    owners: dict[str, str] = field(default_factory=dict)  # stable name → controller uid
    judging: threading.Thread | None = None  # the verdict being taken, off the loop's thread
    relists: int = 0  # the informers' relists seen: a relist is a change it was not told of

    def start_judging(self) -> None:
        """Take the verdict on a thread of its own: its whole read of a 15,000-node namespace
        takes tens of seconds, and a takeover must not wait for it (docs/performance.md)."""
        self.last_judged, self.changed = self.guard.clock.monotonic(), False
        self.judging = threading.Thread(target=self._judged, daemon=True, name="guard-verdict")
        self.judging.start()

    def judging_now(self) -> bool:
        return self.judging is not None and self.judging.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        if self.judging is not None:
            self.judging.join(timeout)

    def judge(self) -> None:
        """Check the verdict and log it (and record it on the state ConfigMap) when it
        changed since the last check."""
        self.last_judged, self.changed = self.guard.clock.monotonic(), False
        self._judged()

    def _judged(self) -> None:
        g = self.guard
        try:
            verdict = g.verdict()
        except (APIError, ClusterError) as exc:
            g.metrics.api_error("verdict")
            g.log(f"verdict unreadable ({exc}); checked again later")
            self.changed = True  # not judged: due again after verdict_seconds
            return
        summary = verdict.summary()
        if summary != self.last_verdict:
            self.last_verdict = summary
            g.log(f"verdict: {summary}")
            cm = g.state_configmap()
            if cm is not None:
                g.recorder.record(typed(kinds.CONFIGMAP, cm),
                                  NORMAL if verdict.ok else WARNING,
                                  "VerdictPassed" if verdict.ok else "VerdictFailed",
                                  "Verify", summary)

    def tick(self, events: queue.Queue[Queued], stop: threading.Event) -> None:
        g, s = self.guard, self.guard.settings
        g.health.beat("loop")
        now = g.clock.monotonic()
        if now >= self.next_lease:
            was = self.leading
            try:
                self.leading = g.lease.try_acquire_or_renew()
            except (APIError, ClusterError):
                g.metrics.api_error("lease")
                raise
            self.next_lease = now + s.retry_seconds
            g.health.leading = self.leading
            g.status.leading(self.leading)
            if self.leading and not was:
                g.log(f"leading: holds Lease/{s.lease_name} as {s.identity}")
                self.dirty = self.changed = True  # a standby followed nothing
            elif was and not self.leading:
                g.log(f"lost Lease/{s.lease_name} (holder {g.lease.holder or 'none'}); "
                      "standing by")
        if self.leading and (now >= self.next_pass or (self.dirty and (
                now < self.hot_until or now - self.last_pass >= s.min_pass_seconds))):
            since, self.since = self.since, None
            try:
                g.reconcile(since)
            except (APIError, ClusterError) as exc:
                g.metrics.api_error("pass")
                g.log(f"pass failed ({exc}); retrying")
            self.last_pass = g.clock.monotonic()
            self.next_pass = self.last_pass + s.resync_seconds
            self.dirty = False
        if (self.leading and not self.judging_now()
                and verdict_due(s, g.clock.monotonic(), self.last_judged, self.changed)):
            self.start_judging()
        wake = min(self.next_lease, self.next_pass,
                   self.last_pass + s.min_pass_seconds if self.dirty else self.next_pass)
        timeout = max(0.0, min(wake - g.clock.monotonic(), s.retry_seconds))
        batch: list[Queued] = []
        try:
            batch.append(events.get(timeout=timeout))
            while True:
                batch.append(events.get_nowait())
        except queue.Empty:
            pass
        relists = sum(c.relists for c in g.caches.values())
        if relists != self.relists:
            self.relists, self.changed, self.dirty = relists, True, True
        self.changed = self.changed or bool(batch)
        if stop.is_set() or not batch or not self.leading:
            return
        latest: dict[str, Queued] = {}
        for etype, obj, at in batch:
            if etype in ("ADDED", "MODIFIED") and obj.get("kind") == kinds.DAEMONSET.kind:
                latest[o.name(obj)] = (etype, obj, latest.get(o.name(obj), (etype, obj, at))[2])
            elif obj.get("kind") == kinds.SERVICE.kind and self._changed_hands(etype, obj):
                self.hot_until = at + s.takeover_seconds
        for _, ds, at in latest.values():
            try:
                g.on_daemonset(ds, at)
            except (APIError, ClusterError) as exc:
                g.metrics.api_error("hold")
                g.log(f"hold check of DaemonSet/{o.name(ds)} failed ({exc})")
        first = min(at for _, _, at in batch)
        self.since = first if self.since is None else min(self.since, first)
        self.dirty = True

    def _changed_hands(self, etype: str, service: Obj) -> bool:
        """Did a stable name's Service change controller (an operator took the tool's alias
        over, or the alias came back)? Such a takeover is answered at once, and so is every
        event for `takeover_seconds` after it, not after the throttle: the GPUCluster nodes
        lose the name as soon as the EndpointSlice controller rewrites its slices."""
        name = o.name(service)
        if name not in {c.alias for c in self.guard.catalog.components if c.alias}:
            return False
        owner = "" if etype == "DELETED" else controller_uid(service)
        before = self.owners.get(name)
        self.owners[name] = owner
        return before is not None and owner != before
