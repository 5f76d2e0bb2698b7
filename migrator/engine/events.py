"""Kubernetes Events for what the guard does, as client-go's `tools/events` recorder writes them
(`events.k8s.io/v1`): a key seen within SERIES_SECONDS is one more of its series (count patched
at most every PATCH_SECONDS); a token bucket per key (as `EventSourceObjectSpamFilter`) bounds a
flapping node's writes. `record` only queues; one worker writes; a failed write is only logged."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock
from migrator.engine.leader import microtime
from migrator.errors import APINotFound, ClusterError
from migrator.model import objects as o
from migrator.model.kinds import Kind

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]

EVENTS = Kind("events.k8s.io", "v1", "events", "Event", True, ("ev",))
REPORTING_CONTROLLER = "dcgm-migrate-guard"  # kubectl describe's "From"
NORMAL, WARNING = "Normal", "Warning"
SERIES_SECONDS = 360.0
PATCH_SECONDS = 30.0
BURST, REFILL_SECONDS = 25, 300.0
QUEUE_SIZE = 1000
NOTE_LIMIT = 1024  # events.k8s.io validation: `len(event.Note) > NoteLengthLimit`, Go bytes
IDLE_SECONDS = 1.0  # the worker's wake-up when nothing is queued (series patches fall due)


def typed(kind: Kind, obj: Mapping[str, Any]) -> Obj:
    """The object with its apiVersion and kind (a list's items may lack them)."""
    return {**obj, "apiVersion": obj.get("apiVersion") or kind.api_version,
            "kind": obj.get("kind") or kind.kind}


@dataclass(frozen=True)
class Occurrence:  # one thing the guard did or saw, about one object
    regarding: Mapping[str, Any]  # the object (its apiVersion, kind, name, namespace, uid)
    type: str
    reason: str
    action: str
    note: str
    at: datetime

    @property
    def key(self) -> tuple[str, ...]:
        meta = o.meta(self.regarding)
        return (str(self.regarding.get("kind")), str(meta.get("namespace") or ""),
                o.name(self.regarding), str(meta.get("uid") or ""), self.reason, self.action,
                self.type)

    def reference(self) -> Obj:
        meta = o.meta(self.regarding)
        ref = {"apiVersion": self.regarding.get("apiVersion"), "kind": self.regarding.get("kind"),
               "name": o.name(self.regarding), "namespace": meta.get("namespace"),
               "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")}
        return {k: v for k, v in ref.items() if v}


@dataclass
class _Series:  # one key's Event
    name: str
    count: int
    sent: int  # the count the API server holds
    last: datetime  # the last occurrence
    last_seen: float  # the same on the monotonic clock
    written: float  # when the last write was sent (monotonic)


class Aggregator:  # the pure part: per key, a new Event, one more of a series, or too many
    def __init__(self) -> None:
        self.series: dict[tuple[str, ...], _Series] = {}
        self._buckets: dict[tuple[str, ...], tuple[float, float]] = {}  # key → tokens, at

    def _take(self, key: tuple[str, ...], now: float) -> bool:
        tokens, at = self._buckets.get(key, (float(BURST), now))
        tokens = min(float(BURST), tokens + (now - at) / REFILL_SECONDS)
        if tokens < 1.0:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1.0, now)
        return True

    def observe(self, occ: Occurrence, now: float) -> str:
        """"create" (a token taken), "series" (counted) or "dropped" (over its key's rate)."""
        s = self.series.get(occ.key)
        if s is not None and now - s.last_seen <= SERIES_SECONDS:
            s.count += 1
            s.last, s.last_seen = occ.at, now
            return "series"
        self.series.pop(occ.key, None)
        return "create" if self._take(occ.key, now) else "dropped"

    def created(self, occ: Occurrence, name: str, now: float) -> None:
        self.series[occ.key] = _Series(name, 1, 1, occ.at, now, now)

    def due(self, now: float) -> list[tuple[tuple[str, ...], _Series]]:
        """Series with counts the server lacks, last written PATCH_SECONDS ago (a token taken);
        series that ended are forgotten."""
        out = []
        for key, s in list(self.series.items()):
            if now - s.last_seen > SERIES_SECONDS and s.count == s.sent:
                del self.series[key]
            elif s.count > s.sent and now - s.written >= PATCH_SECONDS and self._take(key, now):
                s.written = now
                out.append((key, s))
        return out


class Recorder:  # queues occurrences; one worker aggregates and writes them
    def __init__(self, kube: Kube, instance: str, clock: Clock, *,
                 log: Callable[[str], None] = lambda _: None,
                 counted: Callable[[str], None] = lambda _: None) -> None:
        self.kube, self.instance, self.clock = kube, instance, clock
        self.log, self.counted = log, counted
        self.aggregator = Aggregator()
        self._queue: queue.Queue[Occurrence] = queue.Queue(maxsize=QUEUE_SIZE)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed: set[str] = set()

    def record(self, regarding: Mapping[str, Any], type_: str, reason: str, action: str,
               note: str) -> None:
        """Queue one occurrence (a full queue drops it)."""
        if not o.meta(regarding).get("uid"):
            return  # kubectl describe finds Events by the object's uid
        try:
            note = note.encode()[:NOTE_LIMIT].decode("utf-8", "ignore")  # bytes, whole chars
            self._queue.put_nowait(Occurrence(regarding, type_, reason, action, note,
                                              self.clock.now()))
        except queue.Full:
            self.counted("dropped")

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True, name="guard-events")
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Write what is queued (within `timeout`), then end the worker."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @contextlib.contextmanager
    def running(self) -> Any:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    def _run(self) -> None:
        while True:
            try:
                self._handle(self._queue.get(timeout=IDLE_SECONDS))
            except queue.Empty:
                if self._stop.is_set():
                    return
            self._patch_due()

    def _handle(self, occ: Occurrence) -> None:
        now = self.clock.monotonic()
        verdict = self.aggregator.observe(occ, now)
        if verdict == "create":
            name = self._create(occ)
            if name:
                self.aggregator.created(occ, name, now)
        else:
            self.counted("aggregated" if verdict == "series" else "dropped")

    def _create(self, occ: Occurrence) -> str:
        ref, stamp = occ.reference(), int(occ.at.timestamp() * 1e9)
        name = f"{ref['name']}.{stamp:x}"
        body = {"apiVersion": EVENTS.api_version, "kind": EVENTS.kind,
                "metadata": {"name": name, "namespace": ref.get("namespace")},
                "eventTime": microtime(occ.at), "reportingController": REPORTING_CONTROLLER,
                "reportingInstance": self.instance[:128], "action": occ.action,
                "reason": occ.reason, "type": occ.type, "note": occ.note, "regarding": ref}
        try:
            self.kube.create(body, kind=EVENTS)
        except ClusterError as exc:
            self._fail(occ.reason, exc)
            return ""
        self.counted("created")
        return name

    def _patch_due(self) -> None:
        for key, s in self.aggregator.due(self.clock.monotonic()):
            patch = {"series": {"count": s.count, "lastObservedTime": microtime(s.last)}}
            try:
                self.kube.patch(EVENTS, s.name, key[1], patch)
            except APINotFound:  # expired meanwhile: a new Event carries the series on
                self.aggregator.series.pop(key, None)
                continue
            except ClusterError as exc:
                self._fail(key[4], exc)
                continue
            s.sent = s.count
            self.counted("series")

    def _fail(self, reason: str, exc: Exception) -> None:
        self.counted("failed")
        if reason not in self._failed:
            self._failed.add(reason)
            self.log(f"event {reason} not recorded ({exc}); the guard carries on")
