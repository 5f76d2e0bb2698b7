"""The watch stream: one `{"type": ..., "object": ...}` JSON line per event.

Semantics of the real watch cache (`apiserver/pkg/storage/cacher`): without a resourceVersion
(or "0") the stream opens with a synthetic ADDED per current object; from a resourceVersion it
replays the store's events after it, and one older than the event log (the watch window,
`Store.event_log_size`) gets a 200 stream holding one ERROR event with a 410 Expired Status, as
`cacher.Watch` answers with `newErrWatcher` rather than an HTTP error. Filtered watches report
an object that starts matching as ADDED and one that stops matching as DELETED (its previous
state with the event's resourceVersion).
`sendInitialEvents=true` ends the initial ADDED burst with the `k8s.io/initial-events-end`
BOOKMARK that client-go's watch-list expects. With `allowWatchBookmarks=true` the stream also
sends a BOOKMARK (kind, apiVersion and `metadata.resourceVersion` only: every event up to it has
been sent) every `bookmark_seconds` without one, and one more when `timeoutSeconds` ends it,
as the watch cache does (about once a minute, and shortly before the watch's deadline).

As a Table (`tables`), every event's object but an ERROR's Status is a one-row Table (the
BOOKMARK too: upstream's `watchEncoder` passes it through the same embedded encoder), and only
the stream's first event carries the column definitions (`watchEmbeddedEncoder.doEncode` sets
`NoHeaders` after it, handlers/response.go).

The stream is a generator: it yields encoded lines, and `None` when idle for a second so the
server can check the client is still there. It ends at `timeoutSeconds`, when the client goes
away, or when `stopping` is set. While the `stall_watches` fault is on it sends nothing (and
holds its events back), as a connection silently dropped on the way looks to the client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dcgm_sim import fieldselectors, tables
from dcgm_sim.encoding import ObjectEncoder, dumps
from dcgm_sim.fieldselectors import FieldSelector
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import Kind
from dcgm_sim.labelselectors import Selector
from dcgm_sim.statuses import expired
from dcgm_sim.store import Event, Obj, Store

IDLE_SECONDS = 1.0


@dataclass(frozen=True)
class WatchRequest:
    kind: Kind
    namespace: str  # "" = all namespaces
    labels: Selector
    fields: FieldSelector
    resource_version: int | None  # None: start with the current state
    timeout_seconds: float | None
    initial_events_end: bool = False
    as_table: bool = False  # kubectl get -w: each event's object is a one-row Table
    include_object: str = ""  # the Table rows' `includeObject` (validated by the caller)
    bookmarks: bool = False  # allowWatchBookmarks: periodic BOOKMARK events
    bookmark_seconds: float = 60.0  # real seconds between them
    # The `stall_watches` fault (faults.py): while true the stream sends nothing at all.
    stalled: Callable[[], bool] = lambda: False


def _matches(req: WatchRequest, obj: Obj) -> bool:
    meta = obj.get("metadata") or {}
    if req.namespace and meta.get("namespace", "") != req.namespace:
        return False
    return req.labels.matches(meta.get("labels")) and fieldselectors.matches(req.fields, obj)


class _Lines:
    """Encodes one watcher's events; a Table watch sends its column definitions once."""

    def __init__(self, encoder: ObjectEncoder, req: WatchRequest) -> None:
        self.encoder, self.req = encoder, req
        self.headers = True

    def object(self, obj: Obj, cached: bool) -> bytes:
        req = self.req
        if req.as_table:
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            data = dumps(tables.table(req.kind, [obj], meta, include=req.include_object,
                                      headers=self.headers))
            self.headers = False
            return data
        return self.encoder.encode(req.kind, obj) if cached else self.encoder.json(obj)

    def __call__(self, etype: str, obj: Obj, cached: bool) -> bytes:
        return b'{"type":"' + etype.encode() + b'","object":' + self.object(obj, cached) + b"}\n"


def _convert(line: _Lines, event: Event) -> bytes | None:
    """The event as this watcher sees it (filtered, possibly turned into ADDED/DELETED)."""
    req = line.req
    if event.resource.key != req.kind.key:
        return None
    if event.type == "DELETED":
        cur_passes, old_passes = False, _matches(req, event.object)
    elif event.type == "ADDED":
        cur_passes, old_passes = _matches(req, event.object), False
    else:
        cur_passes = _matches(req, event.object)
        old_passes = cur_passes if event.old is None else _matches(req, event.old)
    if cur_passes and old_passes:
        return line("MODIFIED", event.object, True)
    if cur_passes:
        return line("ADDED", event.object, True)
    if not old_passes:
        return None
    if event.type == "DELETED":
        return line("DELETED", event.object, False)
    gone = clone(event.old or event.object)
    gone["metadata"]["resourceVersion"] = str(event.resource_version)
    return line("DELETED", gone, False)


def _bookmark(line: _Lines, rv: int, initial_events_end: bool = False) -> bytes:
    kind = line.req.kind
    meta: Obj = {"resourceVersion": str(rv)}
    if initial_events_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}
    return line("BOOKMARK", obj, False)


def _error(message: str) -> bytes:
    return b'{"type":"ERROR","object":' + dumps(expired(message).status()) + b"}\n"


def stream(store: Store, encoder: ObjectEncoder, req: WatchRequest,
           stopping: threading.Event) -> Iterator[bytes | None]:
    """Yield event lines (or None when idle) until timeout, stop, or an expired start."""
    is_set = stopping.is_set
    line = _Lines(encoder, req)
    deadline = time.monotonic() + req.timeout_seconds if req.timeout_seconds else None
    if req.resource_version is None:
        with store.lock:
            objects, last_rv = store.list(req.kind, req.namespace or None, req.labels)
        for obj in objects:
            if fieldselectors.matches(req.fields, obj):
                yield line("ADDED", obj, True)
        if req.initial_events_end:
            yield _bookmark(line, last_rv, True)
    else:
        last_rv = req.resource_version
    changed = store.changes_of(req.kind)
    next_bookmark = time.monotonic() + req.bookmark_seconds if req.bookmarks else None
    while not is_set():
        now = time.monotonic()
        remaining = None if deadline is None else deadline - now
        if req.stalled():  # a connection gone silent: no event, no bookmark, not even the
            # end at timeoutSeconds; it lasts until the client gives up on it (or `stopping`)
            stopping.wait(IDLE_SECONDS / 10)
            yield None
            continue
        if remaining is not None and remaining <= 0:
            if req.bookmarks:
                yield _bookmark(line, last_rv)
            return
        if next_bookmark is not None and now >= next_bookmark:
            yield _bookmark(line, last_rv)
            next_bookmark = now + req.bookmark_seconds
        wait = min(x for x in (IDLE_SECONDS, remaining, None if next_bookmark is None
                               else max(0.0, next_bookmark - now)) if x is not None)
        with changed:
            events = store.events_since(last_rv)
            if events == [] and not is_set():
                changed.wait(wait)
                events = store.events_since(last_rv)
            horizon = store.horizon()
        if events is None:
            # watch_cache.go: `too old resource version: %d (%d)`, rv and oldest-1
            yield _error(f"too old resource version: {last_rv} ({horizon})")
            return
        lines = [text for e in events if (text := _convert(line, e)) is not None]
        if events:
            last_rv = events[-1].resource_version
        if lines:
            yield b"".join(lines)
        else:
            yield None
