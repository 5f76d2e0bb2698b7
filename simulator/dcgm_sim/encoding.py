"""JSON bytes for API responses, with each stored object serialised once per resourceVersion.

A paginated list of 10,000 pods would otherwise spend most of its time in `json.dumps`.
Stored objects are immutable and a resourceVersion names exactly one committed state, so the
bytes can be reused until the object changes; entries of deleted objects are dropped when the
store reports the deletion.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from dcgm_sim.kinds import Kind
from dcgm_sim.store import Event

Obj = dict[str, Any]
_CacheKey = tuple[str, str, str]


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class ObjectEncoder:
    """Serialise stored objects, caching bytes by (resource, namespace, name) + resourceVersion.

    Only pass objects that are (or were) committed to the store; dry-run results and other
    fabricated objects go through `dumps`.
    """

    def __init__(self, max_entries: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._cache: dict[_CacheKey, tuple[str, bytes]] = {}
        self._max = max_entries

    def encode(self, kind: Kind, obj: Obj) -> bytes:
        meta = obj.get("metadata") or {}
        key = (kind.key, meta.get("namespace", ""), meta.get("name", ""))
        rv = meta.get("resourceVersion", "")
        hit = self._cache.get(key)
        if hit is not None and hit[0] == rv:
            return hit[1]
        data = dumps(obj)
        with self._lock:
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[key] = (rv, data)
        return data

    def on_event(self, event: Event) -> None:
        """Store subscriber: forget a deleted object's bytes (quick, runs under the store lock)."""
        if event.type == "DELETED":
            meta = event.object.get("metadata") or {}
            self._cache.pop((event.resource.key, meta.get("namespace", ""),
                             meta.get("name", "")), None)
