"""Small pure helpers over raw Kubernetes objects (dicts as the API returns them)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
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


def observed(obj: Mapping[str, Any]) -> bool:
    """Its controller's status speaks of its current spec: `observedGeneration` has caught up
    with `generation` (an object without a generation has nothing to catch up with)."""
    generation = meta(obj).get("generation")
    return generation is None or int(dig(obj, "status", "observedGeneration") or 0) >= generation


def template_containers(daemonset: Mapping[str, Any] | None) -> tuple[list[Obj], list[Obj]]:
    """A DaemonSet's pod-template containers and init containers (its pods run the template)."""
    spec = dig(daemonset, "spec", "template", "spec") or {}
    return list(spec.get("containers") or []), list(spec.get("initContainers") or [])


def controller_owner(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with `controller: true`, if any (Kubernetes allows at most one)."""
    ref = next((r for r in meta(obj).get("ownerReferences") or [] if r.get("controller")), None)
    return dict(ref) if ref else None


SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # what marks a Service's EndpointSlices
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"  # the EndpointSlice controller's value
OPERATOR_KIND = "ClusterPolicy"  # the operator that replaces the stable names whole


def rendered_by(service: Mapping[str, Any]) -> str | None:
    """`ClusterPolicy/<name>` when its operator renders this Service (controller owner): a
    stable name the GPUCluster pods share, never take."""
    ref = controller_owner(service)
    if ref and ref.get("kind") == OPERATOR_KIND:
        return f"{OPERATOR_KIND}/{ref.get('name')}"
    return None


def resource_version(obj: Mapping[str, Any]) -> str:
    """The object's resourceVersion (opaque: a write's precondition), or "" when it has none."""
    return str(meta(obj).get("resourceVersion") or "")


def int_version(rv: object) -> int:
    """A resourceVersion as an integer (comparable since Kubernetes 1.30); 0 if not one."""
    try:
        return int(str(rv))
    except ValueError:
        return 0


def target_port(port: Mapping[str, Any]) -> Any:
    """A Service port's `targetPort` (a number or a container port's name; default its port)."""
    return port.get("targetPort", port.get("port"))


def resolve_port(port: Mapping[str, Any],
                 container_ports: Iterable[Mapping[str, Any]]) -> int | None:
    """A Service port's targetPort for a pod with these container ports (a name resolves against
    those of its protocol, as `findPort`)."""
    target = target_port(port)
    if target is None:
        return None
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    protocol = port.get("protocol") or "TCP"
    return next((int(p["containerPort"]) for p in container_ports
                 if p.get("name") == target and (p.get("protocol") or "TCP") == protocol), None)


def _condition(pod: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    return next((c for c in dig(pod, "status", "conditions") or []
                 if isinstance(c, Mapping) and c.get("type") == ctype), None)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Ready condition True and not being deleted (what the EndpointSlice controller uses)."""
    ready = _condition(pod, "Ready")
    return bool(ready and ready.get("status") == "True" and not meta(pod).get("deletionTimestamp"))


def terminating(obj: Mapping[str, Any] | None) -> str | None:
    """Why a deleted object is still there (its finalizers), or None when not being deleted."""
    if obj is None or not meta(obj).get("deletionTimestamp"):
        return None
    finalizers = ", ".join(str(f) for f in meta(obj).get("finalizers") or []) or "none"
    return f"Terminating since {meta(obj)['deletionTimestamp']}, held by finalizers {finalizers}"


def pod_not_ready_reason(pod: Mapping[str, Any]) -> str:
    """Why a pod is not Ready, in a few words ("" when it is): terminating, unschedulable (a DRA
    claim, or the scheduler's reason), starting, or Running but not Ready (a failing probe)."""
    if pod_ready(pod):
        return ""
    if meta(pod).get("deletionTimestamp"):
        return "terminating"
    phase = dig(pod, "status", "phase") or "Pending"
    scheduled = _condition(pod, "PodScheduled")
    if phase == "Pending" and scheduled is not None and scheduled.get("status") == "False":
        message = str(scheduled.get("message") or "")
        if "cannot allocate all claims" in message:
            return "Pending: claim not allocated"
        if "resource claim" in message:
            return "Pending: claim not created"
        return f"Pending: {scheduled.get('reason') or 'Unschedulable'}"
    return "Running, not Ready" if phase == "Running" else str(phase)


# What a DaemonSet held on OnDelete by the tool (phase 1 in place) carries: its own
# updateStrategy as JSON, restored by the run that set it, a resumed run, or a rollback.
HELD_STRATEGY = "dcgm-migrate/held-update-strategy"


def held_strategy(daemonset: Mapping[str, Any]) -> dict[str, Any] | None:
    """The updateStrategy the tool holds this DaemonSet away from (None: not held)."""
    raw = annotations_of(daemonset).get(HELD_STRATEGY)
    return dict(json.loads(raw)) if raw else None


def update_strategy(daemonset: Mapping[str, Any]) -> str:
    return str(dig(daemonset, "spec", "updateStrategy", "type") or "RollingUpdate")


def max_unavailable(daemonset: Mapping[str, Any], desired: int) -> int:
    """The rolling-update budget in nodes: an int, or a percent of `desired` rounded up as the
    DaemonSet controller does (default 1; 0 only with maxSurge > 0)."""
    raw = dig(daemonset, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable")
    if raw is None:
        return 1
    if isinstance(raw, str) and raw.endswith("%"):
        return -(-int(raw[:-1]) * desired // 100)
    return int(raw)
