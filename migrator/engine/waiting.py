"""Waiting with watches (no fixed polling) and a deadline: a rollout, or gates that must come
true. A rollout's deadline is a *progress* deadline (as `progressDeadlineSeconds`): no pod
updated or available for `timeout` seconds, however long the whole rollout takes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migrator.engine import interrupts
from migrator.engine.clock import Clock, SystemClock
from migrator.errors import APIError
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult, describe, failed, rollout_complete, rollout_counts
from migrator.model.kinds import Kind
from migrator.model.tables import Row, TableError, counts_look_complete, rollout_view

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]


@dataclass
class Pace:
    """When a pod last became updated or available (the deadline counts from then); `eta`."""

    started: float
    moved: float = 0.0
    first_updated: int | None = None
    best: tuple[int, int] = (-1, -1)
    eta: float | None = None

    def __post_init__(self) -> None:
        self.moved = self.started

    def note(self, ds: Obj, now: float) -> None:
        updated, available, desired = rollout_counts(ds)
        if self.first_updated is None:
            self.first_updated = updated
            self.best = (updated, available)
            return
        if updated > self.best[0] or available > self.best[1]:
            self.moved = now
        self.best = (max(self.best[0], updated), max(self.best[1], available))
        done = updated - self.first_updated
        self.eta = None
        if done > 0 and updated < desired:
            self.eta = (now - self.started) / done * (desired - updated)


@dataclass(frozen=True)
class RolloutOutcome:
    """Complete, or stalled `stalled_for` seconds (and what `blocked` found); `ds`: the last."""

    ds: Obj | None
    complete: bool
    blocked: str = ""
    stalled_for: float = 0.0


def _seconds(timeout: float) -> int:
    """A watch's `timeoutSeconds`: whole seconds, rounded up, at least one."""
    return max(1, int(timeout + 0.999))


@dataclass
class Waiter:
    kube: Kube
    namespace: str
    clock: Clock = field(default_factory=SystemClock)
    heartbeat: Callable[[], None] = lambda: None
    recheck_min: float = 0.05
    recheck_max: float = 1.0
    # A gate wait (`until`) longer than this says what it waits for, and again when that changes.
    patience: float = 5.0

    def _beat(self) -> None:
        """Every pass: a dropped signal stops the run here (interrupts.py); the lock is renewed."""
        interrupts.check()
        self.heartbeat()

    def rollout(self, daemonset: str, timeout: float, report: Callable[[Obj, Pace], None],
                blocked: Callable[[], str] | None = None,
                probe_every: float = 30.0) -> RolloutOutcome:
        """Follow one DaemonSet until its rollout is complete or makes no progress for
        `timeout` seconds. While stuck, `blocked` is asked every `probe_every` seconds what
        holds it; an answer (a lost node: waiting cannot help) ends the wait at once."""
        pace = Pace(self.clock.monotonic())
        next_probe = pace.started + min(probe_every, timeout)
        backoff = self.recheck_min  # after a failed watch: doubles up to recheck_max
        by_name = f"metadata.name={daemonset}"
        while True:
            self._beat()
            # Read as a list of one: the watch below starts from the list's version, which is
            # current. The DaemonSet's own version dates from its last change, and a real API
            # server's watch cache may have moved past it while a rollout stalls (410, again
            # at every pass).
            listed = self.kube.list(kinds.DAEMONSET, self.namespace, field_selector=by_name)
            ds = listed.items[0] if listed.items else None
            if ds is None:
                return RolloutOutcome(None, False)
            pace.note(ds, self.clock.monotonic())
            report(ds, pace)
            if rollout_complete(ds).ok:
                return RolloutOutcome(ds, True)
            now = self.clock.monotonic()
            if blocked is not None and now >= next_probe:
                quiet = min(probe_every, timeout)
                if now - pace.moved >= quiet:
                    why = blocked()
                    if why:
                        return RolloutOutcome(ds, False, why, now - pace.moved)
                    next_probe = now + quiet
                else:
                    next_probe = pace.moved + quiet
            remaining = pace.moved + timeout - now
            if remaining <= 0:
                return RolloutOutcome(ds, False, "", now - pace.moved)

            def follow(etype: str, row: Row, next_probe: float = next_probe) -> bool:
                if etype == "DELETED":
                    return False  # the read at the top of the loop says so
                if etype in ("ADDED", "MODIFIED"):
                    view = rollout_view(row)
                    pace.note(view, self.clock.monotonic())
                    report(view, pace)
                    self._beat()
                    if counts_look_complete(view):
                        return False  # confirmed (or not) by the read at the top of the loop
                now = self.clock.monotonic()
                return now < pace.moved + timeout and (blocked is None or now < next_probe)

            wait = min(remaining, 30.0)
            if blocked is not None:
                wait = min(wait, max(next_probe - now, self.recheck_min))
            try:  # one DaemonSet's printed rows until `follow` says False or `wait`
                for etype, row in self.kube.watch_table(
                        kinds.DAEMONSET, self.namespace, timeout_seconds=_seconds(wait),
                        resource_version=listed.resource_version, field_selector=by_name):
                    if not follow(etype, row):
                        break
                backoff = self.recheck_min
            except (APIError, TableError):  # refused or broken at once: must not become a read loop
                self.clock.sleep(min(wait, backoff))
                backoff = min(backoff * 2, self.recheck_max)

    def until(self, check: Callable[[], list[GateResult]], deadline: float,
              wake_kind: Kind = kinds.ENDPOINTSLICE,
              label_selector: str | None = None,
              fatal: Callable[[list[GateResult]], bool] | None = None,
              waiting: Callable[[list[GateResult]], None] = lambda failed: None,
              patience: float | None = None) -> list[GateResult]:
        """Re-run `check` until every gate passes, `fatal` says waiting cannot heal a failure,
        or the deadline; the last results. A wait past `patience` seconds (default: the
        waiter's) is told to `waiting` (the failed gates), and again each time they change."""
        patience = self.patience if patience is None else patience
        delay = self.recheck_min
        rv = ""
        started, told = self.clock.monotonic(), ""
        while True:
            self._beat()
            results = check()
            if all(r.ok for r in results) or (fatal is not None and fatal(results)):
                return results
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0:
                return results
            if self.clock.monotonic() - started >= patience and describe(results) != told:
                told = describe(results)
                waiting(failed(results))
            if not rv:  # the collection's current version, from one printed row of it
                rv = next(iter(self.kube.pages(wake_kind, self.namespace, page_size=1,
                                               label_selector=label_selector, printed=True)
                               )).resource_version
            start, timeout = self.clock.monotonic(), min(remaining, delay)
            try:  # woken by an event of `wake_kind` (a printed row) or the timeout
                for _, obj in self.kube.watch(
                        wake_kind, self.namespace, resource_version=rv,
                        label_selector=label_selector, timeout_seconds=_seconds(timeout),
                        printed=True):
                    rv = str(o.meta(obj).get("resourceVersion") or rv)
                    break
            except APIError:
                self.clock.sleep(min(timeout, self.recheck_min))
                rv = ""
            # Let a burst of related changes land before re-reading.
            spent = self.clock.monotonic() - start
            if spent < delay:
                self.clock.sleep(min(delay - spent, max(0.0, deadline - self.clock.monotonic()),
                                     self.recheck_min))
            delay = min(delay * 2, self.recheck_max)

    def settle(self, seconds: float, report: Callable[[float], None]) -> None:
        """Give kube-proxy time to program a selector change everywhere (a countdown)."""
        end = self.clock.monotonic() + seconds
        while True:
            left = end - self.clock.monotonic()
            report(max(0.0, left))
            if left <= 0:
                return
            self._beat()
            self.clock.sleep(min(1.0, left))
