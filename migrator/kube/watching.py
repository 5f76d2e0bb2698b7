"""Reading a watch stream: newline-delimited JSON events from an open HTTP response.

A watch that ends (server timeout, dropped connection) simply stops yielding: the caller
re-watches from the last resourceVersion it saw. An `ERROR` event carries a `Status`; 410
(the resourceVersion was compacted) becomes `WatchExpired` so the caller lists again.

Bookmarks. Every watch asks for them (`allowWatchBookmarks=true`, as client-go's reflector
does: tools/cache/reflector.go, `watchList`/`ListAndWatch` set `AllowWatchBookmarks: true`). A
BOOKMARK says every event up to its resourceVersion has been sent; it is never handed to the
caller, only to `bookmarked`, so a reflector re-watches from it, not from an older version
the server may already have compacted. The watch cache sends one about once a minute
(staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go, `defaultBookmarkFrequency =
time.Minute`) and one just before the watch's deadline (cache_watcher.go, `nextBookmarkTime`).

A silent connection. client-go notices a dead one by TCP keepalive and, on HTTP/2, by pinging
a connection idle for 30 s (apimachinery/pkg/util/net/http.go, `readIdleTimeoutSeconds`);
urllib3 speaks HTTP/1.1 and cannot ping. So a watch's socket read times out when nothing —
no event, no bookmark — came for `idle_seconds`: the bookmark cadence plus a quarter (75 s),
the margin the watch cache keeps events for (cacher.go, `DefaultEventFreshDuration =
defaultBookmarkFrequency + 15*time.Second`). A healthy stream is never that quiet, and the
server ends it first at `timeoutSeconds` (after a last bookmark); a stalled one ends within
the bound, and the caller re-watches from its last version.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import urllib3

from migrator.kube.statuses import error_for
from migrator.model import tables

Obj = dict[str, Any]
T = TypeVar("T")


def _chunks(raw: Any) -> Iterator[bytes]:
    """Bytes as they arrive: per HTTP chunk, or whatever is available on a plain stream."""
    if getattr(raw, "chunked", False):
        yield from raw.read_chunked(decode_content=True)
        return
    while True:
        data = raw.read1(65536)
        if not data:
            return
        yield data


def lines(raw: Any) -> Iterator[bytes]:
    """Complete lines from the stream; ends quietly when the connection ends."""
    buf = b""
    try:
        for chunk in _chunks(raw):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield line
    except (urllib3.exceptions.HTTPError, OSError):
        return  # the stream was cut: the watch is over, the caller re-watches
    if buf.strip():
        yield buf


BOOKMARK_SECONDS = 60.0  # the watch cache's bookmark cadence (module docstring)
IDLE_MARGIN = 0.25  # of the cadence: 15 s at a minute, the watch cache's own margin


def idle_seconds(timeout_seconds: float, bookmark_seconds: float = BOOKMARK_SECONDS) -> float:
    """The socket read timeout of a watch asking for bookmarks: the server sends something at
    least every `bookmark_seconds` and ends the watch at `timeout_seconds`, so silence a
    quarter longer than the shorter of the two means the connection is gone (75 s by
    default, where it was the watch's whole 300 s plus 15)."""
    return min(float(timeout_seconds), bookmark_seconds) * (1 + IDLE_MARGIN)


def _version(obj: Obj) -> str:
    """A BOOKMARK's resourceVersion: the object's, or a Table's list metadata."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if obj.get("kind") == "Table":
        for row in obj.get("rows") or ():
            version = ((row.get("object") or {}).get("metadata") or {}).get(
                "resourceVersion") or version
    return str(version or "")


def events(raw: Any, *, path: str, api_version: str, kind: str,
           bookmarked: Callable[[str], None] | None = None) -> Iterator[tuple[str, Obj]]:
    """(type, object) per ADDED/MODIFIED/DELETED event; a BOOKMARK's version goes to
    `bookmarked`; ERROR raised."""
    try:
        for line in lines(raw):
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn last line of a cut stream
            etype = event.get("type")
            obj = event.get("object") or {}
            if etype == "ERROR":
                code = int(obj.get("code") or 500)
                raise error_for(code, json.dumps(obj).encode(), method="WATCH", path=path)
            if etype == "BOOKMARK":
                version = _version(obj)
                if version and bookmarked is not None:
                    bookmarked(version)
                continue
            if etype not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            yield etype, obj
    finally:
        raw.close()  # close before releasing: a half-read stream must not be reused
        raw.release_conn()


class Stream:
    """An open watch: iterate for (type, object) events; `stop()` from another thread shuts
    the socket down so a read blocked on a quiet stream returns and the iteration ends."""

    def __init__(self, raw: Any, *, path: str, api_version: str, kind: str,
                 seen: Callable[[Obj], None] | None = None,
                 bookmarked: Callable[[str], None] | None = None) -> None:
        self._raw = raw
        self._events = events(raw, path=path, api_version=api_version, kind=kind,
                              bookmarked=bookmarked)
        self._seen = seen

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> tuple[str, Obj]:
        etype, obj = next(self._events)
        if self._seen is not None:
            self._seen(obj)
        return etype, obj

    def stop(self) -> None:
        # ValueError/RuntimeError: the stream already ended and was closed or released.
        with contextlib.suppress(AttributeError, OSError, ValueError, RuntimeError):
            self._raw.shutdown()


class TableStream(Generic[T]):
    """An open Table watch: (type, item) per event, each row made an item by `of_row`. The
    first event carries the column definitions; later ones are named by them. An event that
    is the object itself (a server or proxy that ignored the Table request) becomes an item by
    `of_object`, so a reader degrades to the whole-object watch, not to polling. `seen` is
    told of every item (the run cache's fences, `Kube.observe`)."""

    def __init__(self, stream: Stream, of_row: Callable[[tables.Row], T],
                 of_object: Callable[[Obj], T], seen: Callable[[T], None] | None = None) -> None:
        self._stream = stream
        self._of_row, self._of_object, self._seen = of_row, of_object, seen
        self._columns: tuple[str, ...] | None = None
        self._pending: list[tuple[str, T]] = []

    def __iter__(self) -> TableStream[T]:
        return self

    def __next__(self) -> tuple[str, T]:
        while not self._pending:
            etype, table = next(self._stream)
            if table.get("kind") != "Table":  # a server (or proxy) that ignored the Accept
                self._pending = [(etype, self._of_object(table))]
                continue
            self._columns = tables.column_names(table) or self._columns
            if self._columns is None:
                raise tables.TableError("a Table watch event came before any column definitions")
            self._pending = [(etype, self._of_row(row))
                             for row in tables.rows(table, self._columns)]
        etype, item = self._pending.pop(0)
        if self._seen is not None:
            self._seen(item)
        return etype, item

    def stop(self) -> None:
        self._stream.stop()


class Events(Protocol):
    """What a reader of a watch needs: (type, object) events and a way to end them."""

    def __iter__(self) -> Iterator[tuple[str, Obj]]: ...

    def stop(self) -> None: ...
