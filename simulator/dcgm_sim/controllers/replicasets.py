"""The ReplicaSet controller, after kubernetes/pkg/controller/replicaset/replica_set.go
(`syncReplicaSet`, `manageReplicas`); the ranking and the status are `replicasetlogic`.

One sync: the ReplicaSet's active pods (those it controls, not terminal, not being deleted);
too few and it creates the difference (at most `burstReplicas`, 500) from its template
(`<rs>-<5 characters>`, controlled by it), too many and it deletes the surplus, the
least useful first (graceful deletion, left to the kubelet); a deleted or failed pod is thus
replaced. Then the status (replicas, fullyLabeledReplicas, readyReplicas, availableReplicas
after `minReadySeconds` of simulated time, observedGeneration). The pods have no node: the
scheduler (`scheduler.py`) binds them.

Left out: adopting orphans and releasing pods whose labels stopped matching (`ClaimPods`),
expectations (writes go straight to the store and into the cache), the slow-start batches
(`slowStartBatch`: one pass creates them all), Events.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import replicasetlogic as R
from dcgm_sim.controllers import workloadpods as W
from dcgm_sim.controllers.base import Controller
from dcgm_sim.kinds import REPLICA_SET
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
BURST_REPLICAS = 500


def _owned_by_rs(pod: Obj) -> bool:
    ref = P.controller_ref(pod)
    return ref is not None and ref.get("kind") == "ReplicaSet"


class ReplicaSetController(Controller):
    """Keeps every ReplicaSet's pod count and status."""

    name = "replicaset"
    resources = frozenset({REPLICA_SET.key, kinds.POD.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._sets: dict[Key, Obj] = {}
        self._pods: dict[str, dict[str, Obj]] = {}  # rs uid -> pod name -> pod
        self._ready_since: dict[str, float] = {}  # pod uid -> simulated time it turned Ready

    def wants(self, event: Event) -> bool:
        return event.resource is not kinds.POD or _owned_by_rs(event.object)

    def prime(self) -> None:
        for rs in self.store.list(REPLICA_SET)[0]:
            self._sets[_key(rs)] = rs
            self.schedule(_key(rs), 0)
        for pod in self.store.list(kinds.POD)[0]:
            if _owned_by_rs(pod):
                self._note_pod(pod, deleted=False, primed=True)

    def _note_pod(self, pod: Obj, *, deleted: bool, primed: bool = False) -> Key | None:
        ref = P.controller_ref(pod) or {}
        owner, name, uid = str(ref.get("uid")), pod["metadata"]["name"], pod["metadata"]["uid"]
        pods = self._pods.setdefault(owner, {})
        if deleted:
            pods.pop(name, None)
            self._ready_since.pop(uid, None)
        else:
            pods[name] = pod
            if P.is_pod_ready(pod):
                self._ready_since.setdefault(uid, float("-inf") if primed else self.clock.now())
            else:
                self._ready_since.pop(uid, None)
        return (str(pod["metadata"]["namespace"]), str(ref.get("name")))

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        dirty: set[Key] = {(str(k[0]), str(k[1])) for k in due if isinstance(k, tuple)}
        for ev in events:
            obj = ev.object
            if ev.resource is REPLICA_SET:
                key = _key(obj)
                if ev.type == "DELETED":
                    self._sets.pop(key, None)
                    self._pods.pop(obj["metadata"]["uid"], None)
                    continue
                if obj is self._sets.get(key):
                    continue  # our own status write coming back
                self._sets[key] = obj
                dirty.add(key)
            else:
                dirty.add(self._note_pod(obj, deleted=ev.type == "DELETED") or ("", ""))
        for key in sorted(dirty):
            try:
                self.sync(key)
            except StoreError as err:
                log.info("replicaset %s/%s: %s; retrying", key[0], key[1], err.message)
                self.schedule(key, 1.0)

    def sync(self, key: Key) -> None:
        rs = self._sets.get(key)
        if rs is None:
            return
        uid = rs["metadata"]["uid"]
        owned = self._pods.setdefault(uid, {})
        active = [p for p in owned.values() if W.is_active(p)]
        if not P.is_deleting(rs):
            diff = len(active) - int(rs["spec"].get("replicas", 1))
            if diff < 0:
                for _ in range(min(-diff, BURST_REPLICAS)):
                    pod = W.create_pod(self.store, W.pod_from_template(
                        rs, rs["spec"].get("template") or {}))
                    owned[pod["metadata"]["name"]] = pod
            elif diff > 0:
                for pod in R.pods_to_delete(active, active, min(diff, BURST_REPLICAS),
                                            self._ready_since.get):
                    gone = W.delete_pod(self.store, pod)
                    if gone is not None:
                        self._note_pod(gone, deleted=not P.is_deleting(gone))
                    else:
                        owned.pop(pod["metadata"]["name"], None)
        active = [p for p in owned.values() if W.is_active(p)]
        min_ready = int(rs["spec"].get("minReadySeconds") or 0)
        now = self.clock.now()
        status = R.calculate_status(rs, active, lambda p: W.available(
            self._ready_since.get(p["metadata"]["uid"]), min_ready, now))
        if status != (rs.get("status") or {}):
            body = {"metadata": {"name": key[1], "namespace": key[0]}, "status": status}
            try:
                self._sets[key] = self.store.update(REPLICA_SET, body, subresource="status",
                                                    adopt=True)
            except StoreError as err:
                if err.code != 404:
                    raise
        if min_ready > 0 and status.get("readyReplicas", 0) != status.get(
                "availableReplicas", 0):
            self.schedule(key, min_ready)


def _key(obj: Obj) -> Key:
    return (str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
