"""The endpoints controller, after kubernetes/pkg/controller/endpoint/endpoints_controller.go.

Per Service with a selector (not ExternalName) it keeps one core/v1 Endpoints of the same name
(`syncService`; the pure pieces are `endpointsubsets` and `endpointsobject`): the Service's
labels (plus `service.kubernetes.io/headless` without a cluster IP), no owner, the selected
pods' addresses repacked into subsets, at most 1000 addresses
(`endpoints.kubernetes.io/over-capacity: truncated`), and
`endpoints.kubernetes.io/last-change-trigger-time`. As upstream:

- a Service without a selector (or ExternalName) is not synced: its Endpoints, if any, are
  left to whoever wrote them; one that loses its selector keeps its last Endpoints;
- a deleted Service's Endpoints are deleted by name (nothing owns them), and at start every
  Endpoints without a Service is deleted (`checkLeftoverEndpoints`; a leader-election record
  is spared);
- the controller watches Endpoints only for deletions (`onEndpointsDelete`: a selector
  Service's deleted Endpoints are written again); another writer's change is compared, and
  overwritten, at the Service's next sync;
- no write when subsets, labels and the capacity annotation already agree (a new trigger time
  alone is not written); a truncated object is always rewritten (the store drops a write that
  changes nothing, as the API server does).

Incremental, like `endpointslices`: a pod event touches only the Services in its namespace
that select it (before or after), and only that pod's entry in each Service's `Book`; events
that change nothing an address depends on are dropped before they are queued (`wants`).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import endpointsobject as O
from dcgm_sim.controllers import endpointsubsets as S
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller
from dcgm_sim.controllers.endpointslices import service_selector
from dcgm_sim.controllers.membership import Membership
from dcgm_sim.kinds import ENDPOINTS
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SvcKey = tuple[str, str]

LEADER_ANNOTATION = "control-plane.alpha.kubernetes.io/leader"  # resourcelock's record key


def pod_signature(pod: Mapping[str, Any] | None) -> Any:
    """What a pod's address, membership and trigger time depend on (`podEndpointsChanged`,
    plus labels, node, phase and the Ready condition's transition time)."""
    if pod is None:
        return None
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    ready = P.condition(pod, "Ready") or {}
    return (meta.get("labels"), meta.get("deletionTimestamp"), meta.get("uid"),
            status.get("podIP"), status.get("podIPs"), status.get("phase"),
            ready.get("status"), ready.get("lastTransitionTime"), spec.get("nodeName"),
            spec.get("hostname"), spec.get("subdomain"))


def _service_signature(svc: Mapping[str, Any]) -> Any:
    """The Service fields every member depends on: a change rebuilds the Service's Book."""
    spec, meta = svc.get("spec") or {}, svc["metadata"]
    return (spec.get("ports"), spec.get("publishNotReadyAddresses"), spec.get("clusterIP"),
            spec.get("ipFamilies"), meta.get("uid"), meta.get("creationTimestamp"))


def _key(obj: Mapping[str, Any]) -> SvcKey:
    return (obj["metadata"]["namespace"], obj["metadata"]["name"])


class EndpointsController(Controller):
    """Keeps each selector Service's Endpoints in step with its pods."""

    name = "endpoints"
    resources = frozenset({kinds.SERVICE.key, kinds.POD.key, ENDPOINTS.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._services: dict[SvcKey, Obj] = {}
        self._index = Membership()  # pod updates are filtered by `wants`
        self._books: dict[SvcKey, S.Book] = {}
        self._endpoints: dict[SvcKey, Obj] = {}  # the lister
        self._times = O.TriggerTimes()
        self._gone: set[SvcKey] = set()  # Endpoints to delete: their Service is gone

    def prime(self) -> None:
        self._index.prime(self.store.list(kinds.POD)[0])
        for ep in self.store.list(ENDPOINTS)[0]:
            self._endpoints[_key(ep)] = ep
        for svc in self.store.list(kinds.SERVICE)[0]:
            self._service_changed(svc)
        for key, ep in self._endpoints.items():  # checkLeftoverEndpoints
            if key not in self._services and LEADER_ANNOTATION not in (
                    ep["metadata"].get("annotations") or {}):
                self._gone.add(key)
        if self._index.full or self._gone:
            self.schedule("sync", 0)

    def wants(self, event: Event) -> bool:
        """A pod update that keeps its signature changes no Endpoints: not even queued."""
        if event.resource is kinds.POD and event.type == "MODIFIED":
            return bool(pod_signature(event.old) != pod_signature(event.object))
        return True

    # ---- caches ------------------------------------------------------------------------------

    def _service_changed(self, svc: Obj) -> None:
        key = _key(svc)
        previous = self._services.get(key)
        self._services[key] = svc
        self._gone.discard(key)
        selector = service_selector(svc)
        if selector is None:  # not this controller's: its Endpoints are left as they are
            self._forget(key)
            return
        if previous is None or not self._index.selects(key) or service_selector(
                previous) != selector:
            self._index.select(key, selector)
        elif _service_signature(previous) != _service_signature(svc):
            self._index.full.add(key)
        else:
            self._index.recheck(key)  # labels or anything else: synced as upstream

    def _forget(self, key: SvcKey) -> None:
        self._index.forget(key)
        self._books.pop(key, None)

    def _service_deleted(self, key: SvcKey) -> None:
        self._forget(key)
        self._services.pop(key, None)
        self._times.forget(key)
        self._gone.add(key)

    def _endpoints_event(self, ev: Event) -> None:
        key = _key(ev.object)
        if ev.type != "DELETED":
            self._endpoints[key] = ev.object
            return
        self._endpoints.pop(key, None)
        if self._index.selects(key):  # onEndpointsDelete: the Service's sync writes it again
            self._index.recheck(key)

    # ---- the loop ----------------------------------------------------------------------------

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        for ev in events:
            if ev.resource is kinds.POD:
                self._index.pod_changed(ev)
            elif ev.resource is kinds.SERVICE:
                if ev.type == "DELETED":
                    self._service_deleted(_key(ev.object))
                else:
                    self._service_changed(ev.object)
            else:
                self._endpoints_event(ev)
        gone, self._gone = self._gone, set()
        for key in sorted(gone):
            self._delete(key)
        self._index.sync_pending(self.sync, self._resync)

    def _resync(self, key: SvcKey, err: StoreError) -> None:
        log.info("endpoints %s/%s: %s; resyncing", key[0], key[1], err.message)
        self._index.recheck(key)
        self.schedule("sync", 1.0)

    def _delete(self, key: SvcKey) -> None:
        """A gone Service's Endpoints, deleted by name whoever wrote them (NotFound is fine)."""
        if key in self._services:
            return  # re-created meanwhile: synced instead
        try:
            self.store.delete(ENDPOINTS, key[0], key[1])
        except StoreError as err:
            if err.code != 404:
                log.info("endpoints %s/%s: %s; retrying", key[0], key[1], err.message)
                self._gone.add(key)
                self.schedule("sync", 1.0)
                return
        self._endpoints.pop(key, None)

    def sync(self, key: SvcKey, scope: set[str] | None) -> None:
        """`syncService` for one Service: everything (`scope` None), or only the pods in
        `scope` changed since the last sync."""
        svc = self._services.get(key)
        if svc is None or not self._index.selects(key):
            return
        pods = self._index.pods(key[0])
        members = self._index.members(key)
        book = self._books.get(key)
        if scope is None or book is None:
            names = sorted(members)
            book = self._books[key] = S.Book((n, S.member(svc, pods.get(n))) for n in names)
            trigger = self._times.compute(key, svc, ((n, pods.get(n)) for n in names),
                                          full=True)
        else:
            changed = [(n, pods.get(n) if n in members else None) for n in sorted(scope)]
            for name, pod in changed:
                book.put(name, S.member(svc, pod))
            trigger = self._times.compute(key, svc, changed, full=False)
        packed = book.repack()
        plan = S.truncation([p.counts for p in packed])
        subsets = book.subsets(packed, plan)
        current = self._endpoints.get(key)
        if O.up_to_date(current, svc, subsets, plan is not None):
            return
        new = O.endpoints_object(svc, current, subsets, plan is not None, trigger)
        if current is None:
            stored = self.store.create(ENDPOINTS, new, adopt=True)
        else:
            stored = self.store.update(ENDPOINTS, new, adopt=True)
        self._endpoints[key] = stored


def seeded_endpoints(svc: Mapping[str, Any], pods: list[Obj]) -> Obj | None:
    """The Endpoints the controller's first sync writes for `svc` over its selected `pods`
    (seed.py, so a large cluster starts with them in place); None for a Service it skips."""
    if service_selector(svc) is None:
        return None
    book = S.Book((p["metadata"]["name"], S.member(svc, p)) for p in pods)
    packed = book.repack()
    plan = S.truncation([p.counts for p in packed])
    trigger = O.TriggerTimes().compute(_key(svc), svc, [], full=True)
    return O.endpoints_object(svc, None, book.subsets(packed, plan), plan is not None, trigger)
