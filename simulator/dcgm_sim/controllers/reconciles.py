"""The `Reconcile` of the GPU Operator's ClusterPolicy and GPUCluster controllers, over an
`Operand` (the operator imitation, `operator.py`, which reads and writes the store).

From NVIDIA/gpu-operator a22dbf671:

- controllers/clusterpolicy_controller.go `Reconcile`: the singleton ClusterPolicy; while any
  GPUCluster exists (and the release refuses coexistence) `updateCRState(NotReady)`, the Error
  condition `ReconcileFailed` with "conflicting GPUCluster resource %q detected; ClusterPolicy
  and GPUCluster cannot co-exist", and the error returned before any operand is touched (so
  the rate limiter requeues it). Otherwise every state is stepped (the DCGM and Exporter
  objects here); a state whose DaemonSet is not ready (`isDaemonSetReady`) makes it NotReady
  with `OperandNotReady` "ClusterPolicy is not ready; states not ready: [...]" and a 5 s
  requeue; else Ready with `Reconciled` and no requeue.
- controllers/gpucluster_controller.go `Reconcile`: `validatePrerequisites` first — while a
  ClusterPolicy exists (refusing releases), `updateCRStatus(NotReady)`, the Error condition
  `PrerequisiteNotMet` with "A ClusterPolicy CR %q exists; a ClusterPolicy CR and GPUCluster CR
  may not exist at the same time", a requeue after a minute, nothing rendered or deleted.
  Otherwise `SyncState` (render, create or update, `deleteStateRelatedObjects` for disabled
  states, which keeps the state NotReady while it found objects), then `ready` with
  `Reconciled` and a minute's requeue, or `notReady` with `OperandNotReady` "Waiting for
  operand pods to be ready" and 5 s. Before all of it, `EnsureFinalizer` puts
  `gpucluster.nvidia.com/dra-resourceclaim` on every GPUCluster not being deleted (upstream
  since 312d21518, so in every release modelled here); a GPUCluster being deleted goes to
  `reconcileDelete` instead: each DaemonSet it controls whose pod template claims resources
  (`spec.template.spec.resourceClaims`: the DCGM and exporter DaemonSets of the golden
  fixtures) is deleted with `propagationPolicy: Foreground`, which keeps it until its pods are
  gone, and while any is left the CR keeps its finalizer and requeues after 5 s; then the
  finalizer goes and the CR with it. So the old stack's pods are gone before the GPUCluster is.
  Its `DrainingClaimConsumers` Event is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from dcgm_sim.controllers import crstatus as C
from dcgm_sim.controllers import operatorqueue as Q
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import releases
from dcgm_sim.controllers import rendering as R

Obj = dict[str, Any]
StatusChange = Callable[[Mapping[str, Any] | None, str], Obj]
CP, GC = Q.CLUSTERPOLICY, Q.GPUCLUSTER
CLUSTER_POLICY, GPU_CLUSTER = "ClusterPolicy", "GPUCluster"
GPUCLUSTER_FINALIZER = "gpucluster.nvidia.com/dra-resourceclaim"  # `gpuClusterFinalizer`

# internal/state/state_skel.go `getSupportedGVKs` (a22dbf671; the same in the fork): the
# (group, version, kind)s whose objects a disabled GPUCluster state's cleanup lists by label.
# Kinds the sim does not serve are skipped, as upstream skips unserved ones (IsNoMatchError).
STATE_SKEL_GVKS = frozenset({
    ("", "v1", "ServiceAccount"), ("", "v1", "ConfigMap"), ("apps", "v1", "DaemonSet"),
    ("apps", "v1", "Deployment"), ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io", "v1", "Role"), ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
    ("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition"), ("batch", "v1", "CronJob"),
    ("security.openshift.io", "v1", "SecurityContextConstraints"), ("", "v1", "Pod"),
    ("", "v1", "Service"), ("monitoring.coreos.com", "v1", "ServiceMonitor"),
    ("scheduling.k8s.io", "v1", "PriorityClass"), ("", "v1", "Taint"),
    ("policy", "v1beta1", "PodSecurityPolicy"), ("node.k8s.io", "v1", "RuntimeClass"),
    ("monitoring.coreos.com", "v1", "PrometheusRule"),
    ("resource.k8s.io", "v1", "ResourceClaimTemplate"),
    ("resource.k8s.io", "v1beta2", "ResourceClaimTemplate"),
    ("resource.k8s.io", "v1beta1", "ResourceClaimTemplate"),
})


class Operand(Protocol):
    """What a reconcile reads and writes (kinds by name)."""

    namespace: str
    deletions: int  # DELETEs that found their object, so far

    def singleton(self, kind: str) -> Obj | None: ...

    def crs(self, kind: str) -> list[Obj]: ...

    def find(self, obj: Mapping[str, Any]) -> Obj | None: ...

    def write_status(self, kind: str, cr: Obj, change: StatusChange) -> None: ...

    def sync(self, kind: str, cr: Obj, release: releases.Release) -> list[Obj]: ...

    def daemonsets(self) -> list[Obj]: ...

    def delete_foreground(self, obj: Obj) -> None: ...

    def set_finalizer(self, kind: str, cr: Obj, finalizer: str, present: bool) -> None: ...


def oldest(crs: list[Obj]) -> Obj:
    """The singleton upstream picks (`getSingletonClusterPolicy`): oldest, then by name."""
    return min(crs, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                   c["metadata"]["name"]))


def daemonset_states(objs: list[Obj]) -> list[tuple[str, str]]:
    """(state, DaemonSet name) of each rendered DaemonSet, in render order."""
    out = []
    for obj in objs:
        if obj["kind"] != "DaemonSet":
            continue
        name = obj["metadata"]["name"]
        state = (obj["metadata"].get("labels") or {}).get(R.STATE_LABEL) or (
            "state-dcgm" if name in R.DCGM_NAMES else "state-dcgm-exporter")
        out.append((state, name))
    return out


def _ds_ready(op: Operand, name: str, ready: Callable[[Mapping[str, Any]], bool]) -> bool:
    ds = op.find({"kind": "DaemonSet", "metadata": {"namespace": op.namespace, "name": name}})
    return ds is not None and ready(ds)


def _error(op: Operand, kind: str, cr: Obj, reason: str, message: str) -> None:
    op.write_status(kind, cr, lambda s, now: C.with_error(
        C.with_state(s, C.STATE_NOT_READY, op.namespace), reason, message, now,
        gpucluster=kind == GPU_CLUSTER))


def _ready(op: Operand, kind: str, cr: Obj, message: str) -> None:
    op.write_status(kind, cr, lambda s, now: C.with_ready(
        C.with_state(s, C.STATE_READY, op.namespace), C.RECONCILED, message, now))


def clusterpolicy(op: Operand, release: releases.Release, queue: Q.Requeues) -> float | None:
    """One ClusterPolicy `Reconcile`: the requeue delay it asks for (None: none)."""
    cr = op.singleton(CLUSTER_POLICY)
    if cr is None:
        queue.forget(CP)
        return None
    gpuclusters = sorted(c["metadata"]["name"] for c in op.crs(GPU_CLUSTER))
    if gpuclusters and not release.coexistence:
        _error(op, CLUSTER_POLICY, cr, C.RECONCILE_FAILED, C.conflict_message(gpuclusters[0]))
        return queue.failed(CP)
    queue.forget(CP)
    objs = op.sync(CLUSTER_POLICY, cr, release)
    not_ready = [state for state, name in daemonset_states(objs)
                 if not _ds_ready(op, name, C.clusterpolicy_daemonset_ready)]
    if not_ready:
        _error(op, CLUSTER_POLICY, cr, C.OPERAND_NOT_READY, C.not_ready_message(not_ready))
        return Q.NOT_READY_REQUEUE
    _ready(op, CLUSTER_POLICY, cr, C.CLUSTERPOLICY_READY)
    return None


def gpucluster(op: Operand, release: releases.Release) -> float | None:
    """The GPUCluster `Reconcile` of every GPUCluster: the earliest requeue delay they ask for."""
    delays = []
    for cr in op.crs(GPU_CLUSTER):
        if cr["metadata"].get("deletionTimestamp"):
            delays.append(reconcile_delete(op, cr))
        elif GPUCLUSTER_FINALIZER not in (cr["metadata"].get("finalizers") or []):
            op.set_finalizer(GPU_CLUSTER, cr, GPUCLUSTER_FINALIZER, True)  # `EnsureFinalizer`
    delays.append(_gpucluster_sync(op, release))
    return min((d for d in delays if d is not None), default=None)


def reconcile_delete(op: Operand, cr: Obj) -> float | None:
    """`reconcileDelete`: drain the DaemonSets `cr` controls whose pods claim resources (each
    deleted in the foreground, so it stays until its pods are gone), then drop the finalizer."""
    if GPUCLUSTER_FINALIZER not in (cr["metadata"].get("finalizers") or []):
        return None
    uid = cr["metadata"]["uid"]
    draining = [ds for ds in op.daemonsets()  # `metav1.IsControlledBy`
                if (P.controller_ref(ds) or {}).get("uid") == uid
                and (ds["spec"]["template"].get("spec") or {}).get("resourceClaims")]
    for ds in draining:
        if not ds["metadata"].get("deletionTimestamp"):
            op.delete_foreground(ds)
    if draining:
        return Q.NOT_READY_REQUEUE
    op.set_finalizer(GPU_CLUSTER, cr, GPUCLUSTER_FINALIZER, False)
    return None


def _gpucluster_sync(op: Operand, release: releases.Release) -> float | None:
    """The rest of `Reconcile`, for the singleton GPUCluster not being deleted."""
    cr = op.singleton(GPU_CLUSTER)
    if cr is None:
        return None
    policies = op.crs(CLUSTER_POLICY)
    if policies and not release.coexistence:
        message = C.refused_message(oldest(policies)["metadata"]["name"])
        _error(op, GPU_CLUSTER, cr, C.PREREQUISITE_NOT_MET, message)
        return Q.GPUCLUSTER_READY_REQUEUE
    deleted = op.deletions
    objs = op.sync(GPU_CLUSTER, cr, release)
    ready = (op.deletions == deleted  # `found` objects of a disabled state: not ready yet
             and all(op.find(o) is not None for o in objs  # a ServiceMonitor: with its CRD
                     if o["kind"] != "ServiceMonitor")
             and all(_ds_ready(op, name, C.gpucluster_daemonset_ready)
                     for _, name in daemonset_states(objs)))
    if not ready:
        _error(op, GPU_CLUSTER, cr, C.OPERAND_NOT_READY, C.GPUCLUSTER_WAITING)
        return Q.NOT_READY_REQUEUE
    _ready(op, GPU_CLUSTER, cr, C.GPUCLUSTER_READY)
    return Q.GPUCLUSTER_READY_REQUEUE
