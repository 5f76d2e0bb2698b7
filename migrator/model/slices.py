"""What marks an EndpointSlice, who renders a stable name, and the shape of a shared endpoint:
a leaf module, so the snapshot and guard need not import `model/sharing.py` (which re-exports
these names)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migrator.model import objects as o

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"  # the EndpointSlice controller's value
OPERATOR_KIND = "ClusterPolicy"  # the operator that replaces the stable names whole


def rendered_by(service: Mapping[str, Any]) -> str | None:
    """`ClusterPolicy/<name>` when its operator renders this Service (controller owner): a
    stable name the GPUCluster pods share, never take."""
    ref = o.controller_owner(service)
    if ref and ref.get("kind") == OPERATOR_KIND:
        return f"{OPERATOR_KIND}/{ref.get('name')}"
    return None


def _endpoint(ep: Mapping[str, Any], namespace: str) -> Obj:
    """The fields of a controller-made endpoint a shared slice carries, in a fixed shape."""
    ref = ep.get("targetRef") or {}
    cond = ep.get("conditions") or {}
    out: Obj = {"addresses": list(ep.get("addresses") or []),
                "conditions": {k: bool(cond[k]) for k in ("ready", "serving", "terminating")
                               if k in cond}}
    out.update({key: ep[key] for key in ("nodeName", "zone") if ep.get(key)})
    if ref:
        out["targetRef"] = {"kind": ref.get("kind", "Pod"), "name": ref.get("name"),
                            "namespace": ref.get("namespace") or namespace,
                            "uid": ref.get("uid")}
    return out


def _shaped(slice_: Mapping[str, Any], namespace: str) -> tuple[Obj, ...]:
    return tuple(ep if (shaped := _endpoint(ep, namespace)) == ep else shaped
                 for ep in slice_.get("endpoints") or [])


class ShapedEndpoints:
    """Each slice's endpoints shaped once per version (docs/performance.md: at 15,000 nodes this
    was most of a guard pass); one entry per uid, cleared when full. Do not mutate the result."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._by_uid: dict[str, tuple[str, str, tuple[Obj, ...]]] = {}

    def of(self, slice_: Mapping[str, Any], namespace: str) -> tuple[Obj, ...]:
        uid, version = str(o.meta(slice_).get("uid") or ""), o.resource_version(slice_)
        if not uid or not version:
            return _shaped(slice_, namespace)
        hit = self._by_uid.get(uid)
        if hit is not None and hit[0] == version and hit[1] == namespace:
            return hit[2]
        if len(self._by_uid) >= self._limit:
            self._by_uid.clear()
        shaped = _shaped(slice_, namespace)
        self._by_uid[uid] = (version, namespace, shaped)
        return shaped


def _endpoints_of(slice_: Mapping[str, Any], namespace: str,
                  shaped: ShapedEndpoints | None = None) -> tuple[Obj, ...]:
    """`_endpoint` of every endpoint of the slice, through `shaped` where the caller keeps one."""
    return shaped.of(slice_, namespace) if shaped is not None else _shaped(slice_, namespace)


def _key(ep: Mapping[str, Any]) -> str:
    ref = ep.get("targetRef") or {}
    return str(ref.get("uid") or ref.get("name") or ",".join(ep.get("addresses") or []))
