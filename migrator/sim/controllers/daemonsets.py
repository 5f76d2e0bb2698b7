"""The DaemonSet controller, after kubernetes/pkg/controller/daemon (daemon_controller.go,
update.go).

One sync of a DaemonSet runs, as upstream: history (ControllerRevisions and the template hash),
`manage` (a pod on every node that should run one, surplus and misplaced pods deleted), and only
when `manage` had nothing to do (upstream: expectations satisfied) the rolling update; then
history cleanup and the status counters. The pure pieces (`new_pod`, `compute_status`,
`rolling_update_plan`) are shared with `seed.py`, so a seeded cluster is exactly what this
controller would have produced.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.model import kinds
from migrator.sim import admission
from migrator.sim.clock import SimClock
from migrator.sim.controllers import pods as P
from migrator.sim.controllers.base import Controller
from migrator.sim.controllers.scheduling import daemon_tolerations, node_should_run, pin_to_node
from migrator.sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
DSKey = tuple[str, str]

HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
DEFAULT_GRACE_SECONDS = 30
# Status fields the API omits when zero (`omitempty` in apps/v1 DaemonSetStatus).
_OMIT_WHEN_ZERO = ("observedGeneration", "updatedNumberScheduled", "numberAvailable",
                   "numberUnavailable")


# ---- pure pieces -----------------------------------------------------------------------------


def template_generation(ds: Mapping[str, Any]) -> int | None:
    """`util.GetTemplateGeneration`; the sim falls back to `metadata.generation` when the
    server did not set the deprecated annotation."""
    meta = ds.get("metadata", {})
    raw = (meta.get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            return None
    gen = meta.get("generation")
    return int(gen) if gen is not None else None


def ds_hash(ds: Mapping[str, Any]) -> str:
    collisions = int((ds.get("status") or {}).get("collisionCount") or 0)
    return P.template_hash(ds["spec"]["template"], collisions)


def is_pod_updated(pod: Mapping[str, Any], hash_: str, generation: int | None) -> bool:
    """`util.IsPodUpdated`: the pod carries the current hash or template generation."""
    labels = pod.get("metadata", {}).get("labels") or {}
    by_gen = generation is not None and labels.get(GENERATION_LABEL) == str(generation)
    return (bool(hash_) and labels.get(HASH_LABEL) == hash_) or by_gen


def new_pod(ds: Mapping[str, Any], node: str, hash_: str, name: str) -> Obj:
    """The pod `syncNodes` creates for `node`, as the API server stores it (defaulted by
    `admission.admit`). The sim's scheduler binds at once: `spec.nodeName` is set next to the
    node-name affinity, with the PodScheduled condition."""
    template = copy.deepcopy(ds["spec"]["template"])
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    generation = template_generation(ds)
    if generation is not None:
        labels[GENERATION_LABEL] = str(generation)
    labels[HASH_LABEL] = hash_
    spec = template.get("spec") or {}
    spec["tolerations"] = daemon_tolerations(spec)
    spec["affinity"] = pin_to_node(spec.get("affinity"), node)
    spec["nodeName"] = node
    pod_meta: Obj = {
        "name": name,
        "generateName": f"{ds['metadata']['name']}-",
        "namespace": ds["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [P.owner_reference(ds)],
    }
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    pod = admission.admit(kinds.POD, {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
                                      "spec": spec})
    pod.setdefault("status", {})["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
         "lastTransitionTime": P.now_rfc3339()}]
    return pod


def revision_patch(ds: Mapping[str, Any]) -> Obj:
    """`getPatch`: the ControllerRevision data that restores this template."""
    template = copy.deepcopy(ds["spec"]["template"])
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def new_revision(ds: Mapping[str, Any], hash_: str, revision: int) -> Obj:
    meta = ds["metadata"]
    labels = dict((ds["spec"]["template"].get("metadata") or {}).get("labels") or {})
    labels[HASH_LABEL] = hash_
    rev_meta: Obj = {
        "name": f"{meta['name']}-{hash_}",
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [P.owner_reference(ds)],
    }
    if meta.get("annotations"):
        rev_meta["annotations"] = dict(meta["annotations"])
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": rev_meta,
            "data": revision_patch(ds), "revision": revision}


def group_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """`getNodesToDaemonPods(includeDeletedTerminal=false)`, oldest pod first per node."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if P.is_pod_terminal(pod) and P.is_deleting(pod):
            continue
        out.setdefault(P.node_name(pod), []).append(pod)
    for group in out.values():
        group.sort(key=P.creation_sort_key)
    return out


Available = Callable[[Obj], bool]


def compute_status(
    ds: Mapping[str, Any],
    fits: Mapping[str, tuple[bool, bool]],
    node_pods: Mapping[str, list[Obj]],
    hash_: str,
    available: Available,
    *,
    observe: bool = True,
) -> Obj:
    """`updateDaemonSetStatus`: the counters, from the oldest pod on each node."""
    generation = template_generation(ds)
    desired = current = misscheduled = ready = updated = avail = 0
    for node, (should_run, _) in fits.items():
        pods = node_pods.get(node) or []
        if should_run:
            desired += 1
            if not pods:
                continue
            current += 1
            oldest = pods[0]
            if P.is_pod_ready(oldest):
                ready += 1
                if available(oldest):
                    avail += 1
            if is_pod_updated(oldest, hash_, generation):
                updated += 1
        elif pods:
            misscheduled += 1
    status: Obj = dict(ds.get("status") or {})
    status.update({
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "desiredNumberScheduled": desired,
        "numberReady": ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": avail,
        "numberUnavailable": desired - avail,
    })
    if observe:
        status["observedGeneration"] = ds["metadata"].get("generation", 0)
    for key in _OMIT_WHEN_ZERO:
        if not status.get(key):
            status.pop(key, None)
    return status


def _rolling_counts(ds: Mapping[str, Any], desired: int) -> tuple[int, int]:
    """`updatedDesiredNodeCounts`: (maxSurge, maxUnavailable) for `desired` nodes."""
    strategy = ds["spec"].get("updateStrategy") or {}
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    max_unavailable = P.scaled_value(rolling.get("maxUnavailable"), desired, round_up=True,
                                     default=1)
    max_surge = P.scaled_value(rolling.get("maxSurge"), desired, round_up=True, default=0)
    if desired > 0 and max_unavailable == 0 and max_surge == 0:
        max_unavailable = 1
    return max_surge, max_unavailable


def _find_updated(
    pods: list[Obj], hash_: str, gen: int | None
) -> tuple[Obj | None, Obj | None, bool]:
    """`findUpdatedPodsOnNode`: (new, old, ok) among the node's non-deleting pods."""
    new = old = None
    for pod in pods:
        if P.is_deleting(pod):
            continue
        if is_pod_updated(pod, hash_, gen):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


@dataclass
class Plan:
    """What one pass decided: pods to delete (names) and nodes that need a new pod."""

    delete: list[str] = field(default_factory=list)
    create: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.delete or self.create)


def manage_plan(
    ds: Mapping[str, Any], fits: Mapping[str, tuple[bool, bool]],
    node_pods: Mapping[str, list[Obj]], hash_: str, available: Available,
) -> Plan:
    """`manage` / `podsShouldBeOnNode`."""
    plan = Plan()
    surge = _allows_surge(ds)
    for node, (should_run, should_continue) in fits.items():
        pods = node_pods.get(node)
        if should_run and not pods:
            plan.create.append(node)
            continue
        if not pods:
            continue
        if should_continue:
            running = []
            for pod in pods:
                if P.is_deleting(pod):
                    continue
                if P.is_pod_terminal(pod):
                    plan.delete.append(pod["metadata"]["name"])
                else:
                    running.append(pod)
            if not surge:
                plan.delete.extend(p["metadata"]["name"] for p in running[1:])
                continue
            if len(running) <= 1:
                if not running and should_run:
                    plan.create.append(node)
                continue
            oldest_new = oldest_old = None
            for pod in running:
                if pod["metadata"].get("labels", {}).get(HASH_LABEL) == hash_:
                    if oldest_new is None:
                        oldest_new = pod
                        continue
                elif oldest_old is None:
                    oldest_old = pod
                    continue
                plan.delete.append(pod["metadata"]["name"])
            if oldest_new is not None and oldest_old is not None and (
                not P.is_pod_ready(oldest_old) or available(oldest_new)
            ):
                plan.delete.append(oldest_old["metadata"]["name"])
        else:
            plan.delete.extend(p["metadata"]["name"] for p in pods if not P.is_deleting(p))
    return plan


def _allows_surge(ds: Mapping[str, Any]) -> bool:
    """`util.AllowsSurge`: maxSurge scaled against one node is positive."""
    return _rolling_counts(ds, 1)[0] > 0


def rolling_update_plan(
    ds: Mapping[str, Any], fits: Mapping[str, tuple[bool, bool]],
    node_pods: Mapping[str, list[Obj]], hash_: str, available: Available,
) -> Plan:
    """`rollingUpdate` (update.go), both the maxSurge == 0 and the surge branch."""
    gen = template_generation(ds)
    nodes: dict[str, list[Obj]] = {n: list(p) for n, p in node_pods.items()}
    desired = 0
    for node, (should_run, _) in fits.items():
        if should_run:
            desired += 1
            nodes.setdefault(node, [])
    max_surge, max_unavailable = _rolling_counts(ds, desired)
    plan = Plan()
    if max_surge == 0:
        unavailable = 0
        replace: list[str] = []
        candidates: list[str] = []
        for node in sorted(nodes):
            new, old, ok = _find_updated(nodes[node], hash_, gen)
            if not ok or (new is None) == (old is None):
                unavailable += 1
            elif new is not None:
                if not available(new):
                    unavailable += 1
            elif old is not None:
                if not available(old):
                    replace.append(old["metadata"]["name"])
                    unavailable += 1
                elif unavailable < max_unavailable:
                    candidates.append(old["metadata"]["name"])
        remaining = min(max(max_unavailable - unavailable, 0), len(candidates))
        plan.delete = replace + candidates[:remaining]
        return plan
    surge = available_count = 0
    allowed: list[str] = []
    candidate_nodes: list[str] = []
    should_not_run: list[str] = []
    for node in sorted(nodes):
        new, old, ok = _find_updated(nodes[node], hash_, gen)
        if not ok:
            surge += 1
            continue
        if old is not None:
            available_count += available(old)
        elif new is not None:
            available_count += available(new)
        runs = fits.get(node, (False, False))[0]
        if old is None:
            continue
        if new is None:
            if not available(old):
                if not runs:
                    plan.delete.append(old["metadata"]["name"])
                else:
                    allowed.append(node)
            elif not runs:
                should_not_run.append(old["metadata"]["name"])
            elif surge < max_surge:
                candidate_nodes.append(node)
        elif not available(new):
            surge += 1
        else:
            plan.delete.append(old["metadata"]["name"])
    deletable = min(max(available_count - desired, 0), len(should_not_run))
    plan.delete.extend(should_not_run[:deletable])
    remaining = min(max(max_surge - surge, 0), len(candidate_nodes))
    plan.create = allowed + candidate_nodes[:remaining]
    return plan


# ---- the controller --------------------------------------------------------------------------


class DaemonSetController(Controller):
    """Keeps every DaemonSet's pods, history and status as kube-controller-manager does."""

    name = "daemonset"
    resources = frozenset({kinds.DAEMONSET.key, kinds.POD.key, kinds.NODE.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._dsets: dict[DSKey, Obj] = {}
        self._pods: dict[DSKey, dict[str, Obj]] = {}
        self._nodes: dict[str, Obj] = {}
        self._ready_since: dict[str, float] = {}
        self._fit_cache: dict[DSKey, tuple[str, dict[str, tuple[str, tuple[bool, bool]]]]] = {}

    # ---- caches ----------------------------------------------------------------------------

    def prime(self) -> None:
        for node in self.store.list(kinds.NODE)[0]:
            self._nodes[node["metadata"]["name"]] = node
        for ds in self.store.list(kinds.DAEMONSET)[0]:
            key = (ds["metadata"]["namespace"], ds["metadata"]["name"])
            self._dsets[key] = ds
            self.schedule(key, 0)
        for pod in self.store.list(kinds.POD)[0]:
            self._cache_pod(pod, deleted=False, primed=True)

    def _owner_key(self, pod: Mapping[str, Any]) -> DSKey | None:
        ref = P.controller_ref(pod)
        if ref is None or ref.get("kind") != "DaemonSet":
            return None
        return (pod["metadata"]["namespace"], ref["name"])

    def _cache_pod(self, pod: Obj, *, deleted: bool, primed: bool = False) -> DSKey | None:
        key = self._owner_key(pod)
        if key is None:
            return None
        name = pod["metadata"]["name"]
        uid = pod["metadata"]["uid"]
        if deleted:
            self._pods.get(key, {}).pop(name, None)
            self._ready_since.pop(uid, None)
            return key
        self._pods.setdefault(key, {})[name] = pod
        if P.is_pod_ready(pod):
            # Pods already Ready when the controller starts count as ready long ago.
            self._ready_since.setdefault(uid, float("-inf") if primed else self.clock.now())
        else:
            self._ready_since.pop(uid, None)
        return key

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
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
                else:
                    self._dsets[key] = obj
                dirty.add(key)
            elif ev.resource is kinds.POD:
                owner = self._cache_pod(obj, deleted=ev.type == "DELETED")
                if owner is not None:
                    dirty.add(owner)
            elif ev.resource is kinds.NODE:
                name = obj["metadata"]["name"]
                if ev.type == "DELETED":
                    self._nodes.pop(name, None)
                    all_dirty = True
                else:
                    self._nodes[name] = obj
                    if ev.type == "ADDED" or _placement_changed(ev.old, obj):
                        all_dirty = True
        if all_dirty:
            dirty.update(self._dsets)
        for key in sorted(dirty):
            try:
                self.sync(key)
            except StoreError as err:
                log.info("daemonset %s/%s: %s; retrying", key[0], key[1], err.message)
                self.schedule(key, 1.0)

    # ---- one sync --------------------------------------------------------------------------

    def available_fn(self, ds: Mapping[str, Any]) -> Available:
        """`podutil.IsPodAvailable` with the DaemonSet's minReadySeconds, in simulated time."""
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        now = self.clock.now()

        def available(pod: Obj) -> bool:
            if not P.is_pod_ready(pod):
                return False
            if min_ready <= 0:
                return True
            since = self._ready_since.get(pod["metadata"]["uid"])
            return since is not None and now - since >= min_ready

        return available

    def _fits(self, key: DSKey, ds: Mapping[str, Any]) -> dict[str, tuple[bool, bool]]:
        spec = ds["spec"]["template"].get("spec") or {}
        fingerprint = P.canonical_json([spec.get(k) for k in (
            "nodeName", "nodeSelector", "affinity", "tolerations", "hostNetwork")])
        cached_fp, cache = self._fit_cache.get(key, ("", {}))
        if cached_fp != fingerprint:
            cache = {}
        out: dict[str, tuple[bool, bool]] = {}
        fresh: dict[str, tuple[str, tuple[bool, bool]]] = {}
        for name, node in self._nodes.items():
            rv = node["metadata"]["resourceVersion"]
            hit = cache.get(name)
            result = hit[1] if hit is not None and hit[0] == rv else node_should_run(spec, node)
            fresh[name] = (rv, result)
            out[name] = result
        self._fit_cache[key] = (fingerprint, fresh)
        return out

    def sync(self, key: DSKey) -> None:
        ds = self._dsets.get(key)
        if ds is None or P.is_deleting(ds):
            return
        hash_ = self._construct_history(ds)
        fits = self._fits(key, ds)
        available = self.available_fn(ds)
        node_pods = group_by_node(self._ds_pods(key, ds))
        plan = manage_plan(ds, fits, node_pods, hash_, available)
        if not plan:
            strategy = (ds["spec"].get("updateStrategy") or {}).get("type") or "RollingUpdate"
            if strategy == "RollingUpdate":
                plan = rolling_update_plan(ds, fits, node_pods, hash_, available)
        self._apply(key, ds, plan, hash_)
        if plan:
            node_pods = group_by_node(self._ds_pods(key, ds))
        self._cleanup_history(ds, node_pods)
        status = compute_status(ds, fits, node_pods, hash_, available)
        if status != (ds.get("status") or {}):
            self._write_status(ds, status)
        min_ready = int(ds["spec"].get("minReadySeconds") or 0)
        if min_ready > 0 and status.get("numberReady", 0) != status.get("numberAvailable", 0):
            self.schedule(key, min_ready)

    def _ds_pods(self, key: DSKey, ds: Mapping[str, Any]) -> list[Obj]:
        """Cached pods whose controller is this DaemonSet (this uid, not a namesake)."""
        uid = ds["metadata"]["uid"]
        return [p for p in self._pods.get(key, {}).values()
                if (P.controller_ref(p) or {}).get("uid") == uid]

    def _apply(self, key: DSKey, ds: Obj, plan: Plan, hash_: str) -> None:
        ns = ds["metadata"]["namespace"]
        cache = self._pods.setdefault(key, {})
        for name in plan.delete:
            pod = cache.get(name)
            grace = DEFAULT_GRACE_SECONDS
            if pod is not None:
                grace = int(pod["spec"].get("terminationGracePeriodSeconds", grace))
            try:
                cache[name] = self.store.mark_deleting(kinds.POD, ns, name, grace)
            except StoreError as err:
                if err.code != 404:
                    raise
                cache.pop(name, None)
        for node in plan.create:
            for _ in range(5):
                name = f"{ds['metadata']['name']}-{P.random_suffix()}"
                try:
                    cache[name] = self.store.create(kinds.POD, new_pod(ds, node, hash_, name))
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
                kinds.DAEMONSET, body, subresource="status")
        except StoreError as err:
            if err.code != 404:
                raise

    # ---- history ---------------------------------------------------------------------------

    def _revisions(self, ds: Mapping[str, Any]) -> list[Obj]:
        uid = ds["metadata"]["uid"]
        revs, _ = self.store.list(kinds.CONTROLLER_REVISION, ds["metadata"]["namespace"])
        return [r for r in revs if (P.controller_ref(r) or {}).get("uid") == uid]

    def _construct_history(self, ds: Obj) -> str:
        """`constructHistory` + `snapshot`: the current revision's hash."""
        hash_ = ds_hash(ds)
        patch = revision_patch(ds)
        revs = self._revisions(ds)
        current = [r for r in revs if r.get("data") == patch]
        old = [r for r in revs if r.get("data") != patch]
        next_rev = max((int(r.get("revision", 0)) for r in old), default=0) + 1
        if not current:
            try:
                self.store.create(kinds.CONTROLLER_REVISION, new_revision(ds, hash_, next_rev))
            except StoreError as err:
                if err.reason != "AlreadyExists":
                    raise
                # A different template under the same hash: bump collisionCount, as upstream.
                status = dict(ds.get("status") or {})
                status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
                self._write_status(ds, status)
                raise
            return hash_
        cur = max(current, key=lambda r: int(r.get("revision", 0)))
        if int(cur.get("revision", 0)) < next_rev:
            updated = copy.deepcopy(cur)
            updated["revision"] = next_rev
            self.store.update(kinds.CONTROLLER_REVISION, updated)
        return str((cur["metadata"].get("labels") or {}).get(HASH_LABEL) or hash_)

    def _cleanup_history(self, ds: Obj, node_pods: Mapping[str, list[Obj]]) -> None:
        limit = ds["spec"].get("revisionHistoryLimit")
        keep = 10 if limit is None else int(limit)
        patch = revision_patch(ds)
        old = [r for r in self._revisions(ds) if r.get("data") != patch]
        kill = len(old) - keep
        if kill <= 0:
            return
        live = {(p["metadata"].get("labels") or {}).get(HASH_LABEL)
                for pods in node_pods.values() for p in pods}
        for rev in sorted(old, key=lambda r: int(r.get("revision", 0))):
            if kill <= 0:
                break
            if (rev["metadata"].get("labels") or {}).get(HASH_LABEL) in live:
                continue
            try:
                self.store.delete(kinds.CONTROLLER_REVISION, rev["metadata"]["namespace"],
                                  rev["metadata"]["name"])
            except StoreError as err:
                if err.code != 404:
                    raise
            kill -= 1


def _placement_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """A node change that can move DaemonSet pods: labels or taints."""
    if old is None:
        return True
    return bool(
        old["metadata"].get("labels") != new["metadata"].get("labels")
        or (old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints")
    )
