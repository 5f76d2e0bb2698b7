"""The default scheduler's Filter and Score for a pod no DaemonSet pins to a node, pure.

Upstream (pkg/scheduler/framework/plugins): the filters `NodeUnschedulable` ("node(s) were
unschedulable", unless the pod tolerates `node.kubernetes.io/unschedulable:NoSchedule`),
`NodeAffinity` (nodeSelector and required node affinity: "node(s) didn't match Pod's node
affinity/selector") and `TaintToleration` (an untolerated NoSchedule or NoExecute taint:
"node(s) had untolerated taint {key: value}"), in that order, the first failure naming the
node's reason; the required InterPodAffinity terms are `interpod.Placement`'s. A pod no node
passes gets the `FitError` message ("0/N nodes are available: ...", then the preemption
post-filter's "Preemption is not helpful for scheduling", the sim preempting nothing).

Score, simply: the default plugins' effect on equal nodes is to spread a workload
(`PodTopologySpread`'s system default constraints by hostname, `NodeResourcesBalancedAllocation`
and `LeastAllocated`): the node with the fewest pods of the same owner, then the fewest pods,
then the first by name. Left out: resources (requests against allocatable), ports, volumes,
preferred affinities' weights, zones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dcgm_sim.controllers.scheduling import fits_node_affinity, tolerates

UNSCHEDULABLE = "node(s) were unschedulable"
NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NOT_HELPFUL = "Preemption is not helpful for scheduling"


def filter_reason(pod_spec: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """None when `node` passes the node filters, else the first failing plugin's reason."""
    tolerations = pod_spec.get("tolerations") or []
    if (node.get("spec") or {}).get("unschedulable") and not any(
            tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations):
        return UNSCHEDULABLE
    if not fits_node_affinity(pod_spec, node):
        return NODE_AFFINITY
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    return None


def fit_error(total: int, reasons: Iterable[str]) -> str:
    """`FitError.Error()` with the preemption post-filter's message after it."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    listed = ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))
    return (f"0/{total} nodes are available: {listed}. preemption: 0/{total} nodes are "
            f"available: {total} {NOT_HELPFUL}.")


def pick(candidates: Iterable[str], same_owner: Mapping[str, int],
         per_node: Mapping[str, int]) -> str | None:
    """The spreading choice among the nodes that passed the filters."""
    return min(candidates, key=lambda n: (same_owner.get(n, 0), per_node.get(n, 0), n),
               default=None)
