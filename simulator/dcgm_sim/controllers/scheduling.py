"""Which nodes a DaemonSet pod fits: nodeSelector, required node affinity, taints/tolerations.

Mirrors `NodeShouldRunDaemonPod` in kubernetes/pkg/controller/daemon: a node that does not fit
the pod's node name, selector or affinity gets no pod; a node whose NoSchedule/NoExecute taints
the pod does not tolerate gets no new pod, and an existing pod keeps running there unless a
NoExecute taint is untolerated. Pure functions on raw dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# `AddOrUpdateDaemonPodTolerations`: every DaemonSet pod tolerates these.
DAEMON_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
NETWORK_UNAVAILABLE_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule",
}


def daemon_tolerations(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod's tolerations plus the DaemonSet ones it lacks (same order as upstream)."""
    out = [dict(t) for t in pod_spec.get("tolerations") or []]
    extra = list(DAEMON_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        extra.append(NETWORK_UNAVAILABLE_TOLERATION)
    for tol in extra:
        if not any(_same_toleration(tol, t) for t in out):
            out.append(dict(tol))
    return out


def _same_toleration(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(k, "") == b.get(k, "") for k in ("key", "operator", "value", "effect"))


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """`Toleration.ToleratesTaint`."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return bool((toleration.get("value") or "") == (taint.get("value") or ""))


def _untolerated(
    taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]], effects: set[str]
) -> bool:
    return any(
        taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations)
        for taint in taints
    )


def _match_expression(expr: Mapping[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and values:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def _term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches nothing
    labels = node.get("metadata", {}).get("labels") or {}
    for expr in exprs:
        if not _match_expression(expr, labels.get(expr.get("key", ""))):
            return False
    for expr in fields:
        value = node["metadata"]["name"] if expr.get("key") == "metadata.name" else None
        if not _match_expression(expr, value):
            return False
    return True


def fits_node_affinity(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """nodeSelector and requiredDuringSchedulingIgnoredDuringExecution node affinity."""
    labels = node.get("metadata", {}).get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required:
        terms = required.get("nodeSelectorTerms") or []
        return any(_term_matches(term, node) for term in terms)
    return True


def node_should_run(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """`NodeShouldRunDaemonPod`: (should run, should continue running) for a DaemonSet whose
    template spec is `pod_spec`."""
    wanted = pod_spec.get("nodeName")
    if wanted and wanted != node["metadata"]["name"]:
        return False, False
    if not fits_node_affinity(pod_spec, node):
        return False, False
    taints = node.get("spec", {}).get("taints") or []
    if not taints:
        return True, True
    tolerations = daemon_tolerations(pod_spec)
    if _untolerated(taints, tolerations, {"NoSchedule", "NoExecute"}):
        return False, not _untolerated(taints, tolerations, {"NoExecute"})
    return True, True


def pin_to_node(affinity: Mapping[str, Any] | None, node_name: str) -> dict[str, Any]:
    """`ReplaceDaemonSetPodNodeNameNodeAffinity`: require `metadata.name in (node)`, replacing
    any node-name field terms the template had."""
    out: dict[str, Any] = dict(affinity or {})
    node_affinity = dict(out.get("nodeAffinity") or {})
    term = {
        "matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node_name]},
        ]
    }
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [term]}
    out["nodeAffinity"] = node_affinity
    return out
