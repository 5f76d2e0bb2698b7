"""Small pure helpers over raw Kubernetes objects (dicts as the API returns them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def dig(obj: Mapping[str, Any] | None, *path: str) -> Any:
    """`obj[path[0]][path[1]]...`, or None where any level is missing."""
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def template_labels(daemonset: Mapping[str, Any]) -> dict[str, str]:
    return dict(dig(daemonset, "spec", "template", "metadata", "labels") or {})


def controller_owner(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with `controller: true`, if any (Kubernetes allows at most one)."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Ready condition True and not being deleted (what the EndpointSlice controller uses)."""
    if meta(pod).get("deletionTimestamp"):
        return False
    for cond in dig(pod, "status", "conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def update_strategy(daemonset: Mapping[str, Any]) -> str:
    return str(dig(daemonset, "spec", "updateStrategy", "type") or "RollingUpdate")


def max_unavailable(daemonset: Mapping[str, Any], desired: int) -> int:
    """The DaemonSet's rolling-update budget in nodes (int or percent, rounded up; default 1).

    A percentage rounds up as the DaemonSet controller does for maxUnavailable; a budget of 0
    (only possible with maxSurge > 0) is reported as 0.
    """
    raw = dig(daemonset, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable")
    if raw is None:
        return 1
    if isinstance(raw, str) and raw.endswith("%"):
        pct = int(raw[:-1])
        return -(-pct * desired // 100)
    return int(raw)
