"""An imitation of the GPU Operator's reconcile loop for its DCGM / DCGM Exporter objects.

On by default in `sim serve`, `demo` and the e2e suite (`RESYNC_SECONDS`), as on every real
cluster; when on, every `period` simulated seconds (and at once when a CR changes) it
renders the desired objects for each CR present (ClusterPolicy and GPUCluster are singletons: the
oldest of each kind wins, as upstream) and applies them as upstream does
(controllers/object_controls.go, internal/state/state_skel.go):

- DaemonSets: skipped when the live `nvidia.com/last-applied-hash` equals the desired hash;
  otherwise replaced by a whole-object Update, which drops labels added by hand.
- Services: re-rendered and replaced on every reconcile, keeping only `clusterIP(s)` and
  `resourceVersion` from the live object, so a hand-edited selector is reverted.
- ResourceClaimTemplates (the GPUCluster DCGM pods' admin-access GPU claims): replaced when
  they differ.
- Missing objects are created, ServiceMonitors too (when their CRD exists); an existing
  ServiceMonitor is updated when its labels or spec differ from the render (upstream updates it
  on every reconcile), so the ClusterPolicy's `dcgmExporter.serviceMonitor` edits (its
  `relabelings`, `rendering.service_monitor_edits`) reach it and a hand edit is reverted.

The objects of a state the CR disables are deleted, on every reconcile, as upstream deletes
them; neither operator checks ownership first, so what survives is decided by name or label
alone:

- ClusterPolicy (controllers/object_controls.go: `ServiceAccount`, `Role`, ..., `DaemonSet`,
  `Service`, `ServiceMonitor`, each starting with `if !n.isStateEnabled(n.stateNames[n.idx])`;
  `isStateEnabled` in controllers/state_manager.go maps `state-dcgm` to `spec.dcgm.enabled` and
  `state-dcgm-exporter` to `spec.dcgmExporter.enabled`): each object of the disabled state's
  assets is deleted by kind and name in the operator namespace, `n.client.Delete(ctx, obj)` on
  the unrendered asset: no ownerReference or label check, no preconditions, the server's
  default propagation (background), NotFound ignored. So a same-named object the operator did
  not create (no ownerReference) is deleted too, on every reconcile while the state is off.
  `ServiceMonitor` deletes only when the servicemonitors.monitoring.coreos.com CRD exists
  (`crdExists`), and deletes the exporter's ServiceMonitor also when the exporter is on but
  `dcgmExporter.serviceMonitor.enabled` is not true. The sim's assets hold the DaemonSet,
  Service and ServiceMonitor of each state (`rendering.clusterpolicy_state_manifests`);
  upstream's also hold a ServiceAccount, Role, RoleBinding and, on OpenShift, an SCC, which the
  sim does not render.
- GPUCluster (internal/state/configurable_state.go `Sync`: a disabled state renders nothing, so
  `handleStateObjectsDeletion` → `deleteStateRelatedObjects` in state_skel.go, as of
  rahulait/gpu-operator@5746d440): for each kind of `getSupportedGVKs` the cluster serves
  (`STATE_SKEL_GVKS`; here ServiceAccount, ConfigMap, DaemonSet, Deployment,
  CustomResourceDefinition, ClusterRole, ClusterRoleBinding, Role, RoleBinding, CronJob, Pod,
  Service, ServiceMonitor, ResourceClaimTemplate), a List with the label selector
  `nvidia.com/gpu-operator.state=<state>` (in the operator namespace for namespaced kinds,
  cluster-wide otherwise), then a default Delete of every item not already being deleted —
  again no ownership check, so any object carrying that label goes and a same-named object
  without it stays. Services named `nvidia-dcgm` and `nvidia-dcgm-exporter` are skipped
  ("Shared endpoints have their own lifecycle").

Dependents (a DaemonSet's pods and ControllerRevisions) then go through the garbage collector,
as after any DELETE. The CR's own deletion is the garbage collector's alone (ownerReferences).

It writes through the store (`writes.delete` for deletions, the API server's DELETE), not HTTP,
so the request log shows only what clients did.

Operator release (`release`, one of `rendering.RELEASES`): `current` is all of the above;
`shared-services` is the release of rahulait/gpu-operator@5746d440: the stacks render their
DaemonSets with the component label and no Services (so the ClusterPolicy deletes no Service
by name either), and its SharedServiceReconciler (`sharedservices.py`, which says what could
not be determined) owns `nvidia-dcgm` / `nvidia-dcgm-exporter`, triggered by every CR event,
every event of those Services or their `-dra`, and once a simulated minute. `set_release`
switches a running imitation, as an operator upgrade does: thread-safe, it reconciles at once.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import admission, allocation, kinds, labelselectors, writes
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers import sharedservices as S
from dcgm_sim.controllers.base import Controller
from dcgm_sim.controllers.rendering import HASH_ANNOTATION, Fixtures, render
from dcgm_sim.statuses import ApiError
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CR_KINDS = (kinds.CLUSTER_POLICY, kinds.GPU_CLUSTER)
RECONCILED_KINDS = frozenset({"DaemonSet", "Service", "ResourceClaimTemplate"})
# The ClusterPolicy controller requeues every 5 s while a state is not ready
# (controllers/clusterpolicy_controller.go: `ctrl.Result{RequeueAfter: time.Second * 5}`); a
# hand edit of an object it owns is reverted within that. Simulated seconds.
RESYNC_SECONDS = 5.0
# internal/state/state_skel.go `getSupportedGVKs` (rahulait/gpu-operator@5746d440): the
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
# deleteStateRelatedObjects: "Shared endpoints have their own lifecycle".
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
                obj["spec"][field] = copy.deepcopy(live_spec[field])
        allocated = _allocated(store, live["metadata"]["uid"])
    obj = admission.admit(kind, obj, live, allocated=allocated)
    obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    new = store.update(kind, obj, adopt=True)  # admit's own copy, handed over
    return "unchanged" if new is live else "updated"


def _delete(store: Store, kind: kinds.Kind, namespace: str | None, name: str) -> bool:
    """A client's DELETE with no options (`client.Delete(ctx, obj)`); NotFound ignored, as both
    operators ignore it. True when something was deleted or marked."""
    try:
        writes.delete(store, kind, namespace=namespace or "", name=name)
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


def clusterpolicy_deletions(store: Store, cr: Mapping[str, Any], fx: Fixtures,
                            release: str = R.RELEASE_CURRENT) -> list[tuple[kinds.Kind, str]]:
    """What the ClusterPolicy controller deletes for this CR: (kind, name) of each manifest of
    a disabled state, and the exporter's ServiceMonitor when its `serviceMonitor` is off; the
    ServiceMonitors only while their CRD exists (`crdExists`). By name only. The
    `shared-services` release has no Service assets, so it deletes no Service."""
    monitors = store.find(kinds.CRD, None, SERVICE_MONITOR_CRD) is not None
    out: list[tuple[kinds.Kind, str]] = []
    for state, _, _ in R.STATES[R.CLUSTERPOLICY]:
        enabled = R.state_enabled(cr, state)
        for doc in R.clusterpolicy_state_manifests(state, fx):
            kind = kinds.BY_KIND.get(doc.get("kind", ""))
            if kind is None:
                continue
            if kind is kinds.SERVICE and release == R.RELEASE_SHARED_SERVICES:
                continue
            if kind is kinds.SERVICE_MONITOR:
                if not monitors or (enabled and R.service_monitor_enabled(cr)):
                    continue
            elif enabled:
                continue
            out.append((kind, doc["metadata"]["name"]))
    return out


def gpucluster_deletions(store: Store, cr: Mapping[str, Any],
                         namespace: str) -> list[tuple[kinds.Kind, Obj]]:
    """What `deleteStateRelatedObjects` deletes for this CR: every object of a served
    `STATE_SKEL_GVKS` kind labelled with a disabled state (namespaced kinds in `namespace`),
    not already being deleted, except the shared Services. By label only."""
    out: list[tuple[kinds.Kind, Obj]] = []
    for state, _, _ in R.STATES[R.GPUCLUSTER]:
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
                if kind is kinds.SERVICE and obj["metadata"]["name"] in SHARED_SERVICES:
                    continue
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                out.append((kind, obj))
    return out


class OperatorImitation(Controller):
    """Reconciles DCGM/Exporter DaemonSets and Services against the CRs, periodically."""

    name = "operator"
    resources = frozenset({*(k.key for k in CR_KINDS), kinds.SERVICE.key})

    def __init__(self, store: Store, clock: SimClock, *, period: float,
                 namespace: str = "gpu-operator", release: str = R.RELEASE_CURRENT) -> None:
        super().__init__(store, clock)
        if period <= 0:
            raise ValueError(f"operator reconcile period must be > 0, got {period!r}")
        _check_release(release)
        self.period = period
        self.namespace = namespace
        self.reconciles = 0
        self.deletions = 0  # DELETEs that found their object (its state disabled)
        self.shared_reconciles = 0
        self.shared_writes = 0  # creates, updates and deletes of the shared-service reconciler
        self.shared_errors: list[str] = []  # what its last reconcile returned
        self._release = release
        self._release_lock = threading.Lock()
        self._fixtures = Fixtures()
        # render() is a pure function of the CR, the namespace and the release: each resync
        # of an unchanged CR reuses the last rendering instead of re-rendering every manifest
        # (the objects are only read: apply_desired and admission copy before writing).
        self._rendered: dict[tuple[str, str, str, str], list[Obj]] = {}
        # (kind, namespace, name) -> (the rendered object, the live resourceVersion) of the
        # last apply that changed nothing: the same object against the same live version
        # would change nothing again, so a resync skips its admission and update.
        self._unchanged: dict[tuple[str, str, str], tuple[Obj, str]] = {}

    # ---- the release (an operator upgrade or downgrade) --------------------------------------

    @property
    def release(self) -> str:
        with self._release_lock:
            return self._release

    def set_release(self, release: str) -> None:
        """Run `release` from the next reconcile on, and reconcile at once (ValueError for an
        unknown release). Safe from any thread."""
        _check_release(release)
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
                "sharedServiceErrors": list(self.shared_errors)}

    # ---- the loop ------------------------------------------------------------------------------

    def wants(self, event: Event) -> bool:
        if event.resource.key != kinds.SERVICE.key:
            return True
        meta = event.object["metadata"]
        return meta.get("namespace") == self.namespace and meta["name"] in S.WATCHED_NAMES

    def prime(self) -> None:
        self.schedule("resync", 0)
        self.schedule("shared-resync", S.SHARED_RESYNC_SECONDS, background=True)

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        cr_events = [ev for ev in events if ev.resource.key != kinds.SERVICE.key]
        changed = any(ev.type != "DELETED" and _cr_changed(ev.old, ev.object)
                      for ev in cr_events)
        if "resync" in due:
            self.schedule("resync", self.period, background=True)
        if "shared-resync" in due:
            self.schedule("shared-resync", S.SHARED_RESYNC_SECONDS, background=True)
        release = self.release
        if changed or "resync" in due or "release" in due:
            self.reconcile_all(release)
        if release == R.RELEASE_SHARED_SERVICES and (
                events or "release" in due or "shared-resync" in due):
            self.reconcile_shared()

    def reconcile_shared(self) -> S.SharedResult:
        """One SharedServiceReconciler reconcile (`sharedservices.reconcile`)."""
        self.shared_reconciles += 1
        result = S.reconcile(self.store, self.namespace)
        self.shared_writes += result.writes
        self.shared_errors = result.errors
        return result

    def reconcile_all(self, release: str | None = None) -> None:
        release = self.release if release is None else release
        self.reconciles += 1
        for kind in CR_KINDS:
            crs, _ = self.store.list(kind)
            live = [cr for cr in crs if not cr["metadata"].get("deletionTimestamp")]
            if not live:
                continue
            cr = min(live, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                          c["metadata"]["name"]))
            for desired in self._render(kind, cr, release):
                if desired["kind"] == "ServiceMonitor":
                    if not self._monitor_outdated(desired):
                        continue
                elif desired["kind"] not in RECONCILED_KINDS:
                    continue
                try:
                    self._apply(desired)
                except (StoreError, ApiError) as err:
                    log.info("operator: %s %s: %s", desired["kind"],
                             desired["metadata"]["name"], err)
            self.delete_disabled(cr, release)

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
        key = (kind.key, str(meta.get("uid", "")), str(meta.get("resourceVersion", "")),
               release)
        objs = self._rendered.get(key)
        if objs is None:
            objs = render(cr, self.namespace, self._fixtures, release)
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

    def delete_disabled(self, cr: Mapping[str, Any], release: str = R.RELEASE_CURRENT) -> None:
        """Delete the objects of the states `cr` disables, as its upstream controller does."""
        if R.stack_of(cr) == R.CLUSTERPOLICY:
            targets = [(kind, self.namespace if kind.namespaced else None, name)
                       for kind, name in clusterpolicy_deletions(self.store, cr, self._fixtures,
                                                                 release)]
        else:
            targets = [(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
                       for kind, obj in gpucluster_deletions(self.store, cr, self.namespace)]
        for kind, namespace, name in targets:
            try:
                if _delete(self.store, kind, namespace, name):
                    self.deletions += 1
                    log.info("operator: deleted %s %s (state disabled)", kind.kind, name)
            except (StoreError, ApiError) as err:
                log.info("operator: delete %s %s: %s", kind.kind, name, err)


def _check_release(release: str) -> None:
    if release not in R.RELEASES:
        raise ValueError(f"unknown operator release {release!r}: one of {', '.join(R.RELEASES)}")


def _cr_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return True
    return bool(old.get("spec") != new.get("spec")
                or old["metadata"].get("annotations") != new["metadata"].get("annotations"))
