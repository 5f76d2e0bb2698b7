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
# The API server releases the sim can serve as, by what differs in their JSON: up to v1.33 a
# zero `metadata.creationTimestamp` (a pod template's) is written as `null`; v1.34 omits it
# (kubernetes/kubernetes#130989, "Omit null creationTimestamp"; #134773 the rollouts it
# caused). The sim's objects, and the ControllerRevisions its kube-controller-manager writes,
# keep the `null`; served as v1.34 they are the skew an upgrade passes through, the API
# server a release ahead of the controller manager.
RELEASES = ("v1.32", "v1.34")


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class ObjectEncoder:
    """Serialise stored objects, caching bytes by (resource, namespace, name) + resourceVersion.

    Only pass objects that are (or were) committed to the store; dry-run results and other
    fabricated objects go through `dumps`.
    """

    def __init__(self, max_entries: int = 200_000, release: str = "v1.32") -> None:
        if release not in RELEASES:
            raise ValueError(f"the API server's release must be one of {', '.join(RELEASES)}, "
                             f"got {release!r}")
        self.release = release
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
        data = self.json(obj)
        with self._lock:
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[key] = (rv, data)
        return data

    def json(self, obj: Obj) -> bytes:
        """The object as this release serialises it, uncached (a write's answer)."""
        if self.release == "v1.32":
            return dumps(obj)
        return dumps(_sans_null_timestamps(obj))

    def on_event(self, event: Event) -> None:
        """Store subscriber: forget a deleted object's bytes (quick, runs under the store lock)."""
        if event.type == "DELETED":
            meta = event.object.get("metadata") or {}
            self._cache.pop((event.resource.key, meta.get("namespace", ""),
                             meta.get("name", "")), None)


def _sans_null_timestamps(obj: Obj) -> Obj:
    """`obj` without a `null` creationTimestamp in its metadata or its pod template's
    (`omitzero`, v1.34); shares every other part with `obj`, which it never changes."""
    def sans(meta: Any) -> Any:
        if isinstance(meta, dict) and meta.get("creationTimestamp", "") is None:
            return {k: v for k, v in meta.items() if k != "creationTimestamp"}
        return meta

    out = {**obj, "metadata": sans(obj.get("metadata"))} if "metadata" in obj else dict(obj)
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    if isinstance(spec, dict) and isinstance(template, dict) and "metadata" in template:
        out["spec"] = {**spec, "template": {**template, "metadata": sans(template["metadata"])}}
    return out
