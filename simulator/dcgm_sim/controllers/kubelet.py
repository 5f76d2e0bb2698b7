"""The simulated kubelets (one loop for every node): pod start, readiness, termination.

A pod bound to a node is accepted at once (Pending, `hostIP`, `startTime`), then after the
node's start time becomes Running with a pod IP and, unless the node says otherwise, Ready.
Faults come from Node annotations, so any client can inject them through the API:
`sim.dcgm-migrate/pod-start-seconds: "<float>"` and `sim.dcgm-migrate/pods-ready: "false"`
(pods that start there run but never become Ready, so a rollout stalls on that node; pods that
were already Ready keep running Ready; flipping it back or removing it makes the waiting pods
Ready). A running pod turns Ready once its readiness probes' `initialDelaySeconds` are over and
a probe flap (`sim.dcgm-migrate/probe-flap`) has ended (probes.py). A node whose kubelet the sim
stopped (`sim.dcgm-migrate/node-failed`, nodelifecycle.py) gets no pod work at all, and a kubelet
does not mark pods Ready while its node's Ready condition is not True (the node lifecycle
controller marks them not Ready then). A pod marked for graceful
deletion turns not-Ready at once and is removed when its containers have stopped (the sim's
`termination_seconds`, never more than the pod's grace period). Pods on a deleted node are
left as they were (no kubelet reports on them) until the pod garbage collector removes them, as
upstream's PodGC `gcOrphaned` does (kubernetes pkg/controller/podgc/gc_controller.go): its loop
runs every 20 s (`gcCheckPeriod`), quarantines a node it finds missing for 40 s
(`quarantineTime`), and if the node still does not exist then, marks each of its pods Failed
with a `DisruptionTarget` condition (`DeletionByPodGC`) and force-deletes it: 40 to 60 s after
the node went; a node created again under that name meanwhile keeps them. A pod with DRA
claims is not accepted until each is allocated and reserved for it (`dra.claims_ready`, the
kubelet's PrepareResources check).

With a container runtime (`sim serve --images`, dcgm_sim/runtime) a pod whose image it holds
runs for real: started after the same start delay, its status is what its worker reports
(containers running, exited, restarting; readiness from its probes; phase), and a pod marked
for deletion is removed once its containers have stopped (SIGTERM, SIGKILL after the grace
period).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from dcgm_sim import dra, kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller, NodeCache
from dcgm_sim.controllers.nodelifecycle import node_failed, ready_status
from dcgm_sim.controllers.podstatus import (
    IPAllocator,
    pending_status,
    running_status,
    with_ready,
)
from dcgm_sim.controllers.probes import flap_key, flap_seconds, readiness_delay
from dcgm_sim.store import Event, Store, StoreError

if TYPE_CHECKING:
    from dcgm_sim.runtime.runtime import ContainerRuntime

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodKey = tuple[str, str]

GC_CHECK_PERIOD_SECONDS = 20.0  # PodGC's `gcCheckPeriod`
QUARANTINE_SECONDS = 40.0  # PodGC's `quarantineTime`
PODS_READY_ANNOTATION = "sim.dcgm-migrate/pods-ready"
START_SECONDS_ANNOTATION = "sim.dcgm-migrate/pod-start-seconds"


# ---- what the Node's annotations say (the status builders are podstatus.py) ------------------


def node_allows_ready(node: Mapping[str, Any] | None) -> bool:
    annotations = (node or {}).get("metadata", {}).get("annotations") or {}
    return str(annotations.get(PODS_READY_ANNOTATION, "true")).strip().lower() != "false"


def node_start_seconds(node: Mapping[str, Any] | None, default: float) -> float:
    annotations = (node or {}).get("metadata", {}).get("annotations") or {}
    raw = annotations.get(START_SECONDS_ANNOTATION)
    if raw is None:
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        log.warning("ignoring bad %s annotation %r", START_SECONDS_ANNOTATION, raw)
        return default


class Kubelet(Controller):
    """Every node's kubelet, plus the pod GC for pods whose node is gone."""

    name = "kubelet"
    resources = frozenset({kinds.POD.key, kinds.NODE.key})

    def __init__(
        self, store: Store, clock: SimClock, *, pod_start_seconds: float = 2.0,
        termination_seconds: float = 1.0, readiness_probes: bool = True,
        runtime: ContainerRuntime | None = None,
    ) -> None:
        super().__init__(store, clock)
        self.runtime = runtime  # runs the pods whose image it holds (None: all simulated)
        self._real: dict[str, list[str]] = {}  # uid -> pod IPs of pods the runtime runs
        self.readiness_probes = readiness_probes  # off: Ready as soon as running (fast tests)
        self.pod_start_seconds = pod_start_seconds
        self.termination_seconds = termination_seconds
        self._nodes = NodeCache()
        self._pods: dict[PodKey, Obj] = {}
        self._by_node: dict[str, set[PodKey]] = {}
        self._ips = IPAllocator(store.network)
        self._starting: set[str] = set()  # pod uids with a start timer
        self._killing: set[str] = set()  # pod uids with a removal timer
        # pod uid -> simulated time its creation / deletion mark was committed: start and
        # termination count from then, not from when this thread got to the event.
        self._since: dict[tuple[str, str], float] = {}
        self._ready_at: dict[str, float] = {}  # pod uid -> when its readiness probes pass

    def prime(self) -> None:
        self._nodes.prime(self.store)
        for pod in self.store.list(kinds.POD)[0]:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            self._index(key, pod)
            bound = P.node_name(pod)
            for ip in P.pod_ips(pod) if bound else []:
                self._ips.mark(bound, ip)
            self.schedule(("pod", *key), 0)

    def on_event(self, event: Event) -> None:
        """Note when a pod was created or marked for deletion (runs under the store lock)."""
        if event.resource is kinds.POD:
            meta = event.object["metadata"]
            if event.type == "ADDED":
                self._since[("start", meta["uid"])] = self.clock.now()
            elif (event.type == "MODIFIED" and meta.get("deletionTimestamp") and event.old
                  is not None and not event.old["metadata"].get("deletionTimestamp")):
                self._since[("kill", meta["uid"])] = self.clock.now()
        super().on_event(event)

    def _delay(self, what: str, uid: str, seconds: float) -> float:
        """`seconds` counted from the commit noted by `on_event` (if any)."""
        since = self._since.pop((what, uid), None)
        if since is None:
            return seconds
        return max(0.0, seconds - (self.clock.now() - since))

    def _index(self, key: PodKey, pod: Obj) -> None:
        self._pods[key] = pod
        node = P.node_name(pod)
        if node:
            self._by_node.setdefault(node, set()).add(key)

    def _unindex(self, key: PodKey) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        node = P.node_name(pod)
        self._by_node.get(node, set()).discard(key)
        for ip in P.pod_ips(pod):
            self._ips.release(node, ip)
        uid = pod["metadata"]["uid"]
        real_ips = self._real.pop(uid, None)
        if real_ips is not None and self.runtime is not None:
            self.runtime.forget(uid)
            for ip in real_ips:
                self._ips.release(node, ip)
        self._starting.discard(uid)
        self._killing.discard(uid)
        self._since.pop(("start", uid), None)
        self._since.pop(("kill", uid), None)
        self._ready_at.pop(uid, None)

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        touched: set[PodKey] = set()
        for ev in events:
            obj = ev.object
            if ev.resource is kinds.POD:
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                if ev.type == "DELETED":
                    self._unindex(key)
                else:
                    self._index(key, obj)
                    touched.add(key)
            elif ev.resource is kinds.NODE:
                name = self._nodes.note(ev)
                if ev.type == "DELETED":
                    self.schedule(("orphans", "", name), _orphans_due(self.clock.now()))
                    continue
                if ev.old is None or _node_gate(ev.old) != _node_gate(obj):
                    touched.update(self._by_node.get(name, set()))
                if flap_key(obj) != flap_key(ev.old) and not node_failed(obj):
                    self._flap(name, flap_seconds(obj))
        for item in due:
            if not isinstance(item, tuple) or len(item) < 3:
                continue
            kind, ns, name = str(item[0]), str(item[1]), str(item[2])
            uid = str(item[3]) if len(item) > 3 else ""
            if kind == "start":
                self._start(ns, name, uid)
            elif kind == "runtime":
                self._sync_real(ns, name, uid)
            elif kind == "kill":
                self._kill(ns, name, uid)
            elif kind == "orphans":
                self._collect_orphans(name)
            else:
                touched.add((ns, name))
        for key in sorted(touched):
            try:
                self._reconcile(key)
            except StoreError as err:
                if err.code != 404:
                    log.info("kubelet: pod %s/%s: %s; retrying", key[0], key[1], err.message)
                    self.schedule(("pod", *key), 1.0)

    def _claim(self, namespace: str, name: str) -> Obj | None:
        return self.store.find(kinds.RESOURCE_CLAIM, namespace, name)

    def _write_status(self, pod: Obj, status: Obj) -> None:
        meta = pod["metadata"]
        claims = (pod.get("status") or {}).get("resourceClaimStatuses")
        if claims and "resourceClaimStatuses" not in status:
            status = {**status, "resourceClaimStatuses": claims}  # the claim controller's
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": status}
        try:
            new = self.store.update(kinds.POD, body, subresource="status", adopt=True)
        except StoreError as err:
            if err.code == 404:
                return
            raise
        if new["metadata"]["uid"] == meta["uid"]:
            self._index((meta["namespace"], meta["name"]), new)

    def _reconcile(self, key: PodKey) -> None:
        pod = self._pods.get(key)
        if pod is None:
            return
        node = self._nodes.get(P.node_name(pod))
        uid = pod["metadata"]["uid"]
        if node is None:
            self._since.pop(("start", uid), None)  # its start counts from a node to run on
            return  # unscheduled, or bound to a node that does not exist (yet)
        if node_failed(node):
            return  # its kubelet is down: nothing starts, turns Ready or stops there
        if P.is_deleting(pod):
            if uid in self._killing:
                return
            self._killing.add(uid)
            self._starting.discard(uid)
            if uid in self._real and self.runtime is not None:
                grace = pod["metadata"].get("deletionGracePeriodSeconds")
                self.runtime.stop(uid, None if grace is None else float(grace))
                self._sync_real(*key, uid)  # removed once its containers stopped
                return
            if P.is_pod_ready(pod):
                self._write_status(pod, with_ready(pod, False, P.now_rfc3339()))
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            delay = self.termination_seconds
            if grace is not None:
                delay = min(delay, float(grace))
            self.schedule(("kill", *key, uid), self._delay("kill", uid, delay))
            return
        phase = (pod.get("status") or {}).get("phase")
        if phase in P.POD_PHASES_TERMINAL:
            return
        if uid in self._real:
            return  # its worker reports its state (`_sync_real`)
        if phase == "Running":
            # The fault stops pods from *becoming* Ready; a pod already Ready stays Ready.
            if not P.is_pod_ready(pod) and self._may_be_ready(pod, node):
                self._write_status(pod, with_ready(pod, True, P.now_rfc3339()))
            return
        if not dra.claims_ready(pod, self._claim):
            self._since.pop(("start", uid), None)  # its start counts from its claims' allocation
            return  # DRA: not admitted until every claim is allocated and reserved for it
        if uid in self._starting:
            return
        if not (pod.get("status") or {}).get("hostIP"):
            self._write_status(pod, pending_status(pod, node, P.now_rfc3339()))
        self._starting.add(uid)
        self.schedule(("start", *key, uid),
                      self._delay("start", uid, node_start_seconds(node, self.pod_start_seconds)))

    def _start(self, ns: str, name: str, uid: str) -> None:
        self._starting.discard(uid)
        pod = self._pods.get((ns, name))
        if pod is None or pod["metadata"]["uid"] != uid or P.is_deleting(pod):
            return
        node = self._nodes.get(P.node_name(pod))
        phase = (pod.get("status") or {}).get("phase")
        if node is None or node_failed(node) or phase == "Running" or phase in (
                P.POD_PHASES_TERMINAL):
            return  # already running, or it ended meanwhile (a terminal phase stays)
        if self.runtime is not None and self.runtime.runs(pod):
            self._start_real(pod, node)
            return
        delay = readiness_delay(pod) if self.readiness_probes else 0.0
        self._ready_at[uid] = self.clock.now() + delay
        if delay > 0:
            self.schedule(("probe", ns, name, uid), delay)
        ips = P.pod_ips(pod) or self._ips.take_all(node)
        self._write_status(pod, running_status(pod, node, ips, self._may_be_ready(pod, node),
                                               P.now_rfc3339()))

    def _start_real(self, pod: Obj, node: Obj) -> None:
        """Hand the pod to the runtime, with its IPs (the downward API's `status.podIP`)."""
        assert self.runtime is not None
        meta = pod["metadata"]
        uid, key = meta["uid"], (meta["namespace"], meta["name"])
        ips = P.pod_ips(pod) or self._ips.take_all(node)
        self._real[uid] = list(ips)
        seen = running_status(pod, node, ips, False, P.now_rfc3339())
        self.runtime.start({**pod, "status": seen}, ips,
                           lambda: self.schedule(("runtime", *key, uid), 0))
        self._sync_real(*key, uid)

    def _sync_real(self, ns: str, name: str, uid: str) -> None:
        """Write what the runtime reports for the pod; remove it once a deletion's containers
        have stopped."""
        pod = self._pods.get((ns, name))
        if pod is None or pod["metadata"]["uid"] != uid or self.runtime is None:
            return
        snapshot = self.runtime.snapshot(uid)
        node = self._nodes.get(P.node_name(pod))
        if snapshot is None or node is None or node_failed(node):
            return
        from dcgm_sim.runtime.status import pod_status  # only with a runtime

        images = {c.get("name", ""): self.runtime.image_id(str(c.get("image", "")))
                  for c in (pod.get("spec") or {}).get("containers") or []}
        status = pod_status(pod, node, self._real.get(uid, []), snapshot, images,
                            P.now_rfc3339(), node_allows_ready(node)
                            and ready_status(node) == "True" and not P.is_deleting(pod))
        if _changed(pod.get("status") or {}, status):
            self._write_status(pod, status)
        if snapshot.ended and P.is_deleting(pod):
            self._kill(ns, name, uid)

    def _may_be_ready(self, pod: Obj, node: Obj) -> bool:
        """Readiness probes pass (delay over, no flap), the node fault allows it, and the
        node's Ready condition is True."""
        uid = pod["metadata"]["uid"]
        return (self.clock.now() >= self._ready_at.get(uid, 0.0) and node_allows_ready(node)
                and ready_status(node) == "True")

    def _flap(self, node_name: str, seconds: float | None) -> None:
        """Fail the readiness probes of the node's Running, Ready pods for `seconds`."""
        if seconds is None:
            return
        until = self.clock.now() + seconds
        for key in sorted(self._by_node.get(node_name, set())):
            pod = self._pods.get(key)
            if (pod is None or P.is_deleting(pod) or not P.is_pod_ready(pod)
                    or (pod.get("status") or {}).get("phase") != "Running"):
                continue
            uid = pod["metadata"]["uid"]
            self._ready_at[uid] = max(self._ready_at.get(uid, 0.0), until)
            self._write_status(pod, with_ready(pod, False, P.now_rfc3339()))
            self.schedule(("probe", *key, uid), seconds)

    def _kill(self, ns: str, name: str, uid: str) -> None:
        current = self.store.find(kinds.POD, ns, name)
        if current is None or current["metadata"]["uid"] != uid:
            self._killing.discard(uid)
            return
        if node_failed(self._nodes.get(P.node_name(current))):
            self._killing.discard(uid)  # no kubelet to stop the containers: stays Terminating
            return
        try:
            self.store.delete(kinds.POD, ns, name)
        except StoreError as err:
            if err.code != 404:
                raise

    def _collect_orphans(self, node_name: str) -> None:
        """PodGC `gcOrphaned` once the quarantine is over: if the node still does not exist,
        each pod bound to it is marked Failed (`markFailedAndDeletePodWithCondition`), then
        force-deleted."""
        if node_name in self._nodes:
            return  # created again meanwhile: its pods are its own again
        for key in sorted(self._by_node.pop(node_name, set())):
            pod = self._pods.get(key)
            try:
                if pod is not None and not P.is_pod_terminal(pod):
                    self._write_status(pod, orphaned_status(pod, P.now_rfc3339()))
                self.store.delete(kinds.POD, *key)
            except StoreError as err:
                if err.code != 404:
                    log.info("pod gc: %s/%s: %s", *key, err.message)


def _orphans_due(now: float) -> float:
    """Seconds until PodGC deletes the pods of a node deleted `now`: its first loop after that
    quarantines the node, the loop 40 s later finds it still missing (loops every 20 s of the
    sim's clock since its start)."""
    first = (now // GC_CHECK_PERIOD_SECONDS + 1) * GC_CHECK_PERIOD_SECONDS
    return first + QUARANTINE_SECONDS - now


def orphaned_status(pod: Mapping[str, Any], now: str) -> Obj:
    """The status PodGC patches on an orphaned pod before deleting it: phase Failed and a
    `DisruptionTarget` condition (`apipod.UpdatePodCondition`: one of each type); the others,
    Ready included, as they were."""
    status: Obj = dict(pod.get("status") or {})
    target = {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
              "message": "PodGC: node no longer exists", "lastTransitionTime": now}
    status["conditions"] = [*(c for c in status.get("conditions") or []
                              if c.get("type") != "DisruptionTarget"), target]
    status["phase"] = "Failed"
    return status


def _changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a status differs beyond its condition timestamps."""
    def plain(status: Mapping[str, Any]) -> Any:
        return {**status, "conditions": [{k: v for k, v in c.items()
                                          if k not in ("lastTransitionTime", "lastProbeTime")}
                                         for c in status.get("conditions") or []]}
    return bool(plain(old) != plain(new))


def _node_gate(node: Mapping[str, Any]) -> tuple[bool, bool, str]:
    """What of a node decides whether its pods may start or turn Ready."""
    return node_allows_ready(node), node_failed(node), ready_status(node)
