"""The deployment controller, after kubernetes/pkg/controller/deployment (deployment_controller.go
`syncDeployment`, sync.go, rolling.go, recreate.go, progress.go); the decisions are the pure
functions of `deploymentlogic`.

One sync of a Deployment, as upstream: its ReplicaSets (those it controls), then `sync` for a
paused Deployment or a scaling event (`scale`, `cleanupDeployment`, status), else the strategy:
RollingUpdate (`rolloutRolling`: create or find the new ReplicaSet `<name>-<pod-template-hash>`
with the revision annotations, grow it within maxSurge, shrink the old ones within
maxUnavailable, unhealthy replicas first) or Recreate (`rolloutRecreate`: the old ReplicaSets to
0, wait until none of their pods runs, then the new one to full size). The revision annotation
goes on the Deployment too (upstream writes it with the status; the sim's status subresource
keeps only `status`, so it is a metadata update of its own). Status and the Available and
Progressing conditions as `syncRolloutStatus` writes them, so `kubectl rollout status` reads
them as on a real cluster; `progressDeadlineSeconds` counts simulated seconds since the last
progress this controller saw.

Left out: adopting orphan ReplicaSets and releasing ones whose labels stopped matching
(`ClaimReplicaSets`), `rollbackTo`, Events (`ScalingReplicaSet`), the empty-selector warning,
expectations (writes go straight to the store and into the caches).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import deploymentlogic as D
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import DEPLOYMENT, REPLICA_SET
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]


class DeploymentController(Controller):
    """Keeps every Deployment's ReplicaSets and status as kube-controller-manager does."""

    name = "deployment"
    resources = frozenset({DEPLOYMENT.key, REPLICA_SET.key, kinds.POD.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._deps: dict[Key, Obj] = {}
        self._rss: dict[str, dict[str, Obj]] = {}  # deployment uid -> rs name -> rs
        self._owner_of: dict[str, str] = {}  # rs uid -> deployment uid
        self._key_of: dict[str, Key] = {}  # deployment uid -> key
        self._progress_at: dict[str, float] = {}  # deployment uid -> simulated time

    def wants(self, event: Event) -> bool:
        """Pods only as Recreate waits for them: an RS-owned pod that went away."""
        if event.resource is not kinds.POD:
            return True
        ref = P.controller_ref(event.object)
        return event.type == "DELETED" and ref is not None and ref.get("kind") == "ReplicaSet"

    def prime(self) -> None:
        for d in self.store.list(DEPLOYMENT)[0]:
            self._note_deployment(d)
            self.schedule(_key(d), 0)
        for rs in self.store.list(REPLICA_SET)[0]:
            self._note_rs(rs, deleted=False)

    # ---- caches ----------------------------------------------------------------------------

    def _note_deployment(self, d: Obj) -> None:
        self._deps[_key(d)] = d
        self._key_of[d["metadata"]["uid"]] = _key(d)

    def _note_rs(self, rs: Obj, *, deleted: bool) -> Key | None:
        uid, name = rs["metadata"]["uid"], rs["metadata"]["name"]
        previous = self._owner_of.pop(uid, None)
        if previous is not None:
            self._rss.get(previous, {}).pop(name, None)
        ref = P.controller_ref(rs)
        if ref is None or ref.get("kind") != "Deployment":
            return self._key_of.get(previous or "")
        owner = str(ref["uid"])
        if not deleted:
            self._owner_of[uid] = owner
            self._rss.setdefault(owner, {})[name] = rs
        return self._key_of.get(owner) or self._key_of.get(previous or "")

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        dirty: set[Key] = {(str(k[0]), str(k[1])) for k in due if isinstance(k, tuple)}
        for ev in events:
            obj = ev.object
            if ev.resource is DEPLOYMENT:
                key = _key(obj)
                if ev.type == "DELETED":
                    self._deps.pop(key, None)
                    self._key_of.pop(obj["metadata"]["uid"], None)
                    self._progress_at.pop(obj["metadata"]["uid"], None)
                    continue
                if obj is self._deps.get(key):
                    continue  # our own write coming back
                self._note_deployment(obj)
                dirty.add(key)
            elif ev.resource is REPLICA_SET:
                owner = self._note_rs(obj, deleted=ev.type == "DELETED")
                if owner is not None:
                    dirty.add(owner)
            else:
                ref = P.controller_ref(obj) or {}
                owner_uid = self._owner_of.get(str(ref.get("uid")))
                found = self._key_of.get(owner_uid or "")
                if found is not None:
                    dirty.add(found)
        for key in sorted(dirty):
            try:
                self.sync(key)
            except StoreError as err:
                log.info("deployment %s/%s: %s; retrying", key[0], key[1], err.message)
                self.schedule(key, 1.0)

    # ---- one sync --------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        d = self._deps.get(key)
        if d is None:
            return
        uid = d["metadata"]["uid"]
        rss = list(self._rss.get(uid, {}).values())
        if P.is_deleting(d):
            new_rs = D.find_new(d, rss)
            self._write_status(d, D.calculate_status(rss, new_rs, d, P.now_rfc3339()))
            return
        if d["spec"].get("paused") or D.is_scaling_event(d, rss):
            self._sync_scale(d, rss)
        elif D.is_rolling(d):
            self._rolling(d, rss)
        else:
            self._recreate(d, rss)

    def _sync_scale(self, d: Obj, rss: list[Obj]) -> None:
        """`sync`: scale, clean up, then the plain status (no Progressing estimate)."""
        new_rs, old_rss = self._new_and_old(d, rss, create=False)
        for name, size in D.scale(d, new_rs, old_rss).items():
            self._scale(d, name, size)
        self._cleanup(d, old_rss)
        new_rs, old_rss = self._new_and_old(d, self._owned(d), create=False)
        status = D.calculate_status([*old_rss, *([new_rs] if new_rs else [])], new_rs, d,
                                    P.now_rfc3339())
        self._write_status(d, status)

    def _rolling(self, d: Obj, rss: list[Obj]) -> None:
        """`rolloutRolling`: scale up if we can, else down if we can, else clean up."""
        new_rs, old_rss = self._new_and_old(d, rss, create=True)
        assert new_rs is not None
        all_rss = [*old_rss, new_rs]
        if D.replicas(new_rs) > D.replicas(d):
            scaled = self._scale(d, new_rs["metadata"]["name"], D.replicas(d))
        elif D.replicas(new_rs) < D.replicas(d):
            want = D.new_rs_new_replicas(d, all_rss, new_rs)
            scaled = self._scale(d, new_rs["metadata"]["name"], want)
        else:
            scaled = False
        if not scaled:
            sizes = D.reconcile_old(d, old_rss, new_rs)
            for name, size in sizes.items():
                self._scale(d, name, size)
            if not sizes:
                self._cleanup(d, old_rss)
        self._sync_rollout_status(d)

    def _recreate(self, d: Obj, rss: list[Obj]) -> None:
        """`rolloutRecreate`: old ReplicaSets to 0, wait for their pods, then the new one."""
        new_rs, old_rss = self._new_and_old(d, rss, create=False)
        scaled = False
        for rs in D.active(old_rss):
            scaled = self._scale(d, rs["metadata"]["name"], 0) or scaled
        if scaled or self._old_pods_running(new_rs, old_rss):
            self._sync_rollout_status(d)
            return
        if new_rs is None:
            new_rs, old_rss = self._new_and_old(d, self._owned(d), create=True)
            assert new_rs is not None
        if D.replicas(new_rs) != D.replicas(d):
            self._scale(d, new_rs["metadata"]["name"], D.replicas(d))
        if D.complete(d, d.get("status") or {}):
            self._cleanup(d, old_rss)
        self._sync_rollout_status(d)

    def _old_pods_running(self, new_rs: Obj | None, old_rss: list[Obj]) -> bool:
        """`oldPodsRunning`: an old ReplicaSet still counts pods, or one of its pods (even a
        terminating one) has not finished."""
        if D.sum_status(old_rss, "replicas") > 0:
            return True
        old_uids = {rs["metadata"]["uid"] for rs in old_rss}
        if new_rs is not None:
            old_uids.discard(new_rs["metadata"]["uid"])
        if not old_uids:
            return False
        namespace = old_rss[0]["metadata"]["namespace"]
        return any(str((P.controller_ref(p) or {}).get("uid")) in old_uids
                   and not P.is_pod_terminal(p)
                   for p in self.store.list(kinds.POD, namespace)[0])

    # ---- ReplicaSets -----------------------------------------------------------------------

    def _owned(self, d: Obj) -> list[Obj]:
        return list(self._rss.get(d["metadata"]["uid"], {}).values())

    def _new_and_old(self, d: Obj, rss: list[Obj], *, create: bool
                     ) -> tuple[Obj | None, list[Obj]]:
        """`getAllReplicaSetsAndSyncRevision`: the new ReplicaSet (created when `create`),
        its revision annotations synced, and the old ones."""
        found = D.find_new(d, rss)
        old = [rs for rs in rss if found is None or rs["metadata"]["uid"] != found[
            "metadata"]["uid"]]
        new_revision = max((D.revision(rs) for rs in old), default=0) + 1
        if found is not None:
            return self._sync_existing(d, found, new_revision), old
        if not create:
            return None, old
        return self._create_new(d, old, new_revision), old

    def _sync_existing(self, d: Obj, rs: Obj, new_revision: int) -> Obj:
        ann = D.annotations_of(rs)
        changed = D.new_rs_annotations(d, ann, new_revision, exists=True)
        min_ready = int(d["spec"].get("minReadySeconds") or 0)
        if changed or int(rs["spec"].get("minReadySeconds") or 0) != min_ready:
            body = clone(rs)
            body["metadata"]["annotations"] = ann
            body["spec"]["minReadySeconds"] = min_ready
            rs = self._update_rs(body)
            return rs
        self._set_revision(d, D.revision(rs))
        if D.has_progress_deadline(d) and D.condition(d.get("status") or {},
                                                      "Progressing") is None:
            status = clone(d.get("status") or {})
            D.set_condition(status, D.new_condition(
                "Progressing", "True", D.FOUND_NEW_RS,
                f'Found new replica set "{rs["metadata"]["name"]}"', P.now_rfc3339()))
            self._write_status(d, status)
        return rs

    def _create_new(self, d: Obj, old: list[Obj], new_revision: int) -> Obj:
        hash_ = D.template_hash(d)
        rs = D.new_replica_set(d, hash_)
        rs["spec"]["replicas"] = D.new_rs_new_replicas(d, [*old, rs], rs)
        ann: dict[str, str] = {}
        D.new_rs_annotations(d, ann, new_revision, exists=False)
        rs["metadata"]["annotations"] = ann
        try:
            created = self.store.create(REPLICA_SET, rs)
        except StoreError as err:
            if err.reason != "AlreadyExists":
                raise
            existing = self.store.get(REPLICA_SET, rs["metadata"]["namespace"],
                                      rs["metadata"]["name"])
            ref = P.controller_ref(existing) or {}
            if ref.get("uid") != d["metadata"]["uid"] or not D.equal_ignore_hash(
                    existing["spec"].get("template") or {}, d["spec"].get("template") or {}):
                status = clone(d.get("status") or {})
                status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
                self._write_status(d, status)
                raise StoreError(409, "Conflict", f"hash collision on ReplicaSet {hash_}"
                                 ) from err
            created = existing
        self._note_rs(created, deleted=False)
        log.info("deployment %s: created replica set %s (%d)", d["metadata"]["name"],
                 created["metadata"]["name"], D.replicas(created))
        self._set_revision(d, new_revision)
        d = self._deps[_key(d)]
        if D.has_progress_deadline(d):
            status = clone(d.get("status") or {})
            D.set_condition(status, D.new_condition(
                "Progressing", "True", D.NEW_RS_CREATED,
                f'Created new replica set "{created["metadata"]["name"]}"', P.now_rfc3339()))
            self._write_status(d, status)
        return created

    def _scale(self, d: Obj, name: str, size: int) -> bool:
        """`scaleReplicaSet`: the size and the replicas annotations; True when it changed."""
        rs = self._rss.get(d["metadata"]["uid"], {}).get(name)
        if rs is None:
            return False
        ann = D.annotations_of(rs)
        annotated = D.replicas_annotations(ann, D.replicas(d), D.replicas(d) + D.max_surge(d))
        if D.replicas(rs) == size and not annotated:
            return False
        body = clone(rs)
        body["spec"]["replicas"] = size
        body["metadata"]["annotations"] = ann
        self._update_rs(body)
        if D.replicas(rs) != size:
            log.info("deployment %s: scaled replica set %s from %d to %d",
                     d["metadata"]["name"], name, D.replicas(rs), size)
        return D.replicas(rs) != size

    def _update_rs(self, body: Obj) -> Obj:
        new = self.store.update(REPLICA_SET, body)
        self._note_rs(new, deleted=False)
        return new

    def _cleanup(self, d: Obj, old_rss: list[Obj]) -> None:
        for name in D.cleanup_victims(d, old_rss):
            try:
                self.store.delete(REPLICA_SET, d["metadata"]["namespace"], name)
            except StoreError as err:
                if err.code != 404:
                    raise

    # ---- the Deployment's own writes -------------------------------------------------------

    def _set_revision(self, d: Obj, rev: int) -> None:
        """`SetDeploymentRevision`: the revision annotation on the Deployment."""
        current = self._deps.get(_key(d), d)
        ann = D.annotations_of(current)
        if ann.get(D.REVISION) == str(rev):
            return
        ann[D.REVISION] = str(rev)
        body = dict(current, metadata=dict(current["metadata"], annotations=ann))
        self._note_deployment(self.store.update(DEPLOYMENT, body, adopt=True))

    def _sync_rollout_status(self, d: Obj) -> None:
        d = self._deps.get(_key(d), d)
        uid = d["metadata"]["uid"]
        new_rs, old_rss = self._new_and_old(d, self._owned(d), create=False)
        d = self._deps.get(_key(d), d)
        all_rss = [*old_rss, *([new_rs] if new_rs else [])]
        since = self.clock.now() - self._progress_at.setdefault(uid, self.clock.now())
        status = D.rollout_status(all_rss, new_rs, d, P.now_rfc3339(), since)
        if D.progressing(d, status):
            self._progress_at[uid] = self.clock.now()
            since = 0.0
        self._write_status(d, status)
        cond = D.condition(status, "Progressing")
        if cond is not None and cond.get("reason") not in (D.NEW_RS_AVAILABLE, D.TIMED_OUT):
            deadline = float(d["spec"].get("progressDeadlineSeconds") or 0)
            self.schedule(_key(d), max(0.0, deadline - since) + 1.0, background=True)

    def _write_status(self, d: Obj, status: Obj) -> None:
        d = self._deps.get(_key(d), d)
        if status == (d.get("status") or {}):
            return
        old_cond = D.condition(d.get("status") or {}, "Progressing") or {}
        if old_cond.get("reason") != (D.condition(status, "Progressing") or {}).get("reason"):
            self._progress_at[d["metadata"]["uid"]] = self.clock.now()
        body = {"metadata": {"name": d["metadata"]["name"],
                             "namespace": d["metadata"]["namespace"]}, "status": status}
        try:
            self._note_deployment(self.store.update(DEPLOYMENT, body, subresource="status",
                                                    adopt=True))
        except StoreError as err:
            if err.code != 404:
                raise


def _key(obj: Obj) -> Key:
    return (str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
