"""Node failure: the kubelet stops posting status, the node lifecycle controller reacts.

After kubernetes/pkg/controller/nodelifecycle/node_lifecycle_controller.go:

- `monitorNodeHealth`: a node whose kubelet has not posted status for
  `--node-monitor-grace-period` (50 s since Kubernetes v1.32, 40 s before) gets its Ready,
  MemoryPressure, DiskPressure and PIDPressure conditions set to Unknown (reason
  `NodeStatusUnknown`, "Kubelet stopped posting node status."). When Ready leaves True the
  controller runs `MarkPodsNotReady` (pkg/controller/util/node/controller_utils.go): the Ready
  condition of every pod on the node turns False (nothing else changes); `processPod` does the
  same to any pod that is Ready on a node whose Ready condition is not True.
- `doNoScheduleTaintingPass` / `doNoExecuteTaintingPass`: Ready Unknown →
  `node.kubernetes.io/unreachable`, Ready False → `node.kubernetes.io/not-ready`, each as a
  NoSchedule and a NoExecute taint (the NoExecute one with `timeAdded`); Ready True removes them.
  DaemonSet pods tolerate both NoExecute taints (`AddOrUpdateDaemonPodTolerations`, see
  scheduling.py), so nothing is evicted; the NoSchedule taint takes the node out of the
  DaemonSet's desired set (`NodeShouldRunDaemonPod`), and its pod there stays unavailable, which
  consumes the rolling update's maxUnavailable budget (pkg/controller/daemon/update.go).

The failure itself is a sim fault on the Node, so any client can drive it through the API: the
annotation `sim.dcgm-migrate/node-failed: "true"` stops that node's kubelet (no pod starts, no
readiness change, no container stops: its Terminating pods stay Terminating), and the grace
period counts from when it appeared. Removing it is the kubelet coming back: it posts Ready
(`KubeletReady`) at once, the taints go, and the kubelet resumes its pods. Not modelled: pod
eviction (taint-based eviction spares DaemonSet pods anyway), the Lease objects, zone
disruption rate limits, node startup grace.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller, NodeCache
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NODE_FAILED_ANNOTATION = "sim.dcgm-migrate/node-failed"
GRACE_SECONDS = 50.0
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"
_HEALTH_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


def node_failed(node: Mapping[str, Any] | None) -> bool:
    """Has the sim stopped this node's kubelet?"""
    annotations = (node or {}).get("metadata", {}).get("annotations") or {}
    return str(annotations.get(NODE_FAILED_ANNOTATION, "")).strip().lower() == "true"


def ready_status(node: Mapping[str, Any] | None) -> str:
    """The node's Ready condition status: True, False or Unknown (True when it has none)."""
    for cond in (node or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status") or "Unknown")
    return "True"


def wanted_taints(node: Mapping[str, Any], now: str) -> list[Obj]:
    """The node's taints with the lifecycle controller's own set to what Ready says."""
    status = ready_status(node)
    old = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    keep = [t for t in old if t.get("key") not in (UNREACHABLE, NOT_READY)]
    key = {"Unknown": UNREACHABLE, "False": NOT_READY}.get(status)
    if key is None:
        return keep
    for effect in ("NoSchedule", "NoExecute"):
        same = next((t for t in old if t.get("key") == key and t.get("effect") == effect), None)
        if same is None:
            same = {"key": key, "effect": effect}
            if effect == "NoExecute":
                same["timeAdded"] = now
        keep.append(same)
    return keep


def unknown_conditions(node: Mapping[str, Any], now: str) -> list[Obj]:
    """`tryUpdateNodeHealth`: the health conditions set Unknown, as when the kubelet is silent."""
    out = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        cond = dict(cond)
        if cond.get("type") in _HEALTH_CONDITIONS and cond.get("status") != "Unknown":
            cond.update(status="Unknown", reason="NodeStatusUnknown",
                        message="Kubelet stopped posting node status.", lastTransitionTime=now)
        out.append(cond)
    return out


_KUBELET_REASONS = {"Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
                    "MemoryPressure": ("False", "KubeletHasSufficientMemory",
                                       "kubelet has sufficient memory available"),
                    "DiskPressure": ("False", "KubeletHasNoDiskPressure",
                                     "kubelet has no disk pressure"),
                    "PIDPressure": ("False", "KubeletHasSufficientPID",
                                    "kubelet has sufficient PID available")}


def ready_conditions(node: Mapping[str, Any], now: str) -> list[Obj]:
    """What a kubelet that is back posts: Ready True, no pressure (pkg/kubelet/nodestatus)."""
    out = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        cond = dict(cond)
        healthy = _KUBELET_REASONS.get(str(cond.get("type")))
        if healthy is not None:
            status, reason, message = healthy
            if cond.get("status") != status:
                cond["lastTransitionTime"] = now
            cond.update(status=status, reason=reason, message=message, lastHeartbeatTime=now)
        out.append(cond)
    return out


def pod_not_ready(pod: Mapping[str, Any], now: str) -> Obj:
    """`MarkPodsNotReady` for one pod: its Ready condition False, nothing else changed."""
    status: Obj = dict(pod.get("status") or {})
    conds = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "False":
            cond = dict(cond, status="False", lastTransitionTime=now)
        conds.append(cond)
    status["conditions"] = conds
    return status


class NodeLifecycleController(Controller):
    """Node health after a kubelet stops: conditions, taints, pods marked not Ready."""

    name = "nodelifecycle"
    resources = frozenset({kinds.NODE.key, kinds.POD.key})

    def __init__(self, store: Store, clock: SimClock, *,
                 grace_seconds: float = GRACE_SECONDS) -> None:
        super().__init__(store, clock)
        self.grace_seconds = grace_seconds
        self._nodes = NodeCache()
        self._pods: dict[str, set[tuple[str, str]]] = {}  # node -> pod keys
        self._failing: set[str] = set()  # nodes with a grace timer running

    def prime(self) -> None:
        self._nodes.prime(self.store)
        for name in self._nodes:
            self.schedule(("node", name), 0)
        for pod in self.store.list(kinds.POD)[0]:
            self._pods.setdefault(P.node_name(pod), set()).add(_key(pod))

    def wants(self, event: Event) -> bool:
        if event.resource is kinds.POD:
            # A pod matters only when it is Ready on a node whose Ready is not True, or moves.
            return event.type != "MODIFIED" or P.is_pod_ready(event.object)
        return True

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        nodes: set[str] = set()
        pods: set[tuple[str, str]] = set()
        for ev in events:
            obj = ev.object
            if ev.resource is kinds.NODE:
                name = self._nodes.note(ev)
                if ev.type == "DELETED":
                    self._failing.discard(name)
                    continue
                nodes.add(name)
            else:
                key = _key(obj)
                group = self._pods.setdefault(P.node_name(obj), set())
                if ev.type == "DELETED":
                    group.discard(key)
                else:
                    group.add(key)
                    pods.add(key)
        for item in due:
            if isinstance(item, tuple) and item[0] == "grace":
                self._grace_over(str(item[1]))
            elif isinstance(item, tuple) and item[0] == "node":
                nodes.add(str(item[1]))
        for name in sorted(nodes):
            self._sync_node(name)
        for ns, name in sorted(pods):
            pod = self.store.find(kinds.POD, ns, name)
            if pod is not None and ready_status(self._nodes.get(P.node_name(pod))) != "True":
                self._mark_not_ready([pod])

    def _sync_node(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        now = P.now_rfc3339()
        if node_failed(node):
            if name not in self._failing:
                self._failing.add(name)
                self.schedule(("grace", name), self.grace_seconds)
        else:
            self._failing.discard(name)
            if ready_status(node) == "Unknown":  # the kubelet is back and posts Ready
                node = self._write(node, status=ready_conditions(node, now)) or node
        taints = wanted_taints(node, now)
        if taints != ((node.get("spec") or {}).get("taints") or []):
            node = self._write(node, taints=taints) or node
        if ready_status(node) != "True":
            self._mark_not_ready([p for ns, n in sorted(self._pods.get(name, set()))
                                  if (p := self.store.find(kinds.POD, ns, n)) is not None])

    def _grace_over(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None or not node_failed(node) or name not in self._failing:
            return
        self._write(node, status=unknown_conditions(node, P.now_rfc3339()))
        # the node event that write causes runs `_sync_node`: taints, pods marked not Ready

    def _write(self, node: Obj, *, status: list[Obj] | None = None,
               taints: list[Obj] | None = None) -> Obj | None:
        meta = {"name": node["metadata"]["name"]}
        try:
            if status is not None:
                body = {"metadata": meta, "status": dict(node.get("status") or {},
                                                         conditions=status)}
                new = self.store.update(kinds.NODE, body, subresource="status", adopt=True)
            else:
                spec = dict(node.get("spec") or {}, taints=taints)
                if not taints:
                    spec.pop("taints", None)
                new = self.store.update(kinds.NODE, dict(node, metadata=dict(
                    node["metadata"], resourceVersion=None), spec=spec), adopt=True)
        except StoreError as err:
            log.info("node lifecycle: node %s: %s; retrying", meta["name"], err.message)
            self.schedule(("node", meta["name"]), 1.0)
            return None
        self._nodes[meta["name"]] = new
        return new

    def _mark_not_ready(self, pods: list[Obj]) -> None:
        now = P.now_rfc3339()
        for pod in pods:
            if not P.is_pod_ready(pod):
                continue
            meta = pod["metadata"]
            body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                    "status": pod_not_ready(pod, now)}
            try:
                self.store.update(kinds.POD, body, subresource="status", adopt=True)
            except StoreError as err:
                if err.code != 404:
                    log.info("node lifecycle: pod %s/%s: %s", meta["namespace"], meta["name"],
                             err.message)


def annotate_node(store: Store, name: str, key: str, value: str | None) -> Obj:
    """Set (or, with None, remove) one annotation on a Node, as `kubectl annotate` would:
    how `/sim/v1/nodes/...` and `SimCluster` inject node faults. StoreError 404 when the node
    does not exist."""
    with store.lock:
        node = store.get(kinds.NODE, None, name)
        annotations = dict(node["metadata"].get("annotations") or {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
        meta = dict(node["metadata"], annotations=annotations)
        if not annotations:
            meta.pop("annotations")
        return store.update(kinds.NODE, dict(node, metadata=meta))


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    return (pod["metadata"]["namespace"], pod["metadata"]["name"])
