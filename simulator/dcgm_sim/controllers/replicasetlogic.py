"""The ReplicaSet controller's decisions, pure: which pods go first when it scales down, and
its status. The I/O is `replicasets.py`.

Upstream: `getPodsToDelete` / `getPodsRankedByRelatedPodsOnSameNode` and
`controller.ActivePodsWithRanks.Less` (pkg/controller/replicaset/replica_set.go,
pkg/controller/controller_utils.go), `calculateStatus` (replica_set_utils.go). Left out of the
ranking: the `controller.kubernetes.io/pod-deletion-cost` feature gate's absence (the cost is
always read), logarithmic ready-time buckets (`LogarithmicScaleDown`: exact times are
compared); of the status: the ReplicaFailure condition and `terminatingReplicas`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import workloadpods as W

Obj = dict[str, Any]
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def _cost(pod: Mapping[str, Any]) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(DELETION_COST, "0")
    try:
        return int(raw)
    except ValueError:
        return 0


def _restarts(pod: Mapping[str, Any]) -> int:
    return max((int(c.get("restartCount") or 0)
                for c in (pod.get("status") or {}).get("containerStatuses") or []), default=0)


def pods_to_delete(pods: Sequence[Obj], related: Sequence[Obj], count: int,
                   ready_since: Callable[[str], float | None]) -> list[Obj]:
    """The `count` pods to delete first: unassigned before assigned, Pending before Running,
    not Ready before Ready, lower deletion cost, more pods of the owner on the same node, Ready
    for less time, more restarts, newer."""
    on_node = Counter(P.node_name(p) for p in related if W.is_active(p) and P.node_name(p))

    def rank(pod: Obj) -> tuple[Any, ...]:
        node = P.node_name(pod)
        ready = P.is_pod_ready(pod)
        since = ready_since(str(pod["metadata"].get("uid"))) if ready else None
        created = P.parse_rfc3339(pod["metadata"].get("creationTimestamp")) or 0.0
        return (1 if node else 0,
                _PHASE_RANK.get((pod.get("status") or {}).get("phase") or "", 0),
                1 if ready else 0, _cost(pod), -on_node.get(node, 0) if node else 0,
                -(since if since is not None else float("inf")), -_restarts(pod), -created)

    return sorted(pods, key=rank)[:max(0, count)]


def calculate_status(rs: Mapping[str, Any], pods: Sequence[Obj],
                     is_available: Callable[[Obj], bool]) -> Obj:
    """`calculateStatus` + `updateReplicaSetStatus`: counters over the active pods and the
    observed generation (zero counters left out, as their `omitempty` does; `replicas` has
    none)."""
    template_labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get(
        "labels") or {}
    labelled = ready = avail = 0
    for pod in pods:
        labels = P.labels_of(pod)
        if all(labels.get(k) == v for k, v in template_labels.items()):
            labelled += 1
        if P.is_pod_ready(pod):
            ready += 1
            if is_available(pod):
                avail += 1
    status: Obj = {"replicas": len(pods)}
    for field, value in (("fullyLabeledReplicas", labelled), ("readyReplicas", ready),
                         ("availableReplicas", avail)):
        if value:
            status[field] = value
    generation = int(rs["metadata"].get("generation") or 0)
    if generation:
        status["observedGeneration"] = generation
    old_conditions = (rs.get("status") or {}).get("conditions")
    if old_conditions:
        status["conditions"] = old_conditions
    return status
