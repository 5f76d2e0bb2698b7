"""The plain data passed between the HTTP layer and the request handlers.

`Request`/`Response` keep handlers free of sockets (a handler returns a `Response`, possibly
with a `stream` for watches); `Backend` is the server state every handler may use.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dcgm_sim.access import AccessControl
from dcgm_sim.apilatency import WriteLatency
from dcgm_sim.encoding import ObjectEncoder, dumps
from dcgm_sim.faults import Faults
from dcgm_sim.requestlog import RequestLog
from dcgm_sim.statuses import ApiError
from dcgm_sim.store import Store

JSON = "application/json"
Obj = dict[str, Any]


@dataclass
class Request:
    method: str
    target: str  # path and query, as on the request line
    headers: Mapping[str, str]  # lower-case names
    body: bytes = b""

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


@dataclass
class Response:
    code: int
    body: bytes = b""
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    stream: Iterator[bytes | None] | None = None  # a watch: chunks, None = idle tick


def json_response(code: int, value: Any) -> Response:
    return Response(code, dumps(value))


def error_response(error: ApiError) -> Response:
    return Response(error.code, dumps(error.status()), headers=dict(error.headers))


class ListCache:
    """The last answers of `Store.list`, by query, valid while the store's resourceVersion has
    not moved: the pages of one paginated list (or repeated reads of a quiet cluster) filter
    the whole collection once instead of once per page, and hold the store lock once."""

    def __init__(self, max_entries: int = 64) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[int, list[Obj]]] = {}
        self._max = max_entries

    def get(self, key: Hashable, resource_version: int) -> list[Obj] | None:
        with self._lock:
            hit = self._entries.get(key)
        return hit[1] if hit is not None and hit[0] == resource_version else None

    def put(self, key: Hashable, resource_version: int, objects: list[Obj]) -> None:
        with self._lock:
            if len(self._entries) >= self._max:
                self._entries.clear()
            self._entries[key] = (resource_version, objects)


class OperatorControl(Protocol):
    """The GPU Operator imitation as `/sim/v1/operator` drives it (`OperatorImitation`)."""

    def status(self) -> dict[str, Any]: ...

    def set_release(self, release: str) -> None: ...


@dataclass
class Backend:
    """What request handling needs from the server."""

    store: Store
    faults: Faults
    log: RequestLog
    access: AccessControl
    encoder: ObjectEncoder
    stopping: threading.Event
    address: str = "127.0.0.1:0"
    bookmark_seconds: float = 60.0  # a watch's periodic BOOKMARK (allowWatchBookmarks)
    lists: ListCache = field(default_factory=ListCache)
    operator: OperatorControl | None = None  # `/sim/v1/operator` (None: no imitation)
    pod_logs: Any = None  # pods/log of pods run for real (`podlog.LogSource`; None: none)
    write_latency: WriteLatency | None = None  # a real server's write time (apilatency.py)
