"""An imitation of the GPU Operator's two controllers for their DCGM / DCGM Exporter objects.

On in `sim serve`, `demo` and the e2e suite, as on every real cluster. When each controller
reconciles is upstream's (`operatorqueue.py`: events of its CR, of the DaemonSets it controls,
of Node labels; 5 s requeues while not ready, a minute for a GPUCluster; the informers' resync
every `period`, controller-runtime's `SyncPeriod`, 10 h unless a test shortens it); what one
reconcile decides, the refusal of a second CR included, is `reconciles.py`; the release,
`releases.py`. ClusterPolicy and GPUCluster are singletons (the oldest of each kind). The
writes follow controllers/object_controls.go and internal/state/state_skel.go (a22dbf671):

- DaemonSets: skipped when the live `nvidia.com/last-applied-hash` equals the desired hash;
  otherwise replaced by a whole-object Update, which drops labels added by hand.
- Services: re-rendered and replaced on every reconcile, keeping only `clusterIP(s)` and
  `resourceVersion` from the live object, so a hand-edited selector is reverted.
- ResourceClaimTemplates replaced when they differ; missing objects created; ServiceMonitors
  (while their CRD exists) created, and updated when their labels or spec differ.
- The objects of a state the CR disables deleted, on every reconcile, with no ownership check:
  by kind and name for the ClusterPolicy (`clusterpolicy_deletions`: each function of
  object_controls.go starts with `if !n.isStateEnabled(...)`), by the state label for the
  GPUCluster (`gpucluster_deletions`, `deleteStateRelatedObjects`: every labelled object,
  `nvidia-dcgm` / `nvidia-dcgm-exporter` included; only the seed author's fork spares those two,
  "Shared endpoints have their own lifecycle"). Dependents go through the garbage collector.
- The CR's status (`crstatus.py`): state, namespace, the Ready and Error conditions.

The GPUCluster's finalizer and `reconcileDelete` (its DaemonSets drained before the CR goes) are
`reconciles.py`'s. Not modelled: the ClusterPolicy's NFD-label and NVIDIADriver paths (the sim's
nodes stand for NFD-labelled GPU nodes), the resync's jitter.
Writes go through the store, not HTTP: the request log shows only what clients did.
`shared-services-fork` also runs its SharedServiceReconciler (`sharedservices.py`): on every CR
event, every event of the shared Services or their `-dra`, and once a simulated minute.
`set_release` switches a running imitation, as an operator upgrade does (it reconciles at once).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import admission, allocation, kinds, labelselectors, writes
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import nodelabels, reconciles, releases
from dcgm_sim.controllers import operatorqueue as Q
from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers import sharedservices as S
from dcgm_sim.controllers.base import Controller
from dcgm_sim.controllers.rendering import HASH_ANNOTATION, render
from dcgm_sim.jsoncopy import clone
from dcgm_sim.statuses import ApiError
from dcgm_sim.store import Event, Store, StoreError, now_rfc3339

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CR_KINDS = (kinds.CLUSTER_POLICY, kinds.GPU_CLUSTER)
RECONCILED_KINDS = frozenset({"DaemonSet", "Service", "ResourceClaimTemplate"})
# The informers' resync (controller-runtime's `SyncPeriod`, 10 h: the GPU Operator sets none),
# the imitation's default `period`; tests shorten it. Simulated seconds.
RESYNC_SECONDS = Q.SYNC_PERIOD
HISTORY = 256  # reconciles kept for `status()["history"]`
STATE_SKEL_GVKS = reconciles.STATE_SKEL_GVKS  # internal/state/state_skel.go getSupportedGVKs
# The fork's deleteStateRelatedObjects: "Shared endpoints have their own lifecycle".
SHARED_SERVICES = frozenset({"nvidia-dcgm", "nvidia-dcgm-exporter"})
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"


def _allocated(store: Store, excluding_uid: str = "") -> allocation.Allocated:
    return allocation.allocated_by(store.list(kinds.SERVICE)[0], excluding_uid=excluding_uid,
                                   network=store.network)


def apply_desired(store: Store, desired: Obj) -> str:
    """Create or update one rendered object as the operator would, through the API server's
    defaulting (`admission.admit`); returns what it did (`created`, `updated`, `unchanged`,
    `skipped`). Raises StoreError/ApiError as a client would see them."""
    kind = kinds.BY_KIND[desired["kind"]]
    meta = desired["metadata"]
    live = store.find(kind, meta.get("namespace"), meta["name"])
    if live is None:
        allocated = _allocated(store) if kind is kinds.SERVICE else None
        # admit returns a copy of its own: handed over (adopt), not copied again
        store.create(kind, admission.admit(kind, desired, allocated=allocated), adopt=True)
        return "created"
    obj = desired  # admission.admit copies it: `desired` is never mutated (render's cache)
    allocated = None
    if kind is kinds.DAEMONSET:
        live_hash = (live["metadata"].get("annotations") or {}).get(HASH_ANNOTATION)
        if live_hash == meta.get("annotations", {}).get(HASH_ANNOTATION):
            return "skipped"
    elif kind is kinds.SERVICE:
        live_spec = live.get("spec") or {}
        obj = {**desired, "spec": dict(desired["spec"])}
        for field in ("clusterIP", "clusterIPs"):
            if field in live_spec:
                obj["spec"][field] = clone(live_spec[field])
        allocated = _allocated(store, live["metadata"]["uid"])
    obj = admission.admit(kind, obj, live, allocated=allocated)
    obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    new = store.update(kind, obj, adopt=True)  # admit's own copy, handed over
    return "unchanged" if new is live else "updated"


def _delete(store: Store, kind: kinds.Kind, namespace: str | None, name: str,
            propagation: str | None = None) -> bool:
    """A client's DELETE (`client.Delete(ctx, obj)`, with `client.PropagationPolicy` when
    `propagation` is given); NotFound ignored, as both operators ignore it. True when something
    was deleted or marked."""
    try:
        writes.delete(store, kind, namespace=namespace or "", name=name,
                      options=writes.DeleteOptions(propagation=propagation))
    except (ApiError, StoreError) as err:
        if err.code == 404:
            return False
        raise
    return True


def _served(store: Store, kind: kinds.Kind) -> bool:
    """Whether the cluster serves `kind` (RESTMapping): the custom kinds only with their CRD."""
    if kind.group not in ("nvidia.com", "monitoring.coreos.com"):
        return True
    return store.find(kinds.CRD, None, f"{kind.plural}.{kind.group}") is not None


def clusterpolicy_deletions(store: Store, cr: Mapping[str, Any],
                            release: str = releases.DEFAULT) -> list[tuple[kinds.Kind, str]]:
    """What the ClusterPolicy controller deletes for this CR: (kind, name) of each manifest of
    a disabled state, and the exporter's ServiceMonitor when its `serviceMonitor` is off; the
    ServiceMonitors only while their CRD exists (`crdExists`). By name only. The
    `shared-services-fork` release has no Service assets, so it deletes no Service."""
    no_services = releases.release(release).shared_services
    monitors = store.find(kinds.CRD, None, SERVICE_MONITOR_CRD) is not None
    out: list[tuple[kinds.Kind, str]] = []
    for state, *_ in R.STATES[R.CLUSTERPOLICY]:
        enabled = R.state_enabled(cr, state)
        for doc in R.clusterpolicy_state_manifests(state):
            kind = kinds.BY_KIND.get(doc.get("kind", ""))
            if kind is None:
                continue
            if kind is kinds.SERVICE and no_services:
                continue
            if kind is kinds.SERVICE_MONITOR:
                if not monitors or (enabled and R.service_monitor_enabled(cr)):
                    continue
            elif enabled:
                continue
            out.append((kind, doc["metadata"]["name"]))
    return out


def gpucluster_deletions(store: Store, cr: Mapping[str, Any], namespace: str,
                         spare_shared: bool = False) -> list[tuple[kinds.Kind, Obj]]:
    """What `deleteStateRelatedObjects` deletes for this CR: every object of a served
    `STATE_SKEL_GVKS` kind labelled with a disabled state (namespaced kinds in `namespace`),
    not already being deleted (with `spare_shared`, the fork's, not `nvidia-dcgm` /
    `nvidia-dcgm-exporter` either). By label only."""
    out: list[tuple[kinds.Kind, Obj]] = []
    for state, *_ in R.STATES[R.GPUCLUSTER]:
        if R.state_enabled(cr, state):
            continue
        selector = labelselectors.selector_from_set({R.STATE_LABEL: state})
        for kind in kinds.ALL:
            if (kind.group, kind.version, kind.kind) not in STATE_SKEL_GVKS:
                continue
            if not _served(store, kind):
                continue
            items, _ = store.list(kind, namespace if kind.namespaced else None, selector)
            for obj in items:
                if spare_shared and kind is kinds.SERVICE and obj["metadata"][
                        "name"] in SHARED_SERVICES:
                    continue
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                out.append((kind, obj))
    return out


CP, GC = reconciles.CP, reconciles.GC


NODE_LABELS = "node-labels"  # the node labelling reconciler's singleton key


def _labels_nodes(event: Event) -> bool:
    """The node labelling reconciler's watches: its CRs (`singletonCRPredicate`) and nodes."""
    if event.resource.key == kinds.NODE.key:
        return nodelabels.node_triggers(event.type, event.old, event.object)
    return event.resource in CR_KINDS and Q.generation_changed(event.type, event.old,
                                                               event.object)


class OperatorImitation(Controller):
    """The ClusterPolicy and GPUCluster controllers of one GPU Operator release."""

    name = "operator"
    resources = frozenset({*(k.key for k in CR_KINDS), kinds.SERVICE.key, kinds.DAEMONSET.key,
                           kinds.NODE.key})

    def __init__(self, store: Store, clock: SimClock, *, period: float = RESYNC_SECONDS,
                 namespace: str = "gpu-operator", release: str = releases.DEFAULT) -> None:
        super().__init__(store, clock)
        if period <= 0:
            raise ValueError(f"operator resync period must be > 0, got {period!r}")
        releases.release(release)  # ValueError for an unknown one
        self.period = period
        self.namespace = namespace
        self.reconciles = 0  # loop passes that reconciled either CR
        self.deletions = 0  # DELETEs that found their object (its state disabled)
        self.shared_reconciles = 0
        self.shared_writes = 0  # creates, updates and deletes of the shared-service reconciler
        self.shared_errors: list[str] = []  # what its last reconcile returned
        self._release = release
        self._release_lock = threading.Lock()
        self._queue = Q.Requeues()
        # the last reconciles of either CR, in simulated time: what a test reads to tell a
        # requeue from an event without timing real seconds (`status()["history"]`)
        self._history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        # render() is pure: an unchanged CR reuses its last rendering (apply_desired copies)
        self._rendered: dict[tuple[str, str, str, str], list[Obj]] = {}
        # (kind, ns, name) -> (rendered, live resourceVersion) of an apply that changed nothing
        self._unchanged: dict[tuple[str, str, str], tuple[Obj, str]] = {}

    # ---- the release (an operator upgrade or downgrade) --------------------------------------

    @property
    def release(self) -> str:
        with self._release_lock:
            return self._release

    def set_release(self, release: str) -> None:
        """Run `release` from the next reconcile on, and reconcile at once (ValueError for an
        unknown release). Safe from any thread."""
        releases.release(release)
        with self._release_lock:
            self._release = release
        if self.loop is not None:
            self.schedule("release", 0)

    def status(self) -> dict[str, Any]:
        """What `GET /sim/v1/operator` answers."""
        return {"release": self.release, "releases": list(R.RELEASES),
                "period": self.period, "reconciles": self.reconciles,
                "sharedServiceReconciles": self.shared_reconciles,
                "sharedServiceWrites": self.shared_writes,
                "sharedServiceErrors": list(self.shared_errors),
                "history": list(self._history)}

    # ---- when (operatorqueue.py) ---------------------------------------------------------------

    def wants(self, event: Event) -> bool:
        key = event.resource.key
        meta = event.object["metadata"]
        if key == kinds.SERVICE.key:
            return meta.get("namespace") == self.namespace and meta["name"] in S.WATCHED_NAMES
        if key == kinds.DAEMONSET.key:
            return bool(Q.triggered(event.type, "DaemonSet", event.old, event.object))
        if key == kinds.NODE.key:
            return event.type != "MODIFIED" or event.old is None or (
                event.old["metadata"].get("labels") != meta.get("labels"))
        return True

    def prime(self) -> None:
        self.schedule("start", 0)  # the informers' first list: every CR is reconciled
        self.schedule("resync", self.period, background=True)
        self.schedule("shared-resync", S.SHARED_RESYNC_SECONDS, background=True)

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        release = releases.release(self.release)
        why: dict[str, dict[str, Any]] = {}  # controller -> what made it reconcile
        mode = R.MODE_LABEL if release.mode_label else None
        for event in events:
            triggered = Q.triggered(event.type, event.resource.kind, event.old, event.object, mode)
            for controller in triggered:
                why.setdefault(controller, {"by": "event"})
        for key in due:
            if key in ("start", "release", "resync"):
                for controller in (CP, GC):
                    why.setdefault(controller, {"by": key})
                if key == "resync":
                    self.schedule("resync", self.period, background=True)
            elif key == "shared-resync":
                self.schedule("shared-resync", S.SHARED_RESYNC_SECONDS, background=True)
            elif isinstance(key, tuple):
                _, item, due_at, set_at = key
                if self._queue.fired(item, due_at):
                    why.setdefault(item, {"by": "requeue", "due": due_at, "setAt": set_at})
        if why:
            self.reconciles += 1
        now = self.clock.now()
        for controller, cause in why.items():
            self._history.append({"controller": controller, "at": now, **cause})
        if CP in why:  # the two controllers' Reconcile (reconciles.py)
            self._requeue(CP, reconciles.clusterpolicy(self, release, self._queue))
        if GC in why:
            self._requeue(GC, reconciles.gpucluster(self, release))
        if release.shared_services and (
                any(ev.resource.key != kinds.DAEMONSET.key and ev.resource.key != kinds.NODE.key
                    for ev in events) or {"start", "release", "shared-resync"} & set(due)):
            self.reconcile_shared()
        if not release.coexistence and (
                {"start", "release", NODE_LABELS} & set(due) or any(map(_labels_nodes, events))):
            self.label_nodes()

    def label_nodes(self) -> None:
        """The node labelling reconciler's pass for the DCGM deploy labels (nodelabels.py):
        each node it relabels is updated as read; a conflict tries again shortly."""
        stack = nodelabels.active_stack(self.crs("ClusterPolicy"), self.crs("GPUCluster"))
        if stack is None:
            return
        for node in self.store.list(kinds.NODE)[0]:
            new = nodelabels.relabelled(node["metadata"].get("labels") or {}, stack)
            if new is None:
                continue
            body = clone(node)
            body["metadata"]["labels"] = new
            try:
                self.store.update(kinds.NODE, body)
            except StoreError as err:
                if err.code != 409:
                    raise
                self.schedule(NODE_LABELS, 0.1)

    def _requeue(self, item: str, delay: float | None) -> None:
        if delay is None:
            return
        now = self.clock.now()
        due = self._queue.add_after(item, now, delay)
        if due is not None:
            # the timer's key carries when it was set, for the history
            self.schedule(("requeue", item, due, now), delay, background=True)

    def reconcile_shared(self) -> S.SharedResult:
        """One SharedServiceReconciler reconcile (`sharedservices.reconcile`)."""
        self.shared_reconciles += 1
        result = S.reconcile(self.store, self.namespace)
        self.shared_writes += result.writes
        self.shared_errors = result.errors
        return result

    # ---- what a reconcile reads and writes -----------------------------------------------------

    def singleton(self, kind: str) -> Obj | None:
        """The CR of `kind` the controller reconciles: the oldest not being deleted."""
        live = [cr for cr in self.crs(kind) if not cr["metadata"].get("deletionTimestamp")]
        return reconciles.oldest(live) if live else None

    def crs(self, kind: str) -> list[Obj]:
        return list(self.store.list(kinds.BY_KIND[kind])[0])

    def find(self, obj: Mapping[str, Any]) -> Obj | None:
        meta = obj["metadata"]
        return self.store.find(kinds.BY_KIND[obj["kind"]], meta.get("namespace"), meta["name"])

    def write_status(self, kind: str, cr: Obj, change: reconciles.StatusChange) -> None:
        """The CR's status as `change(old status, now)` makes it; nothing when unchanged."""
        resource = kinds.BY_KIND[kind]
        live = self.store.find(resource, None, cr["metadata"]["name"])
        if live is None:
            return
        status = change(live.get("status"), now_rfc3339())
        if status == live.get("status"):
            return
        body = {"metadata": {"name": live["metadata"]["name"],
                             "resourceVersion": live["metadata"]["resourceVersion"]},
                "status": status}
        try:
            self.store.update(resource, body, subresource="status")
        except (StoreError, ApiError) as err:
            log.info("operator: status of %s %s: %s", kind, live["metadata"]["name"], err)

    def sync(self, kind: str, cr: Obj, release: releases.Release) -> list[Obj]:
        """Render, create or update, delete what disabled states left; the rendered objects."""
        return self._sync(kinds.BY_KIND[kind], cr, release)

    def daemonsets(self) -> list[Obj]:
        return list(self.store.list(kinds.DAEMONSET, self.namespace)[0])

    def delete_foreground(self, obj: Obj) -> None:
        """`r.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationForeground))`."""
        meta = obj["metadata"]
        try:
            _delete(self.store, kinds.BY_KIND[obj["kind"]], meta["namespace"], meta["name"],
                    "Foreground")
        except (StoreError, ApiError) as err:
            log.info("operator: delete %s %s: %s", obj["kind"], meta["name"], err)

    def set_finalizer(self, kind: str, cr: Obj, finalizer: str, present: bool) -> None:
        """Add (`EnsureFinalizer`: a merge patch with the optimistic lock) or remove
        (`RemoveFinalizer`, `Update`) `finalizer`; a conflict waits for the next reconcile."""
        resource = kinds.BY_KIND[kind]
        live = self.store.find(resource, None, cr["metadata"]["name"])
        if live is None or live["metadata"]["uid"] != cr["metadata"]["uid"]:
            return
        now = list(live["metadata"].get("finalizers") or [])
        wanted = ([*now, finalizer] if finalizer not in now else now) if present else [
            f for f in now if f != finalizer]
        if wanted == now:
            return
        new = clone(live)
        new["metadata"]["finalizers"] = wanted
        try:
            self.store.update(resource, new)
        except (StoreError, ApiError) as err:
            log.info("operator: finalizer of %s %s: %s", kind, cr["metadata"]["name"], err)

    def _sync(self, kind: kinds.Kind, cr: Obj, release: releases.Release) -> list[Obj]:
        """Render, create or update, delete what disabled states left; the rendered objects."""
        objs = self._render(kind, cr, release.name)
        for desired in objs:
            if desired["kind"] == "ServiceMonitor":
                if not self._monitor_outdated(desired):
                    continue
            elif desired["kind"] not in RECONCILED_KINDS:
                continue
            try:
                self._apply(desired)
            except (StoreError, ApiError) as err:
                log.info("operator: %s %s: %s", desired["kind"], desired["metadata"]["name"],
                         err)
        self.delete_disabled(cr, release.name)
        return objs

    def _apply(self, desired: Obj) -> None:
        meta = desired["metadata"]
        kind = kinds.BY_KIND[desired["kind"]]
        key = (kind.key, str(meta.get("namespace") or ""), str(meta["name"]))
        live = self.store.find(kind, meta.get("namespace"), meta["name"])
        memo = self._unchanged.pop(key, None)
        if (memo is not None and live is not None and memo[0] is desired
                and memo[1] == live["metadata"].get("resourceVersion")):
            self._unchanged[key] = memo
            return
        if apply_desired(self.store, desired) == "unchanged" and live is not None:
            self._unchanged[key] = (desired, str(live["metadata"].get("resourceVersion")))

    def _render(self, kind: kinds.Kind, cr: Obj, release: str) -> list[Obj]:
        meta = cr["metadata"]
        # keyed by generation and annotations, not resourceVersion: status writes move that
        key = (kind.key, str(meta.get("uid", "")),
               f"{meta.get('generation')}/{sorted((meta.get('annotations') or {}).items())}",
               release)
        objs = self._rendered.get(key)
        if objs is None:
            objs = render(cr, self.namespace, release)
            self._rendered = {k: v for k, v in self._rendered.items() if k[0] != kind.key}
            self._rendered[key] = objs
        return objs

    def _monitor_outdated(self, desired: Obj) -> bool:
        """A rendered ServiceMonitor is written while its CRD exists: created when absent (so
        a state switched back on gets it again), updated when its labels or spec differ."""
        meta = desired["metadata"]
        if self.store.find(kinds.CRD, None, SERVICE_MONITOR_CRD) is None:
            return False
        live = self.store.find(kinds.SERVICE_MONITOR, meta.get("namespace"), meta["name"])
        return live is None or (live.get("spec") != desired.get("spec") or any(
            (live["metadata"].get("labels") or {}).get(k) != v
            for k, v in (meta.get("labels") or {}).items()))

    def delete_disabled(self, cr: Mapping[str, Any], release: str = releases.DEFAULT) -> None:
        """Delete the objects of the states `cr` disables, as its upstream controller does."""
        if R.stack_of(cr) == R.CLUSTERPOLICY:
            targets = [(kind, self.namespace if kind.namespaced else None, name)
                       for kind, name in clusterpolicy_deletions(self.store, cr, release)]
        else:
            spare = releases.release(release).spares_shared_services
            targets = [(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                       for kind, obj in gpucluster_deletions(self.store, cr, self.namespace,
                                                             spare)]
        for kind, namespace, name in targets:
            try:
                if _delete(self.store, kind, namespace, name):
                    self.deletions += 1
                    log.info("operator: deleted %s %s (state disabled)", kind.kind, name)
            except (StoreError, ApiError) as err:
                log.info("operator: delete %s %s: %s", kind.kind, name, err)

