"""The EndpointSlice controller, after kubernetes/pkg/controller/endpointslice.

Per Service with a selector: slices named `<svc>-xxxxx`, labelled with the service name and the
controller's managed-by value, owned by the Service, at most 100 endpoints each, grouped by
resolved port set. One set of slices per address type the Service's `ipFamilies` name
(`getAddressTypesForService`, staging/src/k8s.io/endpointslice/reconciler.go: IPv4, IPv6 or
both on a dual-stack Service), each endpoint holding the pod's IPs of that family
(`getEndpointAddresses`); slices of a type the Service no longer has are deleted. Endpoint
conditions as upstream `podToEndpoint` sets them (serving = pod Ready; terminating =
deletionTimestamp set; ready = serving and not terminating, or always true with
`publishNotReadyAddresses`); pods without an IP or in a terminal phase are left out, and so
is a pod whose Node does not exist, unless the Service has `publishNotReadyAddresses`
(reconciler.go, `reconcileByAddressType`: "skipping Pod for Service, Node not found"). Upstream
answers such a skip with an error, so the Service is synced again with backoff until the pod or
its node changes; here it is synced again when a Node of that name is created. A Node's
deletion syncs nothing (upstream's node handlers only redistribute topology hints): its pods'
endpoints stay until a pod event, at the latest PodGC's (kubelet.py). A service
with no endpoints keeps one empty placeholder slice per address type. Writes go out as upstream's
`finalize` sends them: a slice to create takes the place of one to delete (an update under its
name), then creates, updates, deletes; a Service being deleted is still synced, but gets no new
slice.

It is incremental: a pod event touches only the Services in its namespace whose selector matched
it before or after, and only the slices that hold (or will hold) that pod's endpoint are
rewritten; any change of the Service rebuilds its slices in full, as upstream's
`onServiceUpdate` queues every update (endpointslice_controller.go).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller, NodeCache
from dcgm_sim.controllers.membership import Membership
from dcgm_sim.jsoncopy import clone
from dcgm_sim.network import IPV4, IPV6, family_of
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
SvcKey = tuple[str, str]
SetKey = tuple[str, str, str]  # (namespace, service, addressType): one set of slices

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
HEADLESS_LABEL = "service.kubernetes.io/headless"
MAX_ENDPOINTS_PER_SLICE = 100
ADDRESS_TYPES = (IPV4, IPV6, "FQDN")


# ---- pure pieces (shared with seed.py) -------------------------------------------------------


def service_selector(svc: Mapping[str, Any]) -> dict[str, str] | None:
    """The selector this controller acts on; None for selector-less or ExternalName services."""
    spec = svc.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return None
    selector = spec.get("selector")
    return dict(selector) if selector else None


def address_types(svc: Mapping[str, Any]) -> tuple[str, ...]:
    """`getAddressTypesForService`: the Service's IP families; without any, the family of its
    cluster IP, or both for a headless one (a Service from before dual-stack)."""
    spec = svc.get("spec") or {}
    types = tuple(dict.fromkeys(f for f in spec.get("ipFamilies") or [] if f in (IPV4, IPV6)))
    if types:
        return types
    cluster_ip = spec.get("clusterIP")
    if cluster_ip and cluster_ip != "None":
        return (family_of(str(cluster_ip)),)
    return (IPV4, IPV6)


def _find_port(pod: Mapping[str, Any], svc_port: Mapping[str, Any]) -> int | None:
    """`podutil.FindPort`: a named targetPort resolves against the pod's container ports."""
    target = svc_port.get("targetPort", svc_port.get("port"))
    if isinstance(target, int):
        return target
    if target is None:
        return None
    text = str(target)
    if text.isdigit():
        return int(text)
    protocol = svc_port.get("protocol") or "TCP"
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + [
        c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"
    ]
    for container in containers:
        for port in container.get("ports") or []:
            if port.get("name") == text and (port.get("protocol") or "TCP") == protocol:
                return int(port["containerPort"])
    return None


def endpoint_ports(svc: Mapping[str, Any], pod: Mapping[str, Any]) -> list[Obj]:
    """`getEndpointPorts`: one entry per Service port that resolves for this pod."""
    out: list[Obj] = []
    for sp in (svc.get("spec") or {}).get("ports") or []:
        port = _find_port(pod, sp)
        if port is None:
            continue
        entry: Obj = {"name": sp.get("name", ""), "port": port,
                      "protocol": sp.get("protocol") or "TCP"}
        if sp.get("appProtocol"):
            entry["appProtocol"] = sp["appProtocol"]
        out.append(entry)
    return out


def pod_endpoint(svc: Mapping[str, Any], pod: Mapping[str, Any],
                 address_type: str = IPV4) -> Obj | None:
    """`podToEndpoint` for `address_type`, or None when `ShouldPodBeInEndpoints(pod,
    includeTerminating=true)` says the pod has no endpoint or it has no IP of that family."""
    if P.is_pod_terminal(pod) or not P.pod_ip(pod):
        return None
    addresses = [ip for ip in P.pod_ips(pod) if family_of(ip) == address_type]
    if not addresses:
        return None
    serving = P.is_pod_ready(pod)
    terminating = P.is_deleting(pod)
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    meta = pod["metadata"]
    ep: Obj = {
        "addresses": addresses,
        "conditions": {"ready": publish or (serving and not terminating),
                       "serving": serving, "terminating": terminating},
        "targetRef": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"],
                      "uid": meta["uid"]},
    }
    node = P.node_name(pod)
    if node:
        ep["nodeName"] = node
    return ep


def slice_labels(svc: Mapping[str, Any]) -> dict[str, str]:
    """`setEndpointSliceLabels`: the Service's labels plus the two the controller owns."""
    labels = {k: v for k, v in P.labels_of(svc).items()
              if k not in (SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL)}
    if (svc.get("spec") or {}).get("clusterIP") == "None":
        labels[HEADLESS_LABEL] = ""
    labels[SERVICE_NAME_LABEL] = svc["metadata"]["name"]
    labels[MANAGED_BY_LABEL] = CONTROLLER_NAME
    return labels


def new_slice(svc: Mapping[str, Any], ports: list[Obj], endpoints: list[Obj],
              address_type: str = IPV4) -> Obj:
    meta = svc["metadata"]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": slice_labels(svc),
            "ownerReferences": [P.owner_reference(
                {"apiVersion": "v1", "kind": "Service", "metadata": meta})],
        },
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": ports,
    }


@dataclass(frozen=True)
class Desired:
    """One pod's endpoint and the port set it belongs to."""

    ports: list[Obj]
    endpoint: Obj

    @property
    def key(self) -> str:
        return P.canonical_json(self.ports)


def desired_endpoints(
    svc: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], address_type: str = IPV4,
    node_exists: Callable[[str], bool] = lambda name: True,
) -> dict[str, Desired]:
    """Each pod's endpoint, by pod name; a pod on a Node that does not exist has none (unless
    `publishNotReadyAddresses`)."""
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    out: dict[str, Desired] = {}
    for pod in pods:
        node = P.node_name(pod)
        if node and not publish and not node_exists(node):
            continue
        ep = pod_endpoint(svc, pod, address_type)
        if ep is not None:
            out[pod["metadata"]["name"]] = Desired(endpoint_ports(svc, pod), ep)
    return out


@dataclass
class SlicePlan:
    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)


def _target(ep: Mapping[str, Any]) -> str:
    return str((ep.get("targetRef") or {}).get("name", ""))


def slice_outline(sl: Mapping[str, Any]) -> tuple[str, frozenset[str]]:
    """(port key, names of the pods it has endpoints for) of a stored slice."""
    return (P.canonical_json(sl.get("ports") or []),
            frozenset(_target(ep) for ep in sl.get("endpoints") or []))


def _rewritten(sl: Obj, labels: dict[str, str], owner: Any, endpoints: list[Obj]) -> Obj:
    """A private copy of a stored slice (top level and metadata are ours to hand over)."""
    new = copy.copy(sl)
    new["metadata"] = dict(sl["metadata"], labels=labels, ownerReferences=owner)
    new["endpoints"] = endpoints
    return new


def reconcile_slices(
    svc: Mapping[str, Any], existing: Iterable[Obj], desired: Mapping[str, Desired],
    scope: set[str] | None = None,
    outline: Callable[[Obj], tuple[str, frozenset[str]]] = slice_outline,
    *, every_slice: bool = True, address_type: str = IPV4,
) -> SlicePlan:
    """The reconciler: rewrite only what differs. `scope` limits the pods considered (an
    incremental pass); endpoints of other pods stay where they are, and a slice without any
    of them is not even walked (`outline` may remember each stored slice version's).
    `every_slice=False`: `existing` is only the slices the pass may touch (see
    `EndpointSliceController._for_scope`), so emptying them all is not "no endpoints".
    `existing` and `desired` are of one `address_type`, the type of the slices it creates."""
    labels = slice_labels(svc)
    owner = new_slice(svc, [], [])["metadata"]["ownerReferences"]
    placed: set[str] = set()
    slots: list[tuple[Obj, str, bool]] = []  # (slice, port key, changed)
    for sl in sorted(existing, key=lambda s: s["metadata"]["name"]):
        pk, targets = outline(sl)
        endpoints: list[Obj] = []
        changed = sl["metadata"].get("labels") != labels or (
            sl["metadata"].get("ownerReferences") != owner)
        if scope is not None and targets.isdisjoint(scope):
            # Only pods in `scope` can be desired or moved: this slice keeps its endpoints.
            # Unchanged, it stays the stored object (copied below before anything is added).
            if changed:
                sl = _rewritten(sl, labels, owner, list(sl.get("endpoints") or []))
            slots.append((sl, pk, changed))
            continue
        for ep in sl.get("endpoints") or []:
            name = _target(ep)
            if scope is not None and name not in scope:
                endpoints.append(ep)
                placed.add(name)
                continue
            want = desired.get(name)
            if want is None or want.key != pk or name in placed:
                changed = True
                continue
            placed.add(name)
            changed = changed or want.endpoint != ep
            endpoints.append(want.endpoint)
        slots.append((_rewritten(sl, labels, owner, endpoints), pk, changed))
    remaining: dict[str, list[str]] = {}
    for name in sorted(desired):
        if name not in placed:
            remaining.setdefault(desired[name].key, []).append(name)
    plan = SlicePlan()
    for pk, names in remaining.items():
        # Fill slices already being rewritten first, then untouched ones, then new slices.
        for idx in sorted(range(len(slots)), key=lambda i: (not slots[i][2], i)):
            sl, spk, changed = slots[idx]
            current = sl.get("endpoints") or []
            room = MAX_ENDPOINTS_PER_SLICE - len(current)
            if spk != pk or room <= 0 or not names:
                continue
            if not changed:
                sl = _rewritten(sl, labels, owner, current)
            sl["endpoints"] = current + [desired[n].endpoint for n in names[:room]]
            names = names[room:]
            slots[idx] = (sl, spk, True)
        while names:
            chunk, names = names[:MAX_ENDPOINTS_PER_SLICE], names[MAX_ENDPOINTS_PER_SLICE:]
            plan.create.append(new_slice(svc, clone(desired[chunk[0]].ports),
                                         [desired[n].endpoint for n in chunk], address_type))
    for sl, _, changed in slots:
        if not sl.get("endpoints"):
            plan.delete.append(sl)
        elif changed:
            plan.update.append(sl)
    if every_slice and not plan.create and len(plan.delete) == len(slots):
        # No endpoints at all: keep (or make) one empty placeholder slice, as upstream does.
        for sl, _, changed in slots:
            if not sl.get("ports"):
                plan.delete = [d for d in plan.delete if d is not sl]
                if changed:
                    plan.update.append(sl)
                break
        else:
            plan.create.append(new_slice(svc, [], [], address_type))
    return plan


# ---- the controller --------------------------------------------------------------------------


def _pod_signature(pod: Mapping[str, Any] | None) -> Any:
    """The pod fields an endpoint depends on; a MODIFIED event that keeps them is ignored."""
    if pod is None:
        return None
    status = pod.get("status") or {}
    return (P.labels_of(pod), tuple(P.pod_ips(pod)), P.is_pod_ready(pod), P.is_deleting(pod),
            P.node_name(pod), status.get("phase"), pod["metadata"].get("uid"))


class EndpointSliceController(Controller):
    """Keeps each selector Service's EndpointSlices in step with its pods."""

    name = "endpointslice"
    resources = frozenset({kinds.SERVICE.key, kinds.POD.key, kinds.ENDPOINTSLICE.key,
                           kinds.NODE.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._services: dict[SvcKey, Obj] = {}
        self._index = Membership(_pod_signature)
        # The caches below are per set of slices: (namespace, service, addressType).
        self._slices: dict[SetKey, dict[str, Obj]] = {}
        self._own_rv: dict[tuple[str, str], str] = {}
        # (namespace, slice) -> (resourceVersion, its slice_outline)
        self._outlines: dict[tuple[str, str], tuple[str, tuple[str, frozenset[str]]]] = {}
        # service -> pod name -> the slice holding its endpoint: an incremental pass visits
        # those slices (and ones with room), not all 50 of a 5,000-pod Service.
        self._holders: dict[SetKey, dict[str, str]] = {}
        self._empty: dict[SetKey, set[str]] = {}  # slices without endpoints (a pass deletes them)
        self._nodes = NodeCache()
        self._skipped: dict[str, set[SvcKey]] = {}  # missing node -> Services that skipped a pod

    def prime(self) -> None:
        self._nodes.prime(self.store)
        self._index.prime(self.store.list(kinds.POD)[0])
        for sl in self.store.list(kinds.ENDPOINTSLICE)[0]:
            self._cache_slice(sl, deleted=False)
        for svc in self.store.list(kinds.SERVICE)[0]:
            self._service_changed(svc, None)
        if self._index.full:
            self.schedule("sync", 0)

    # ---- cache maintenance ------------------------------------------------------------------

    def _service_changed(self, svc: Obj, old: Obj | None) -> None:
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        self._services[key] = svc
        selector = service_selector(svc)
        if selector is None:
            self._index.forget(key)
            return
        if old is None or service_selector(old) != selector or not self._index.selects(key):
            self._index.select(key, selector)
        else:  # upstream `onServiceUpdate` queues every update (an edit syncs it: a pod on a
            self._index.full.add(key)  # deleted Node leaves then); a no-op write emits none

    def _service_deleted(self, key: SvcKey) -> None:
        self._services.pop(key, None)
        self._index.forget(key)

    def _slice_owner(self, sl: Mapping[str, Any]) -> SvcKey | None:
        labels = P.labels_of(sl)
        if labels.get(MANAGED_BY_LABEL) != CONTROLLER_NAME or SERVICE_NAME_LABEL not in labels:
            return None
        return (sl["metadata"]["namespace"], labels[SERVICE_NAME_LABEL])

    def _cache_slice(self, sl: Obj, *, deleted: bool) -> SvcKey | None:
        key = self._slice_owner(sl)
        if key is None:
            return None
        self._put_slice(_set_key(key, sl), sl["metadata"]["name"], None if deleted else sl)
        return key

    def _put_slice(self, key: SetKey, name: str, sl: Obj | None) -> None:
        """Cache (or forget, `sl` None) one slice version of `key`, and which pods it holds."""
        cache = self._slices.setdefault(key, {})
        holders = self._holders.setdefault(key, {})
        empty = self._empty.setdefault(key, set())
        empty.discard(name)
        old = cache.pop(name, None)
        if old is not None:
            for pod in self._outline(old)[1]:
                if holders.get(pod) == name:
                    del holders[pod]
        if sl is None:
            return
        cache[name] = sl
        targets = self._outline(sl)[1]
        for pod in targets:
            holders[pod] = name
        if not targets:
            empty.add(name)

    def _for_scope(self, key: SetKey, scope: set[str],
                   desired: Mapping[str, Desired]) -> list[Obj]:
        """The slices an incremental pass over `scope` may change: those holding one of its
        pods, empty ones, and those with room for an endpoint of a port key it wants. The
        others keep their endpoints and would only be walked past."""
        slices = self._slices.get(key, {})
        holders = self._holders.get(key, {})
        chosen = {holders[pod] for pod in scope if pod in holders and holders[pod] in slices}
        chosen |= self._empty.get(key, set())
        # Port keys of endpoints that need a place: pods not in a slice yet, or in one of
        # another port key (an endpoint kept in place needs no room).
        wanted = {d.key for pod, d in desired.items()
                  if pod not in holders or holders[pod] not in slices
                  or self._outline(slices[holders[pod]])[0] != d.key}
        if wanted:
            for name, sl in slices.items():
                if name not in chosen:
                    pk, targets = self._outline(sl)
                    if pk in wanted and len(targets) < MAX_ENDPOINTS_PER_SLICE:
                        chosen.add(name)
        return [slices[name] for name in chosen if name in slices]

    # ---- the loop --------------------------------------------------------------------------

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        for ev in events:
            obj = ev.object
            if ev.resource is kinds.POD:
                self._index.pod_changed(ev)
            elif ev.resource is kinds.SERVICE:
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                if ev.type == "DELETED":
                    self._service_deleted(key)
                else:
                    self._service_changed(obj, ev.old)
            elif ev.resource is kinds.ENDPOINTSLICE:
                self._slice_event(ev)
            elif ev.resource is kinds.NODE:
                name = self._nodes.note(ev)
                if ev.type == "ADDED":  # the Services that skipped its pods, synced again
                    self._index.full.update(self._skipped.pop(name, set()))
        self._index.sync_pending(self.sync, self._resync)

    def _resync(self, key: SvcKey, err: StoreError) -> None:
        log.info("endpointslices %s/%s: %s; resyncing", key[0], key[1], err.message)
        self._index.full.add(key)
        self.schedule("sync", 1.0)

    def _slice_event(self, ev: Event) -> None:
        sl = ev.object
        ident = (sl["metadata"]["namespace"], sl["metadata"]["name"])
        if ev.type == "DELETED":
            self._outlines.pop(ident, None)
        mine = self._own_rv.pop(ident, None) == sl["metadata"]["resourceVersion"]
        old_owner = self._slice_owner(ev.old) if ev.old is not None else None
        key = self._cache_slice(sl, deleted=ev.type == "DELETED")
        if old_owner is not None and ev.old is not None and old_owner != key:
            self._put_slice(_set_key(old_owner, ev.old), ident[1], None)
            self._index.full.add(old_owner)
        if not mine and key is not None and key in self._services:
            self._index.full.add(key)  # someone else touched our slice: rebuild it

    def sync(self, key: SvcKey, scope: set[str] | None) -> None:
        svc = self._services.get(key)
        if svc is None or not self._index.selects(key):
            return  # a Service being deleted is still synced; `_write` creates nothing for it
        types = address_types(svc)
        for address_type in types:
            self._sync_set(svc, (*key, address_type), scope)
        for gone in ADDRESS_TYPES:
            if gone not in types and self._slices.get((*key, gone)):
                stale = list(self._slices[(*key, gone)].values())
                self._write((*key, gone), SlicePlan(delete=stale))

    def _sync_set(self, svc: Obj, key: SetKey, scope: set[str] | None) -> None:
        """Reconcile the Service's slices of one address type."""
        pods = self._index.pods(key[0])
        members = self._index.members(key[:2])
        names = members if scope is None else (scope & members)

        def node_exists(node: str) -> bool:
            """The node lister's answer; a miss notes the Service, synced again if it comes."""
            if node in self._nodes:
                return True
            self._skipped.setdefault(node, set()).add(key[:2])
            return False

        desired = desired_endpoints(svc, (pods[n] for n in sorted(names) if n in pods), key[2],
                                    node_exists)
        slices = self._slices.get(key, {})
        existing = list(slices.values()) if scope is None else self._for_scope(key, scope,
                                                                               desired)
        self._write(key, reconcile_slices(svc, existing, desired, scope, self._outline,
                                          every_slice=len(existing) == len(slices),
                                          address_type=key[2]))

    def _write(self, key: SetKey, plan: SlicePlan) -> None:
        """`finalize` (staging/src/k8s.io/endpointslice/reconciler.go): each slice to create
        takes the place of one to delete (an update of it, under its name), then creates,
        updates and deletes go out in that order, so no reader meets a set's endpoints gone
        between a delete and a create. A Service being deleted gets no new slice."""
        ns = key[0]
        while plan.create and plan.delete:
            old, new = plan.delete.pop(0), plan.create.pop()
            plan.update.append({**new, "metadata": {**new["metadata"],
                                                    "name": old["metadata"]["name"]}})
        svc = self._services.get(key[:2])
        for sl in plan.create if svc is not None and not P.is_deleting(svc) else ():
            new = self.store.create(kinds.ENDPOINTSLICE, sl, adopt=True)
            self._own_rv[(ns, new["metadata"]["name"])] = new["metadata"]["resourceVersion"]
            self._put_slice(key, new["metadata"]["name"], new)
        for sl in plan.update:
            new = self.store.update(kinds.ENDPOINTSLICE, sl, adopt=True)
            self._own_rv[(ns, new["metadata"]["name"])] = new["metadata"]["resourceVersion"]
            self._put_slice(key, new["metadata"]["name"], new)
        for sl in plan.delete:
            gone = self.store.delete(kinds.ENDPOINTSLICE, ns, sl["metadata"]["name"])
            self._own_rv[(ns, sl["metadata"]["name"])] = gone["metadata"]["resourceVersion"]
            self._put_slice(key, sl["metadata"]["name"], None)
            self._outlines.pop((ns, sl["metadata"]["name"]), None)

    def _outline(self, sl: Obj) -> tuple[str, frozenset[str]]:
        """`slice_outline`, remembered for the stored version of each slice."""
        meta = sl["metadata"]
        key, rv = (meta["namespace"], meta["name"]), str(meta.get("resourceVersion"))
        found = self._outlines.get(key)
        if found is None or found[0] != rv:
            found = self._outlines[key] = (rv, slice_outline(sl))
        return found[1]


def _set_key(key: SvcKey, sl: Mapping[str, Any]) -> SetKey:
    return (key[0], key[1], str(sl.get("addressType") or IPV4))

