"""The status the GPU Operator writes on its CRs, as pure functions of the old status.

Upstream (NVIDIA/gpu-operator a22dbf671): `status.state` and `status.namespace` are written by
`updateCRState` (controllers/clusterpolicy_controller.go) and `updateCRStatus`
(controllers/gpucluster_controller.go), each only when the state changes; the conditions by
`internal/conditions/clusterpolicy.go` and `gpucluster.go` `updateConditions`: "Ready" sets
`Ready=True` (reason and message given) and `Error=False` (reason `Ready`); "Error" sets
`Ready=False` (reason `Error`, empty message) and `Error=True` (reason and message given), the
GPUCluster one also filling an empty state with `notReady`. Each condition goes through
apimachinery's `meta.SetStatusCondition`: appended when new, its `lastTransitionTime` moved
only when its status changes, reason and message replaced.

The messages are upstream's, word for word (`refused_message`, `conflict_message`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dcgm_sim.jsoncopy import clone

Obj = dict[str, Any]

READY = "Ready"
ERROR = "Error"
# internal/conditions/consts.go
RECONCILED = "Reconciled"
RECONCILE_FAILED = "ReconcileFailed"
OPERAND_NOT_READY = "OperandNotReady"
PREREQUISITE_NOT_MET = "PrerequisiteNotMet"
# api/nvidia/v1 and v1alpha1 `State`, internal/state/state.go `SyncState*`
STATE_READY = "ready"
STATE_NOT_READY = "notReady"

CLUSTERPOLICY_READY = "ClusterPolicy is ready as all resources have been successfully reconciled"
GPUCLUSTER_READY = "All resources have been successfully reconciled"
GPUCLUSTER_WAITING = "Waiting for operand pods to be ready"


def go_quote(text: str) -> str:
    """Go's `%q` of a Kubernetes object name (printable ASCII: quotes and backslashes escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def refused_message(clusterpolicy: str) -> str:
    """`validatePrerequisites` (gpucluster_controller.go) while a ClusterPolicy exists."""
    return (f"A ClusterPolicy CR {go_quote(clusterpolicy)} exists; a ClusterPolicy CR and "
            "GPUCluster CR may not exist at the same time")


def conflict_message(gpucluster: str) -> str:
    """The error clusterpolicy_controller.go `Reconcile` returns while a GPUCluster exists."""
    return (f"conflicting GPUCluster resource {go_quote(gpucluster)} detected; ClusterPolicy "
            "and GPUCluster cannot co-exist")


def not_ready_message(states: Sequence[str]) -> str:
    """`clusterPolicyNotReadyMessage` with operand states only (Go's `%v` of a []string)."""
    return f"ClusterPolicy is not ready; states not ready: [{' '.join(states)}]"


def _set_condition(conditions: list[Obj], new: Obj, now: str) -> None:
    """apimachinery `meta.SetStatusCondition` (observedGeneration stays 0: upstream sets none)."""
    for cond in conditions:
        if cond.get("type") == new["type"]:
            if cond.get("status") != new["status"]:
                cond["status"] = new["status"]
                cond["lastTransitionTime"] = now
            cond["reason"] = new["reason"]
            cond["message"] = new["message"]
            return
    conditions.append({"type": new["type"], "status": new["status"], "lastTransitionTime": now,
                       "reason": new["reason"], "message": new["message"]})


def with_state(status: Mapping[str, Any] | None, state: str, namespace: str) -> Obj:
    """`updateCRState` / `updateCRStatus`: state and namespace (unchanged when the state is)."""
    out = clone(dict(status or {}))
    if out.get("state") == state and out.get("namespace") == namespace:
        return out
    out["state"] = state
    out["namespace"] = namespace
    return out


def with_ready(status: Mapping[str, Any] | None, reason: str, message: str, now: str) -> Obj:
    """`SetConditionsReady(reason, message)`."""
    out = clone(dict(status or {}))
    conditions = out.setdefault("conditions", [])
    _set_condition(conditions, {"type": READY, "status": "True", "reason": reason,
                                "message": message}, now)
    _set_condition(conditions, {"type": ERROR, "status": "False", "reason": READY,
                                "message": ""}, now)
    return out


def with_error(status: Mapping[str, Any] | None, reason: str, message: str, now: str, *,
               gpucluster: bool) -> Obj:
    """`SetConditionsError(reason, message)`; the GPUCluster's also fills an empty state."""
    out = clone(dict(status or {}))
    conditions = out.setdefault("conditions", [])
    _set_condition(conditions, {"type": READY, "status": "False", "reason": ERROR,
                                "message": ""}, now)
    _set_condition(conditions, {"type": ERROR, "status": "True", "reason": reason,
                                "message": message}, now)
    if gpucluster and not out.get("state"):
        out["state"] = STATE_NOT_READY
    return out


def condition(status: Mapping[str, Any] | None, kind: str) -> Obj | None:
    """The condition of type `kind` in `status`, if any."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def clusterpolicy_daemonset_ready(ds: Mapping[str, Any]) -> bool:
    """controllers/object_controls.go `isDaemonSetReady`: none desired, or none unavailable and
    (RollingUpdate) `isDaemonSetRollingUpdateComplete`; for OnDelete upstream checks every pod's
    revision, phase and container readiness, here read from the updated and ready counts."""
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    if desired == 0:
        return True
    if int(status.get("numberUnavailable") or 0) != 0:
        return False
    updated = int(status.get("updatedNumberScheduled") or 0)
    if ((ds.get("spec") or {}).get("updateStrategy") or {}).get("type") == "OnDelete":
        return updated == desired and int(status.get("numberReady") or 0) == desired
    observed = int(status.get("observedGeneration") or 0)
    return (observed >= int((ds.get("metadata") or {}).get("generation") or 0)
            and updated == desired and int(status.get("numberAvailable") or 0) == desired)


def gpucluster_daemonset_ready(ds: Mapping[str, Any]) -> bool:
    """internal/state/state_skel.go `isDaemonSetReady`: zero desired, current and misscheduled
    once observed, or every desired pod available and updated."""
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    observed = int(status.get("observedGeneration") or 0)
    if (observed >= int((ds.get("metadata") or {}).get("generation") or 0) and desired == 0
            and not status.get("numberMisscheduled") and not status.get("currentNumberScheduled")):
        return True
    return desired != 0 and desired == available and int(
        status.get("updatedNumberScheduled") or 0) == available
