"""When the GPU Operator's two controllers reconcile: their triggers and requeues, pure.

From NVIDIA/gpu-operator a22dbf671 (`SetupWithManager` and `Reconcile` of
controllers/clusterpolicy_controller.go and controllers/gpucluster_controller.go,
internal/state/gpucluster.go `gpuClusterDaemonSetSource`) and controller-runtime:

- ClusterPolicy controller: its CR (`GenerationChangedPredicate`: create, delete, spec changes,
  the deletion mark of a CR with finalizers, which moves its generation),
  every event of a DaemonSet it controls (`EnqueueRequestForOwner`, `OnlyControllerOwner`), Node
  events that pass `addWatchNewGPUNode`'s predicate (`node_triggers`), and GPUCluster events
  (`GenerationChangedPredicate`). Requeue after 5 s while a state is not ready; nothing while
  ready; after an error (the coexistence conflict) the rate limiter's backoff,
  `NewTypedItemExponentialFailureRateLimiter(100ms, 3s)`, reset by a success.
- GPUCluster controller: its CR (`GenerationChangedPredicate`) and every event of a DaemonSet it
  controls. Requeue after a minute when ready or refused (`validatePrerequisites`), 5 s when not
  ready.
- Both: the manager's informers resync every `SyncPeriod` (controller-runtime's default 10 h;
  the GPU Operator sets none), which delivers an update of every owned DaemonSet and so a
  reconcile of each CR that owns one.

A requeue keeps the earliest pending time per item, as client-go's delaying queue does
(`AddAfter` of an item already waiting only moves it earlier); an event reconciles at once and
leaves a pending requeue in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLUSTERPOLICY, GPUCLUSTER = "clusterpolicy-controller", "gpu-cluster-controller"  # upstream's
NOT_READY_REQUEUE = 5.0  # `ctrl.Result{RequeueAfter: time.Second * 5}`
GPUCLUSTER_READY_REQUEUE = 60.0  # `ctrl.Result{RequeueAfter: time.Minute}`
SYNC_PERIOD = 10 * 3600.0  # controller-runtime's default `SyncPeriod`
BACKOFF_BASE, BACKOFF_MAX = 0.1, 3.0  # `minDelayCR`, `maxDelayCR`

# addWatchNewGPUNode (controllers/clusterpolicy_controller.go) and state_manager.go's keys
GPU_PRESENT = "nvidia.com/gpu.present"
OPERANDS = "nvidia.com/gpu.deploy.operands"
WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
OSTREE = "feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"
DRIVER_LABELS = ("nvidia.com/gpu-operator.driver.owner", "nvidia.com/gpu-driver-upgrade-state",
                 "nvidia.com/gpu-driver-upgrade.skip")
NFD_GPU_LABELS = ("feature.node.kubernetes.io/pci-10de.present",
                  "feature.node.kubernetes.io/pci-0302_10de.present",
                  "feature.node.kubernetes.io/pci-0300_10de.present")


def labels_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def node_triggers(kind: str, old: Mapping[str, Any] | None, new: Mapping[str, Any],
                  mode_label: str | None = None) -> bool:
    """Whether a Node event (ADDED/MODIFIED/DELETED) passes `addWatchNewGPUNode`'s predicate.
    `mode_label`: also a change of that label, as the predicate did before 9654928ac (the
    releases that let both stacks coexist)."""
    labels = labels_of(new)
    if kind == "ADDED":
        return any(labels.get(k) == "true" for k in NFD_GPU_LABELS)
    if kind == "DELETED":
        gpu = any(labels.get(k) == "true" for k in NFD_GPU_LABELS)
        return (gpu and OSTREE in labels) or bool(labels.get(DRIVER_LABELS[0]))
    before = labels_of(old)
    keys = [WORKLOAD_CONFIG, OSTREE, *DRIVER_LABELS, *([mode_label] if mode_label else [])]
    return ((before.get(GPU_PRESENT) != "true" and labels.get(GPU_PRESENT) == "true")
            or (before.get(OPERANDS) == "false") != (labels.get(OPERANDS) == "false")
            or any(before.get(k) != labels.get(k) for k in keys))


def controller_kind(obj: Mapping[str, Any] | None) -> str | None:
    """The kind of the controller ownerReference of `obj` (`metav1.GetControllerOf`)."""
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind"))
    return None


def generation_changed(event_type: str, old: Mapping[str, Any] | None,
                       new: Mapping[str, Any]) -> bool:
    """`GenerationChangedPredicate`: creates and deletes pass, an update only when
    `metadata.generation` moved (a CR's labels and annotations move no generation, so touching
    them reconciles nothing). The sim's `sim.dcgm-migrate/renders-common-labels` annotation (an
    operator upgrade, which restarts the operator and so reconciles) passes too."""
    if event_type != "MODIFIED" or old is None:
        return True
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    key = "sim.dcgm-migrate/renders-common-labels"  # rendering.RENDERS_COMMON_LABELS
    return bool(before.get("generation") != after.get("generation")
                or (before.get("annotations") or {}).get(key)
                != (after.get("annotations") or {}).get(key))


def triggered(event_type: str, kind: str, old: Mapping[str, Any] | None, new: Mapping[str, Any],
              mode_label: str | None = None) -> set[str]:
    """Which controllers (`CLUSTERPOLICY`, `GPUCLUSTER`) an event of `kind` enqueues."""
    if kind == "DaemonSet":
        owners = {controller_kind(new), controller_kind(old)}
        return ({CLUSTERPOLICY} if "ClusterPolicy" in owners else set()) | (
            {GPUCLUSTER} if "GPUCluster" in owners else set())
    if kind == "Node":
        return {CLUSTERPOLICY} if node_triggers(event_type, old, new, mode_label) else set()
    if kind not in ("ClusterPolicy", "GPUCluster") or not generation_changed(event_type, old,
                                                                             new):
        return set()
    # the ClusterPolicy controller watches GPUClusters too
    return {CLUSTERPOLICY} if kind == "ClusterPolicy" else {CLUSTERPOLICY, GPUCLUSTER}


class Requeues:
    """Per item (a controller's name), the earliest pending requeue and the failure count."""

    def __init__(self) -> None:
        self._due: dict[str, float] = {}
        self._failures: dict[str, int] = {}

    def add_after(self, item: str, now: float, delay: float) -> float | None:
        """Requeue `item` after `delay`; the due time to set a timer for, or None when one at
        least as early is pending already."""
        due = now + delay
        pending = self._due.get(item)
        if pending is not None and pending <= due:
            return None
        self._due[item] = due
        return due

    def fired(self, item: str, due: float) -> bool:
        """A timer set by `add_after` went off: True when it is still the pending one."""
        if self._due.get(item) != due:
            return False
        del self._due[item]
        return True

    def failed(self, item: str) -> float:
        """The rate limiter's delay after one more failure (100 ms doubling, at most 3 s)."""
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        return float(min(BACKOFF_MAX, BACKOFF_BASE * 2 ** failures))

    def forget(self, item: str) -> None:
        """A reconcile succeeded: the failure count starts again."""
        self._failures.pop(item, None)
