"""The GPU Operator's `NodeLabelingReconciler` for the DCGM deploy labels, pure (upstream
controllers/nodelabeling_controller.go, state_manager.go, active_config.go at a22dbf671).

It reconciles one singleton key on a CR's create, delete or generation change
(`singletonCRPredicate`) and on a node change its predicate passes
(`getNodeLabelUpdateReasons`: the common GPU label, the operands label, the workload config;
not the deploy labels themselves). It labels for the one active CR (`resolveActiveConfig`; a
CR being deleted still counts) and does nothing with none or both. On a GPU node
(`nvidia.com/gpu.present=true`) it adds the active stack's deploy labels where absent or empty
(a value set, such as "false", is honoured: `addGPUStateLabels`) and removes the other stack's
(`removeGPUStateLabels` under a ClusterPolicy sweeps every DRA key; under a GPUCluster
`devicePluginOnlyStateLabelKeys`, which holds `gpu.deploy.dcgm` and `gpu.deploy.dcgm-exporter`).
A node without the common GPU label, or with `nvidia.com/gpu.deploy.operands=false`, loses
every state label (`removeAllGPUStateLabels`). Modelled for the DCGM components' keys of the
container workload only: the other operands' keys and the vm workloads are left alone."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dcgm_sim.controllers import operatorqueue as Q
from dcgm_sim.controllers import rendering as R

CONTAINER = "container"  # the default workload config (`defaultGPUWorkloadConfig`)
DCGM_KEYS = frozenset(k for keys in R.DEPLOY_LABELS.values() for k in keys)


def active_stack(cluster_policies: Sequence[Any], gpu_clusters: Sequence[Any]) -> str | None:
    """The stack the node labels follow: None with no CR or with both (the reconciler errors
    out: "only one may be present at a time")."""
    if bool(cluster_policies) == bool(gpu_clusters):
        return None
    return R.CLUSTERPOLICY if cluster_policies else R.GPUCLUSTER


def relabelled(labels: Mapping[str, str], stack: str) -> dict[str, str] | None:
    """The node's labels once `updateGPUStateLabels` ran for `stack`; None when unchanged."""
    if labels.get(Q.WORKLOAD_CONFIG, CONTAINER) != CONTAINER:
        return None
    new = dict(labels)
    if labels.get(Q.GPU_PRESENT) != "true" or labels.get(Q.OPERANDS) == "false":
        for key in DCGM_KEYS:
            new.pop(key, None)
    else:
        for key in R.DEPLOY_LABELS[R.GPUCLUSTER if stack == R.CLUSTERPOLICY else R.CLUSTERPOLICY]:
            new.pop(key, None)
        for key in R.DEPLOY_LABELS[stack]:
            if not new.get(key):
                new[key] = "true"
    return None if new == dict(labels) else new


def node_triggers(event_type: str, old: Mapping[str, Any] | None,
                  new: Mapping[str, Any]) -> bool:
    """The reconciler's node predicate: a GPU node created, or a change of the labels it
    labels by (the deploy labels are not among them)."""
    labels = Q.labels_of(new)
    if event_type == "ADDED":
        return any(labels.get(k) == "true" for k in Q.NFD_GPU_LABELS) or (
            labels.get(Q.GPU_PRESENT) == "true")
    if event_type == "DELETED":
        return False
    before = Q.labels_of(old)
    return any(before.get(k) != labels.get(k)
               for k in (Q.GPU_PRESENT, Q.OPERANDS, Q.WORKLOAD_CONFIG))
