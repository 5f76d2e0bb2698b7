"""Waiting with watches and a deadline: a rollout, or a set of gates that must come true.

A watch stream is the wake-up signal (no fixed polling); gate checks re-read only what they
need and are throttled, so a 5,000-node rollout costs a handful of requests per second at most.
Time is injectable so tests of timeouts take no real time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock, SystemClock
from migrator.errors import APIError
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult, rollout_complete
from migrator.model.kinds import Kind

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]


@dataclass
class Waiter:
    kube: Kube
    namespace: str
    clock: Clock = field(default_factory=SystemClock)
    heartbeat: Callable[[], None] = lambda: None
    recheck_min: float = 0.05
    recheck_max: float = 1.0

    def _wake(self, kind: Kind, resource_version: str, timeout: float, *,
              field_selector: str | None = None, label_selector: str | None = None,
              on_event: Callable[[str, Obj], bool] | None = None) -> str:
        """Block until an event of `kind` arrives (or `timeout`); returns the newest rv seen.
        `on_event` may consume events and return True to keep streaming."""
        rv = resource_version
        try:
            for etype, obj in self.kube.watch(
                    kind, self.namespace, resource_version=rv, field_selector=field_selector,
                    label_selector=label_selector, timeout_seconds=max(1, int(timeout + 0.999))):
                rv = str(o.meta(obj).get("resourceVersion") or rv)
                if on_event is None or not on_event(etype, obj):
                    break
        except APIError:
            # An expired or broken watch only costs us a wake-up; the caller re-reads.
            self.clock.sleep(min(timeout, self.recheck_min))
            return ""
        return rv

    def rollout(self, daemonset: str, deadline: float,
                report: Callable[[Obj], None]) -> Obj | None:
        """Follow one DaemonSet's status until its rollout is complete; None at the deadline."""
        while True:
            self.heartbeat()
            ds = self.kube.get(kinds.DAEMONSET, daemonset, self.namespace)
            if ds is None:
                return None
            report(ds)
            if rollout_complete(ds).ok:
                return ds
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return None
            latest: dict[str, Obj] = {}

            def follow(etype: str, obj: Obj, latest: dict[str, Obj] = latest) -> bool:
                if etype in ("ADDED", "MODIFIED"):
                    latest["ds"] = obj
                    report(obj)
                    self.heartbeat()
                    if rollout_complete(obj).ok:
                        return False
                return self.clock.monotonic() < deadline

            self._wake(kinds.DAEMONSET, str(o.meta(ds).get("resourceVersion", "")),
                       min(remaining, 30.0), field_selector=f"metadata.name={daemonset}",
                       on_event=follow)
            if "ds" in latest and rollout_complete(latest["ds"]).ok:
                return latest["ds"]

    def until(self, check: Callable[[], list[GateResult]], deadline: float,
              wake_kind: Kind = kinds.ENDPOINTSLICE,
              label_selector: str | None = None,
              fatal: Callable[[list[GateResult]], bool] | None = None) -> list[GateResult]:
        """Re-run `check` until every gate passes, `fatal` says a failure cannot heal by
        waiting (lost endpoints: act at once), or the deadline; returns the last results."""
        delay = self.recheck_min
        rv = ""
        while True:
            self.heartbeat()
            results = check()
            if all(r.ok for r in results) or (fatal is not None and fatal(results)):
                return results
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return results
            if not rv:
                rv = self._list_rv(wake_kind, label_selector)
            start = self.clock.monotonic()
            rv = self._wake(wake_kind, rv, min(remaining, delay), label_selector=label_selector)
            # Let a burst of related changes land before re-reading.
            spent = self.clock.monotonic() - start
            if spent < delay:
                self.clock.sleep(min(delay - spent, max(0.0, deadline - self.clock.monotonic()),
                                     self.recheck_min))
            delay = min(delay * 2, self.recheck_max)

    def _list_rv(self, kind: Kind, label_selector: str | None) -> str:
        first = next(iter(self.kube.pages(kind, self.namespace, label_selector=label_selector,
                                          page_size=1)))
        return first.resource_version

    def settle(self, seconds: float, report: Callable[[float], None]) -> None:
        """Give kube-proxy time to program a selector change everywhere (a countdown)."""
        end = self.clock.monotonic() + seconds
        while True:
            left = end - self.clock.monotonic()
            report(max(0.0, left))
            if left <= 0:
                return
            self.heartbeat()
            self.clock.sleep(min(1.0, left))
