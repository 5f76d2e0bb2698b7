"""Reading a watch: newline-delimited JSON events. A watch that ends just stops (the caller
re-watches); an `ERROR` event raises its Status (410: `WatchExpired`). A BOOKMARK goes only to
`bookmarked`, as in client-go's reflector, but a Table watch's column definitions come on its
first event whatever it is (upstream `watchEmbeddedEncoder`), so they are read off a BOOKMARK
too. urllib3 cannot ping an idle connection, so a watch silent for `idle_seconds` ends by read
timeout."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import urllib3

from migrator.kube.transport import error_for
from migrator.model import tables

Obj = dict[str, Any]
T = TypeVar("T")
BOOKMARK_SECONDS = 60.0  # the watch cache's bookmark cadence (cacher.go defaultBookmarkFrequency)
IDLE_MARGIN = 0.25  # of the cadence: 15 s at a minute (cacher.go DefaultEventFreshDuration)


def idle_seconds(timeout_seconds: float, bookmark_seconds: float = BOOKMARK_SECONDS) -> float:
    """A watch's read timeout: a quarter over the shorter of the bookmark cadence and the
    watch's own timeout (75 s by default); silence that long means the connection is gone."""
    return min(float(timeout_seconds), bookmark_seconds) * (1 + IDLE_MARGIN)


def lines(raw: Any) -> Iterator[bytes]:
    """Complete lines as they arrive; ends quietly when the connection ends."""
    buf = b""
    chunks = (raw.read_chunked(decode_content=True) if getattr(raw, "chunked", False)
              else iter(lambda: raw.read1(65536), b""))
    try:
        for chunk in chunks:
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield line
    except (urllib3.exceptions.HTTPError, OSError):
        return  # the stream was cut: the watch is over, the caller re-watches
    if buf.strip():
        yield buf


def _version(obj: Obj) -> str:
    """A BOOKMARK's resourceVersion: the object's, or a Table's list metadata."""
    version = (obj.get("metadata") or {}).get("resourceVersion")
    if obj.get("kind") == "Table":
        for row in obj.get("rows") or ():
            version = ((row.get("object") or {}).get("metadata") or {}).get(
                "resourceVersion") or version
    return str(version or "")


def read_events(raw: Any, *, path: str, api_version: str, kind: str,
                of_object: Callable[[Obj], T], of_row: Callable[[tables.Row], T] | None = None,
                seen: Callable[[T], None] | None = None,
                bookmarked: Callable[[str], None] | None = None) -> Iterator[tuple[str, T]]:
    """(type, item) per ADDED/MODIFIED/DELETED event of the open watch `raw`, by `of_object`, or
    for a Table watch each row by `of_row` (a plain object still by `of_object`). `seen` is told
    of every item."""
    columns: tuple[str, ...] | None = None
    try:
        for line in lines(raw):
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn last line of a cut stream
            etype, obj = event.get("type"), event.get("object") or {}
            if etype == "ERROR":
                code = int(obj.get("code") or 500)
                raise error_for(code, json.dumps(obj).encode(), method="WATCH", path=path)
            if of_row is not None and obj.get("kind") == "Table":
                columns = tables.column_names(obj) or columns
            if etype == "BOOKMARK":
                version = _version(obj)
                if version and bookmarked is not None:
                    bookmarked(version)
                continue
            if etype not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            if of_row is None or obj.get("kind") != "Table":
                items = [of_object(obj)]
            else:
                if columns is None:
                    raise tables.TableError(
                        "a Table watch event came before any column definitions")
                items = [of_row(row) for row in tables.rows(obj, columns)]
            for item in items:
                if seen is not None:
                    seen(item)
                yield etype, item
    finally:
        raw.close()  # close before releasing: a half-read stream must not be reused
        raw.release_conn()


class Stream(Generic[T]):
    """An open watch: its events (`read_events`); `stop()` from another thread shuts the
    socket."""

    def __init__(self, raw: Any, events: Iterator[tuple[str, T]]) -> None:
        self._raw, self._events = raw, events

    def __iter__(self) -> Stream[T]:
        return self

    def __next__(self) -> tuple[str, T]:
        return next(self._events)

    def stop(self) -> None:
        # ValueError/RuntimeError: the stream already ended and was closed or released.
        with contextlib.suppress(AttributeError, OSError, ValueError, RuntimeError):
            self._raw.shutdown()


class Events(Protocol):
    """What a reader of a watch needs: (type, object) events and a way to end them."""

    def __iter__(self) -> Iterator[tuple[str, Obj]]: ...

    def stop(self) -> None: ...
