"""What a shared EndpointSlice is, apart from what decides them (`model/sharing.py`): the
labels that mark one, the object that keeps them (`Keeper`), one write to one of them
(`SliceWrite`), and the shape a shared endpoint takes. Pure; `model/sharing.py` re-exports
every name, so callers keep reading them there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.model import objects as o
from migrator.model.stacks import Common

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"  # the EndpointSlice controller's value
SHARED_FROM_ANNOTATION = "dcgm-migrate/shared-from"
# Endpoints per slice: the EndpointSlice controller's default (--max-endpoints-per-slice).
MAX_ENDPOINTS = 100
IPV4, IPV6 = "IPv4", "IPv6"
OPERATOR_KIND = "ClusterPolicy"  # the operator that replaces the stable names whole
CREATE, UPDATE, DELETE = "create", "update", "delete"


@dataclass(frozen=True)
class Keeper:
    """The object the shared slices belong to (their one ownerReference): the guard's Lease."""

    api_version: str
    kind: str
    name: str
    uid: str

    @staticmethod
    def of(obj: Mapping[str, Any]) -> Keeper:
        return Keeper(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), o.name(obj),
                      str(o.meta(obj).get("uid") or ""))

    def reference(self) -> Obj:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name,
                "uid": self.uid, "controller": False}


@dataclass(frozen=True)
class SliceWrite:
    """One write to one shared EndpointSlice."""

    action: str  # create | update | delete
    name: str
    service: str  # the stable name it belongs to
    reason: str
    body: Obj = field(default_factory=dict)  # create / update: the whole slice
    resource_version: str = ""  # update / delete: the version it was decided on

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "endpointSlice": self.name, "service": self.service,
                "reason": self.reason,
                "endpoints": len(self.body.get("endpoints") or []) if self.body else 0}



def is_shared_slice(slice_: Mapping[str, Any], common: Common) -> bool:
    """A slice this tool manages: its managed-by values on both labels."""
    labels = o.labels(slice_)
    return bool(labels.get(MANAGED_BY_LABEL) == common.managed_by.value
                and common.tool_owned(slice_))


def rendered_by(service: Mapping[str, Any]) -> str | None:
    """`ClusterPolicy/<name>` when the ClusterPolicy's operator renders this Service (its
    controller ownerReference): a stable name the GPUCluster pods share, never take."""
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
    for key in ("nodeName", "zone"):
        if ep.get(key):
            out[key] = ep[key]
    if ref:
        out["targetRef"] = {"kind": ref.get("kind", "Pod"), "name": ref.get("name"),
                            "namespace": ref.get("namespace") or namespace,
                            "uid": ref.get("uid")}
    return out


def _shaped(slice_: Mapping[str, Any], namespace: str) -> tuple[Obj, ...]:
    out = []
    for ep in slice_.get("endpoints") or []:
        shaped = _endpoint(ep, namespace)
        out.append(ep if shaped == ep else shaped)
    return tuple(out)


class ShapedEndpoints:
    """Each slice's endpoints as `_endpoint` shapes them, once per version of the slice.

    A version names one content, so a reader that sees the same slices pass after pass (the
    guard's reconciler owns one) shapes each once: at 15,000 nodes shaping every endpoint on
    every pass was most of the guard's decision (docs/performance.md, "Guard with both
    stacks"). One entry per slice uid (its latest version seen); cleared when full. An
    endpoint already in shape is kept as it is, not copied: do not mutate what it returns."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._by_uid: dict[str, tuple[str, str, tuple[Obj, ...]]] = {}

    def of(self, slice_: Mapping[str, Any], namespace: str) -> tuple[Obj, ...]:
        meta = o.meta(slice_)
        uid, version = str(meta.get("uid") or ""), o.resource_version(slice_)
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

