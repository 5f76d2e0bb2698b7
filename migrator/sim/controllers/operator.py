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
- Missing objects are created. ServiceMonitors are left to the seed (not reconciled).

It writes through the store, not HTTP, so the request log shows only what clients did.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Mapping
from typing import Any

from migrator.model import kinds
from migrator.sim import admission, allocation
from migrator.sim.clock import SimClock
from migrator.sim.controllers.base import Controller
from migrator.sim.controllers.rendering import HASH_ANNOTATION, Fixtures, render
from migrator.sim.statuses import ApiError
from migrator.sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
CR_KINDS = (kinds.CLUSTER_POLICY, kinds.GPU_CLUSTER)
RECONCILED_KINDS = frozenset({"DaemonSet", "Service", "ResourceClaimTemplate"})
# The ClusterPolicy controller requeues every 5 s while a state is not ready
# (controllers/clusterpolicy_controller.go: `ctrl.Result{RequeueAfter: time.Second * 5}`); a
# hand edit of an object it owns is reverted within that. Simulated seconds.
RESYNC_SECONDS = 5.0


def _allocated(store: Store, excluding_uid: str = "") -> allocation.Allocated:
    return allocation.allocated_by(store.list(kinds.SERVICE)[0], excluding_uid=excluding_uid)


def apply_desired(store: Store, desired: Obj) -> str:
    """Create or update one rendered object as the operator would, through the API server's
    defaulting (`admission.admit`); returns what it did (`created`, `updated`, `unchanged`,
    `skipped`). Raises StoreError/ApiError as a client would see them."""
    kind = kinds.BY_KIND[desired["kind"]]
    meta = desired["metadata"]
    live = store.find(kind, meta.get("namespace"), meta["name"])
    if live is None:
        allocated = _allocated(store) if kind is kinds.SERVICE else None
        store.create(kind, admission.admit(kind, desired, allocated=allocated))
        return "created"
    obj = copy.deepcopy(desired)
    allocated = None
    if kind is kinds.DAEMONSET:
        live_hash = (live["metadata"].get("annotations") or {}).get(HASH_ANNOTATION)
        if live_hash == meta.get("annotations", {}).get(HASH_ANNOTATION):
            return "skipped"
    elif kind is kinds.SERVICE:
        live_spec = live.get("spec") or {}
        for field in ("clusterIP", "clusterIPs"):
            if field in live_spec:
                obj["spec"][field] = copy.deepcopy(live_spec[field])
        allocated = _allocated(store, live["metadata"]["uid"])
    obj = admission.admit(kind, obj, live, allocated=allocated)
    obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    new = store.update(kind, obj)
    return "unchanged" if new is live else "updated"


class OperatorImitation(Controller):
    """Reconciles DCGM/Exporter DaemonSets and Services against the CRs, periodically."""

    name = "operator"
    resources = frozenset(k.key for k in CR_KINDS)

    def __init__(self, store: Store, clock: SimClock, *, period: float,
                 namespace: str = "gpu-operator") -> None:
        super().__init__(store, clock)
        if period <= 0:
            raise ValueError(f"operator reconcile period must be > 0, got {period!r}")
        self.period = period
        self.namespace = namespace
        self.reconciles = 0
        self._fixtures = Fixtures()

    def prime(self) -> None:
        self.schedule("resync", 0)

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        changed = any(ev.type != "DELETED" and _cr_changed(ev.old, ev.object) for ev in events)
        if "resync" in due:
            self.schedule("resync", self.period, background=True)
        if changed or "resync" in due:
            self.reconcile_all()

    def reconcile_all(self) -> None:
        self.reconciles += 1
        for kind in CR_KINDS:
            crs, _ = self.store.list(kind)
            live = [cr for cr in crs if not cr["metadata"].get("deletionTimestamp")]
            if not live:
                continue
            cr = min(live, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                          c["metadata"]["name"]))
            for desired in render(cr, self.namespace, self._fixtures):
                if desired["kind"] not in RECONCILED_KINDS:
                    continue
                try:
                    apply_desired(self.store, desired)
                except (StoreError, ApiError) as err:
                    log.info("operator: %s %s: %s", desired["kind"],
                             desired["metadata"]["name"], err)


def _cr_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return True
    return bool(old.get("spec") != new.get("spec")
                or old["metadata"].get("annotations") != new["metadata"].get("annotations"))
