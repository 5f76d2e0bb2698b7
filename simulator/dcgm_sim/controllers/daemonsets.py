"""The DaemonSet controller, after kubernetes/pkg/controller/daemon (daemon_controller.go,
update.go).

One sync of a DaemonSet runs, as upstream: history (ControllerRevisions and the template hash),
`manage` (a pod on every node that should run one, surplus and misplaced pods deleted), and only
when `manage` had nothing to do (upstream: expectations satisfied) the rolling update; then
history cleanup and the status counters. The decisions themselves are the pure functions of
`rollouts`, shared with `seed.py`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import adoption
from dcgm_sim.controllers import interpod as I
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller, NodeCache
from dcgm_sim.controllers.daemonhistory import History
from dcgm_sim.controllers.daemonindex import DaemonPods, NodeShares
from dcgm_sim.controllers.daemonpending import PendingPods
from dcgm_sim.controllers.rollouts import (
    Available,
    Plan,
    PodFactory,
    PodView,
    _allows_surge,
    _rolling_counts,
    compute_status,
    ds_hash,
    manage_plan,
    rolling_update_plan,
    status_of,
    template_generation,
)
from dcgm_sim.controllers.scheduling import node_should_run
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DSKey = tuple[str, str]
DEFAULT_GRACE_SECONDS = 30
LAGGED = "lagged-pod-events"  # the timer that hands the lagging pod events on


# ---- the controller --------------------------------------------------------------------------


class DaemonSetController(Controller):
    """Keeps every DaemonSet's pods, history and status as kube-controller-manager does."""

    name = "daemonset"
    resources = frozenset({kinds.DAEMONSET.key, kinds.POD.key, kinds.NODE.key,
                           kinds.CONTROLLER_REVISION.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._dsets: dict[DSKey, Obj] = {}
        self._pods: dict[str, DaemonPods] = {}  # owner uid -> its pods
        self._nodes = NodeCache()
        self._ready_since: dict[str, float] = {}
        self._factory = PodFactory()
        self._history = History(store)
        # key -> (fingerprint, nodes epoch, per-node (rv, fit), fits, fits version)
        self._fit_cache: dict[DSKey, tuple[str, int, dict[str, tuple[str, tuple[bool, bool]]],
                                           dict[str, tuple[bool, bool]], int]] = {}
        self._nodes_epoch = 0
        self._fits_versions = 0
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._shares: dict[DSKey, NodeShares] = {}
        self._orphans: dict[str, dict[str, Obj]] = {}  # namespace -> name -> pod, no controller
        self._owner_of: dict[str, str] = {}  # pod uid -> the DaemonSet uid it is indexed under
        self._scheduler = PendingPods(store, self._nodes)  # the default scheduler's part
        # Simulated seconds its pod informer runs behind its DaemonSet informer (0: in step).
        # kube-controller-manager reads pods and DaemonSets through separate informers with no
        # order between them (`NewDaemonSetsController`'s `podInformer` and `dsInformer`), so
        # under load a DaemonSet change can be synced against a pod cache that has not yet seen
        # pod writes made before it. Tests set it to prove a writer does not rely on that order;
        # set back to 0, the informer catches up: every held event is delivered at once.
        self._lag = 0.0
        self._lagged: deque[tuple[float, Event]] = deque()

    @property
    def pod_events_lag(self) -> float:
        return self._lag

    @pod_events_lag.setter
    def pod_events_lag(self, seconds: float) -> None:
        self._lag = seconds
        if seconds <= 0:  # caught up: what it held back is due now, not at its old time
            self.unschedule(LAGGED)
            if self._lagged:
                self.schedule(LAGGED, 0)

    # ---- caches ----------------------------------------------------------------------------

    def prime(self) -> None:
        self._nodes.prime(self.store)
        for ds in self.store.list(kinds.DAEMONSET)[0]:
            key = (ds["metadata"]["namespace"], ds["metadata"]["name"])
            self._dsets[key] = ds
            self.schedule(key, 0)
        for pod in self.store.list(kinds.POD)[0]:
            self._cache_pod(pod, deleted=False, primed=True)
            self._scheduler.note(pod, deleted=False)
        self._scheduler.primed()

    def _cache_pod(self, pod: Obj, *, deleted: bool, primed: bool = False) -> DSKey | None:
        """Index the pod under its controlling DaemonSet's uid; returns that DaemonSet's key."""
        ref = P.controller_ref(pod)
        name = pod["metadata"]["name"]
        uid = pod["metadata"]["uid"]
        owner = str(ref.get("uid")) if ref is not None else ""
        previous = self._owner_of.get(uid)
        if previous is not None and (deleted or previous != owner):
            self._drop_pod(previous, name, uid, deleted)  # gone, or orphaned (or re-owned)
        orphans = self._orphans.setdefault(pod["metadata"]["namespace"], {})
        if ref is None and not deleted and not P.is_deleting(pod):
            orphans[name] = pod
        else:
            orphans.pop(name, None)
        if ref is None or ref.get("kind") != "DaemonSet":
            return None
        key = (pod["metadata"]["namespace"], str(ref["name"]))
        if deleted:
            pods = self._pods.get(owner)
            if pods is not None:
                pods.drop(name)
                if not pods:
                    del self._pods[owner]
            self._ready_since.pop(uid, None)
            return key
        view = _view(pod)
        self._owner_of[uid] = owner
        changed = self._pods.setdefault(owner, DaemonPods()).put(view)
        if view.ready:
            # Pods already Ready when the controller starts count as ready long ago.
            self._ready_since.setdefault(uid, float("-inf") if primed else self.clock.now())
        else:
            self._ready_since.pop(uid, None)
        # A version that changes nothing the sync reads (the controller's own write coming
        # back, a Pending status) needs no sync.
        return key if changed else None

    def _drop_pod(self, owner: str, name: str, uid: str, deleted: bool) -> None:
        """Un-index a pod from `owner`; an orphaned pod keeps its Ready-since (still running)."""
        self._owner_of.pop(uid, None)
        if deleted:
            self._ready_since.pop(uid, None)
        pods = self._pods.get(owner)
        if pods is not None:
            pods.drop(name)
            if not pods:
                del self._pods[owner]

    def _adopters(self, pod: Obj) -> list[DSKey]:
        """`addPod`/`updatePod` for an orphan: the DaemonSets that would claim it."""
        ns = pod["metadata"]["namespace"]
        return [key for key, ds in self._dsets.items()
                if key[0] == ns and adoption.claimable(ds, pod)]

    def _in_informer_order(self, events: list[Event]) -> list[Event]:
        """`events` as the informers deliver them with `pod_events_lag`: the pod events that are
        due first (older than the rest), the others now, the newer pod events held back. A lag
        set back to 0 is an informer caught up: every held event is due."""
        now = self.clock.now()
        for ev in events:
            if ev.resource is kinds.POD and self.pod_events_lag > 0:
                self._lagged.append((now + self.pod_events_lag, ev))
        released: list[Event] = []
        while self._lagged and (self._lagged[0][0] <= now or self.pod_events_lag <= 0):
            ev = self._lagged.popleft()[1]
            if not self._older_than_cached(ev.object):
                released.append(ev)
        if self._lagged:
            self.schedule(LAGGED, self._lagged[0][0] - now)
        return released + [ev for ev in events
                           if ev.resource is not kinds.POD or self.pod_events_lag <= 0]

    def _older_than_cached(self, pod: Obj) -> bool:
        """A late event older than the pod the controller cached from its own write (its
        expectations, upstream): an informer never goes back, so neither does the cache."""
        cache = self._pods.get(self._owner_of.get(pod["metadata"]["uid"], ""))
        view = cache.get(pod["metadata"]["name"]) if cache is not None else None
        return view is not None and int(view.obj["metadata"]["resourceVersion"]) > int(
            pod["metadata"]["resourceVersion"])

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        if self.pod_events_lag > 0 or self._lagged:
            events = self._in_informer_order(events)
        dirty: set[DSKey] = set()
        for k in due:
            if isinstance(k, tuple):
                dirty.add((str(k[0]), str(k[1])))
        all_dirty = False
        for ev in events:
            obj = ev.object
            if ev.resource is kinds.DAEMONSET:
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                if ev.type == "DELETED":
                    self._dsets.pop(key, None)
                    self._fit_cache.pop(key, None)
                    self._shares.pop(key, None)
                    self._factory.forget(obj["metadata"]["uid"])
                elif obj is self._dsets.get(key):
                    continue  # our own status write coming back: nothing new to sync
                else:
                    self._dsets[key] = obj
                dirty.add(key)
            elif ev.resource is kinds.POD:
                self._scheduler.note(obj, deleted=ev.type == "DELETED")
                owner = self._cache_pod(obj, deleted=ev.type == "DELETED")
                if owner is not None:
                    dirty.add(owner)
                elif ev.type != "DELETED" and P.controller_ref(obj) is None:
                    dirty.update(self._adopters(obj))
            elif ev.resource is kinds.CONTROLLER_REVISION:
                dirty.update(History.owners(obj, ev.old, self._dsets))
            elif ev.resource is kinds.NODE:
                self._nodes.note(ev)
                self._nodes_epoch += 1
                if (ev.type in ("ADDED", "DELETED")
                        or _placement_changed(ev.old, obj)):
                    all_dirty = True
                    self._scheduler.nodes_changed()
        if all_dirty:
            dirty.update(self._dsets)
        for key in sorted(dirty):
            try:
                self.sync(key)
            except StoreError as err:
                log.info("daemonset %s/%s: %s; retrying", key[0], key[1], err.message)
                self.schedule(key, 1.0)
        if self._scheduler.retry:
            self._scheduler.schedule()

    # ---- one sync --------------------------------------------------------------------------

    def available_fn(self, ds: Mapping[str, Any]) -> Available:
        """`podutil.IsPodAvailable` with the DaemonSet's minReadySeconds, in simulated time."""
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        now = self.clock.now()

        def available(pod: PodView) -> bool:
            if not pod.ready:
                return False
            if min_ready <= 0:
                return True
            since = self._ready_since.get(pod.uid)
            return since is not None and now - since >= min_ready

        return available

    def _fits(self, key: DSKey, ds: Mapping[str, Any]) -> tuple[dict[str, tuple[bool, bool]],
                                                                   int]:
        """(node -> (shouldRun, shouldContinueRunning), a version that changes with it)."""
        spec = ds["spec"]["template"].get("spec") or {}
        fingerprint = P.canonical_json([spec.get(k) for k in (
            "nodeName", "nodeSelector", "affinity", "tolerations", "hostNetwork")])
        cached = self._fit_cache.get(key)
        if cached is not None and cached[0] == fingerprint and cached[1] == self._nodes_epoch:
            return cached[3], cached[4]
        cache = cached[2] if cached is not None and cached[0] == fingerprint else {}
        out: dict[str, tuple[bool, bool]] = {}
        fresh: dict[str, tuple[str, tuple[bool, bool]]] = {}
        for name, node in self._nodes.items():
            rv = node["metadata"]["resourceVersion"]
            hit = cache.get(name)
            result = hit[1] if hit is not None and hit[0] == rv else node_should_run(spec, node)
            fresh[name] = (rv, result)
            out[name] = result
        if cached is not None and cached[3] == out:
            out, version = cached[3], cached[4]
        else:
            self._fits_versions += 1
            version = self._fits_versions
        self._fit_cache[key] = (fingerprint, self._nodes_epoch, fresh, out, version)
        return out, version

    def _hash(self, ds: Obj) -> str:
        """`ds_hash`, remembered per template (a spec change moves `generation`)."""
        meta = ds["metadata"]
        generation = meta.get("generation")
        if generation is None:
            return ds_hash(ds)
        collisions = int((ds.get("status") or {}).get("collisionCount") or 0)
        key = (str(meta.get("uid")), int(generation), collisions)
        hash_ = self._hashes.get(key)
        if hash_ is None:
            hash_ = self._hashes[key] = ds_hash(ds)
        return hash_

    def sync(self, key: DSKey) -> None:
        ds = self._dsets.get(key)
        if ds is None or P.is_deleting(ds):
            return
        self._adopt(ds)
        uid = ds["metadata"]["uid"]
        hash_, old_revisions = self._history.construct(
            ds, self._hash(ds), lambda: (self._pods.get(uid) or DaemonPods()).by_name.values(),
            self._pod_written)
        pods = self._pods.setdefault(ds["metadata"]["uid"], DaemonPods())
        fits, fits_version = self._fits(key, ds)
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        rolling = ((ds["spec"].get("updateStrategy") or {}).get("type")
                   or "RollingUpdate") == "RollingUpdate"
        if min_ready > 0:
            status = self._full_sync(ds, fits, pods, hash_, old_revisions, rolling)
        else:
            status = self._shared_sync(key, ds, fits, fits_version, pods, hash_, old_revisions,
                                       rolling)
        if status != (ds.get("status") or {}):
            self._write_status(ds, status)
        if min_ready > 0 and status.get("numberReady", 0) != status.get("numberAvailable", 0):
            self.schedule(key, min_ready)

    def _adopt(self, ds: Obj) -> None:
        """`ClaimPods` before `manage` (`getNodesToDaemonPods`): matching orphans become this
        DaemonSet's pods, so it creates no second pod beside them; a pod whose template hash
        differs is then rolled by the update strategy like any other old pod."""
        orphans = self._orphans.get(ds["metadata"]["namespace"]) or {}
        for name, pod in sorted(orphans.items()):
            if not adoption.claimable(ds, pod):
                continue
            try:
                new = self.store.update(kinds.POD, adoption.adopted(ds, pod), adopt=True)
            except StoreError as err:
                if err.code not in (404, 409):
                    raise
                continue  # changed or gone meanwhile: its event brings it back here
            self._cache_pod(new, deleted=False)
            log.info("daemonset %s adopted pod %s", ds["metadata"]["name"], name)

    def _full_sync(self, ds: Obj, fits: dict[str, tuple[bool, bool]], pods: DaemonPods,
                   hash_: str, old_revisions: list[Obj], rolling: bool) -> Obj:
        """Every node visited (availability depends on time with minReadySeconds)."""
        available = self.available_fn(ds)
        plan = manage_plan(ds, fits, pods.by_node, hash_, available)
        if not plan and rolling:
            plan = rolling_update_plan(ds, fits, pods.by_node, hash_, available)
        self._apply(ds, plan, hash_)
        self._history.cleanup(ds, old_revisions, pods.by_name.values())
        return compute_status(ds, fits, pods.by_node, hash_, available)

    def _shared_sync(self, key: DSKey, ds: Obj, fits: dict[str, tuple[bool, bool]],
                     fits_version: int, pods: DaemonPods, hash_: str, old_revisions: list[Obj],
                     rolling: bool) -> Obj:
        """The same decisions from the remembered per-node shares (see `daemonindex`)."""
        surge = _allows_surge(ds)
        generation = template_generation(ds)
        signature = (ds["metadata"]["uid"], fits_version, hash_, generation, surge)
        shares = self._shares.get(key)
        if shares is None or shares.signature != signature or not shares.over(pods):
            shares = self._shares[key] = NodeShares(signature, fits, pods, hash_, generation,
                                                    surge)
        else:
            shares.refresh()
        plan = shares.manage_plan()
        if not plan and rolling:
            max_surge, max_unavailable = _rolling_counts(ds, shares.totals[0])
            if max_surge == 0:
                plan = shares.rolling_plan(max_unavailable)
            else:
                plan = rolling_update_plan(ds, fits, pods.by_node, hash_, self.available_fn(ds))
        self._apply(ds, plan, hash_)
        shares.refresh()
        self._history.cleanup(ds, old_revisions, pods.by_name.values())
        return status_of(ds, shares.totals)

    def _apply(self, ds: Obj, plan: Plan, hash_: str) -> None:
        ns = ds["metadata"]["namespace"]
        cache = self._pods.setdefault(ds["metadata"]["uid"], DaemonPods())
        for name in plan.delete:
            view = cache.get(name)
            grace = DEFAULT_GRACE_SECONDS
            if view is not None:
                grace = int(view.obj["spec"].get("terminationGracePeriodSeconds", grace))
            try:
                cache.put(_view(self.store.mark_deleting(kinds.POD, ns, name, grace)))
            except StoreError as err:
                if err.code != 404:
                    raise
                cache.drop(name)
        for node in plan.create:
            for _ in range(5):
                name = f"{ds['metadata']['name']}-{P.random_suffix()}"
                try:
                    pod = self._scheduler.placed(self._factory.pod(ds, node, hash_, name), node)
                    created = self.store.create(kinds.POD, pod, adopt=True)
                    self._scheduler.note(created, deleted=False)
                    cache.put(_view(created))
                    break
                except StoreError as err:
                    if err.reason != "AlreadyExists":
                        raise

    def _write_status(self, ds: Obj, status: Obj) -> None:
        meta = ds["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": status}
        try:
            self._dsets[(meta["namespace"], meta["name"])] = self.store.update(
                kinds.DAEMONSET, body, subresource="status", adopt=True)
        except StoreError as err:
            if err.code != 404:
                raise

    def _pod_written(self, pod: Obj) -> None:
        """A pod the history relabelled (`dedupCurHistories`): cached at once, as a create."""
        self._cache_pod(pod, deleted=False)


def _view(pod: Obj) -> PodView:
    """`PodView.of`, a Pending pod counted on the node it is pinned to (`GetTargetNodeName`)."""
    view = PodView.of(pod)
    if view.node:
        return view
    return dataclasses.replace(view, node=I.target_node(pod))


def _placement_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """A node change that can move DaemonSet pods: labels or taints."""
    if old is None:
        return True
    return bool(
        old["metadata"].get("labels") != new["metadata"].get("labels")
        or (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints")
    )
