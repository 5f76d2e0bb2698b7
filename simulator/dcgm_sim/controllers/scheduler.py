"""The default scheduler for the pods that come without a node: those of ReplicaSets, Jobs and
bare pods (a DaemonSet's pods are placed by the DaemonSet controller, `daemonsets.py`, as they
are pinned to their node).

Each unassigned pod whose `schedulerName` is `default-scheduler` gets one attempt per change
that may help it: the filters and the score of `schedulerlogic`, the required inter-pod terms
of `interpod.Placement`; a fit is bound (`pods/binding`: `spec.nodeName`, `PodScheduled`
True), no fit leaves it Pending with `PodScheduled` False / `Unschedulable` and the `FitError`
message, retried when a node is added or changed or an assigned pod goes (the plugins'
`EventsToRegister`). Left out: queues and backoff timers (retries are event-driven only),
preemption, resources, DRA claims of such pods, bind conflicts.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Hashable
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import interpod as I
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import schedulerlogic as S
from dcgm_sim.controllers.base import Controller, NodeCache
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodKey = tuple[str, str]
DEFAULT_SCHEDULER = "default-scheduler"


def _ours(pod: Obj) -> bool:
    """Unassigned, for the default scheduler, not a DaemonSet's, not finished or deleting."""
    ref = P.controller_ref(pod) or {}
    return (not P.node_name(pod) and ref.get("kind") != "DaemonSet"
            and ((pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER)
            == DEFAULT_SCHEDULER and not P.is_deleting(pod) and not P.is_pod_terminal(pod))


def _placement_view(pod: Obj | None) -> tuple[str, bool, Any]:
    if pod is None:
        return ("", False, None)
    return (P.node_name(pod), P.is_pod_terminal(pod), (pod.get("metadata") or {}).get("labels"))


class Scheduler(Controller):
    """kube-scheduler, for pods without a node."""

    name = "scheduler"
    resources = frozenset({kinds.POD.key, kinds.NODE.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._nodes = NodeCache()
        self._placement = I.Placement(self._nodes, self._namespace_labels)
        self._pending: dict[PodKey, Obj] = {}
        self._where: dict[str, tuple[str, str]] = {}  # pod uid -> (node, owner uid)
        self._per_node: Counter[str] = Counter()
        self._per_owner: dict[str, Counter[str]] = {}  # owner uid -> node -> pods

    def wants(self, event: Event) -> bool:
        """Node events; pod events that make or unmake a pending pod or move the counts."""
        if event.resource is not kinds.POD:
            return True
        if event.type != "MODIFIED" or _ours(event.object):
            return True
        return _placement_view(event.old) != _placement_view(event.object) or (
            event.old is not None and _ours(event.old))

    def prime(self) -> None:
        self._nodes.prime(self.store)
        for pod in self.store.list(kinds.POD)[0]:
            self._note(pod, deleted=False)

    def _namespace_labels(self, namespace: str) -> dict[str, str] | None:
        found = self.store.find(kinds.NAMESPACE, None, namespace)
        return None if found is None else dict(found["metadata"].get("labels") or {})

    def _note(self, pod: Obj, *, deleted: bool) -> bool:
        """Update the caches; True when the change may let a pending pod fit."""
        meta = pod["metadata"]
        key, uid = (str(meta["namespace"]), str(meta["name"])), str(meta.get("uid"))
        if not deleted and _ours(pod):
            self._pending[key] = pod
        else:
            self._pending.pop(key, None)
        changed = self._placement.drop(uid) if deleted else self._placement.put(pod)
        old = self._where.pop(uid, None)
        if old is not None:
            self._per_node[old[0]] -= 1
            self._per_owner.get(old[1], Counter())[old[0]] -= 1
        node = P.node_name(pod)
        if not deleted and node and not P.is_pod_terminal(pod):
            owner = str((P.controller_ref(pod) or {}).get("uid", ""))
            self._where[uid] = (node, owner)
            self._per_node[node] += 1
            self._per_owner.setdefault(owner, Counter())[node] += 1
        return changed or (old is not None and (deleted or not node))

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        retry = bool(due)
        fresh: set[PodKey] = set()
        for ev in events:
            if ev.resource is kinds.NODE:
                self._nodes.note(ev)
                self._placement.nodes_changed()
                retry = True
                continue
            obj = ev.object
            retry = self._note(obj, deleted=ev.type == "DELETED") or retry
            key = (str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
            if key in self._pending and not I.is_unschedulable(self._pending[key]):
                fresh.add(key)
        for key in sorted(self._pending if retry else fresh):
            pod = self._pending.get(key)
            if pod is None:
                continue
            try:
                self._schedule_one(pod)
            except StoreError as err:
                if err.code not in (404, 409):
                    raise

    def _schedule_one(self, pod: Obj) -> None:
        spec = pod.get("spec") or {}
        reasons: list[str] = []
        fits: list[str] = []
        for name, node in self._nodes.items():
            reason = S.filter_reason(spec, node) or self._placement.check(pod, name)
            if reason is None:
                fits.append(name)
            else:
                reasons.append(reason)
        owner = str((P.controller_ref(pod) or {}).get("uid", ""))
        chosen = S.pick(fits, self._per_owner.get(owner, Counter()), self._per_node)
        if chosen is None:
            message = S.fit_error(len(self._nodes), reasons)
            current = P.condition(pod, "PodScheduled") or {}
            if current.get("message") != message or not I.is_unschedulable(pod):
                self._write_status(pod, I.scheduled_condition(False, message))
            return
        bound = self.store.update(kinds.POD, dict(pod, spec=dict(spec, nodeName=chosen)))
        self._note(bound, deleted=False)
        self._write_status(bound, I.scheduled_condition(True))
        log.info("scheduler bound pod %s/%s to %s", pod["metadata"]["namespace"],
                 pod["metadata"]["name"], chosen)

    def _write_status(self, pod: Obj, cond: Obj) -> None:
        meta = pod["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": I.with_scheduled(pod.get("status") or {}, cond)}
        self._note(self.store.update(kinds.POD, body, subresource="status"), deleted=False)
