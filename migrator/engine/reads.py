"""Read what the plan and the gates need into a Snapshot, with a number of requests that does
not grow with the node count (paginated lists by label selector; no per-pod or per-node calls).

The DaemonSets, Services, pods and EndpointSlices come through one `Reader`: the API server
(`DirectReader`), or, given a run's cache (`engine/informer.py`, passed as `cache`), the cache
(`CachedReader`: no request at all); only the namespace and the cluster-scoped CRs and
monitors (a few small objects) are always read from the API server.

Pods are read as printed rows (`model/printed.py`); those a row cannot vouch for are read whole
(`engine/wholepods.py`) before the Snapshot is built, so every gate sees real conditions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.informer import Informer
from migrator.engine.wholepods import WholePods
from migrator.errors import APIForbidden
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.slices import SERVICE_NAME_LABEL
from migrator.model.snapshot import PodView, ServiceEndpoints, Snapshot, endpoints_from_slices
from migrator.model.stacks import Catalog, Component, belongs, pod_selectors

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]


def _in(key: str, values: Iterable[str]) -> str:
    return f"{key} in ({','.join(sorted(set(values)))})"


def read_pods(kube: Kube, namespace: str, selectors: Sequence[str],
              endpoints: Mapping[str, ServiceEndpoints] | None = None,
              whole: WholePods | None = None) -> tuple[PodView, ...]:
    """Pods matching any of the selectors, as printed rows reduced to PodViews page by page (a
    410 on a busy cluster restarts that selector's read: `Kube.collect`), the doubtful ones
    read whole by `whole` (`endpoints`, when read, may contradict a row)."""
    seen: dict[str, PodView] = {}
    for sel in selectors:
        views, _ = kube.collect(kinds.POD, namespace, label_selector=sel, keep=PodView.of,
                                printed=True)
        seen.update((view.uid, view) for view in views)
    return resolved(kube, namespace, seen.values(), endpoints or {}, selectors,
                   whole or WholePods())


def resolved(kube: Kube, namespace: str, listed: Iterable[PodView],
             endpoints: Mapping[str, ServiceEndpoints], selectors: Sequence[str],
             whole: WholePods) -> tuple[PodView, ...]:
    """The listed views with the doubtful ones read whole, ordered by node and name."""
    return tuple(sorted(whole.resolve(kube, namespace, listed, endpoints, selectors),
                        key=lambda p: (p.node, p.name)))


class Reader(Protocol):
    """Where the namespace's DaemonSets, Services, EndpointSlices and pods come from: the API
    server (`DirectReader`) or a run's cache (`CachedReader`). Chosen once, by `reader`."""

    def daemonsets(self) -> list[Obj]: ...

    def services(self) -> list[Obj]: ...

    def endpointslices(self, services: Sequence[str] | None) -> list[Obj]: ...

    def pods(self, comps: Sequence[Component],
             endpoints: Mapping[str, ServiceEndpoints]) -> tuple[PodView, ...]: ...


@dataclass(frozen=True)
class DirectReader:
    """One list per kind (paginated, by label selector), the doubtful pods read whole."""

    kube: Kube
    namespace: str
    whole: WholePods | None = None

    def daemonsets(self) -> list[Obj]:
        return list(self.kube.list(kinds.DAEMONSET, self.namespace).items)

    def services(self) -> list[Obj]:
        return list(self.kube.list(kinds.SERVICE, self.namespace).items)

    def endpointslices(self, services: Sequence[str] | None) -> list[Obj]:
        return list(self.kube.list(
            kinds.ENDPOINTSLICE, self.namespace,
            label_selector=_in(SERVICE_NAME_LABEL, services) if services else None
        ).items)

    def pods(self, comps: Sequence[Component],
             endpoints: Mapping[str, ServiceEndpoints]) -> tuple[PodView, ...]:
        selectors = pod_selectors(comps)
        return (read_pods(self.kube, self.namespace, selectors, endpoints, self.whole)
                if selectors else ())


@dataclass(frozen=True)
class CachedReader:
    """The run's cache (engine/informer.py): no request, but for doubtful pods read whole."""

    kube: Kube
    namespace: str
    cache: Informer

    def daemonsets(self) -> list[Obj]:
        return self.cache.daemonsets.items()

    def services(self) -> list[Obj]:
        return self.cache.services.items()

    def endpointslices(self, services: Sequence[str] | None) -> list[Obj]:
        return self.cache.endpointslices.items()

    def pods(self, comps: Sequence[Component],
             endpoints: Mapping[str, ServiceEndpoints]) -> tuple[PodView, ...]:
        return resolved(self.kube, self.namespace, _cached_pods(self.cache, comps), endpoints,
                       [str(r.label_selector) for r in self.cache.pod_reflectors],
                       self.cache.whole)


def reader(kube: Kube, namespace: str, cache: Informer | None = None,
           whole: WholePods | None = None) -> Reader:
    """The run's cache when there is one, else the API server."""
    if cache is not None:
        return CachedReader(kube, namespace, cache)
    return DirectReader(kube, namespace, whole)


def read_endpoints(kube: Kube, namespace: str, services: Iterable[str] | None = None, *,
                   source: Reader | None = None) -> dict[str, ServiceEndpoints]:
    """These Services' endpoints from their EndpointSlices (None: every Service's), read
    through `source` (default: the API server)."""
    names = sorted(set(services)) if services is not None else None
    if names == []:
        return {}
    by_service: dict[str, list[Obj]] = {n: [] for n in names or ()}
    slices = (source or DirectReader(kube, namespace)).endpointslices(names)
    for sl in slices:
        svc = o.labels(sl).get(SERVICE_NAME_LABEL, "")
        if names is None or svc in by_service:
            by_service.setdefault(svc, []).append(sl)
    return {n: endpoints_from_slices(n, sl) for n, sl in by_service.items()}


def read_daemonset_pods(kube: Kube, namespace: str, ds: Obj) -> list[PodView]:
    """The DaemonSet's own pods, by its selector, the doubtful ones read whole against every
    EndpointSlice of the namespace (which Services select them is not known here)."""
    match = o.dig(ds, "spec", "selector", "matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    pods = read_pods(kube, namespace, [selector], read_endpoints(kube, namespace))
    return [p for p in pods if p.owner_kind == "DaemonSet" and p.owner_name == o.name(ds)]


def _cached_pods(cache: Informer, comps: Sequence[Component]) -> list[PodView]:
    """The pods of these components (`stacks.pod_selectors`) from the cache."""
    if not comps:
        return []
    mine = belongs(comps)
    return [p for p in cache.pods() if mine(p.labels)]


def _monitors(kube: Kube, kind: kinds.Kind, namespace: str) -> tuple[Obj, ...]:
    """Prometheus Operator monitors cluster-wide (one in a monitoring namespace may scrape
    these pods), or this namespace's alone when a cluster-wide list is refused."""
    try:
        return tuple(kube.list(kind).items)
    except APIForbidden:
        return tuple(kube.list(kind, namespace).items)


def read_at(kube: Kube, clock: Clock | None) -> datetime:
    """When a whole read was taken, by the API server's clock (the `Date` of its latest
    answer, the Lease list's): the guard's Lease renewals are judged against the server's
    time, so a skewed host running `verify` from cron neither pages on a live guard nor
    passes a dead one. This host's clock only where no answer carried a date."""
    return kube.server_date or (clock or SystemClock()).now()


def read_guard_leases(kube: Kube, namespace: str, catalog: Catalog
                      ) -> tuple[tuple[Obj, ...], bool]:
    """The guard's Leases in the namespace (the tool's managed-by label, whatever their name)
    and whether they could be read (a Role without `list leases` cannot tell)."""
    mb = catalog.common.managed_by
    try:
        return tuple(kube.list(kinds.LEASE, namespace,
                               label_selector=f"{mb.key}={mb.value}").items), True
    except APIForbidden:
        return (), False


def _prometheuses(kube: Kube, allowed: dict[str, bool]) -> tuple[Obj, ...]:
    """Prometheus CRs cluster-wide, for their ServiceMonitor discovery role; none where the
    CRD is absent or the tool may not list them (docs/rbac.yaml does not grant it: the role
    then defaults as the Prometheus Operator's does). Asked first with one access review per
    run (`allowed`: the run cache's answers), so a least-privilege token is never refused a
    request."""
    if not kube.has_kind(kinds.PROMETHEUS):
        return ()
    key = "list prometheuses"
    if key not in allowed:
        allowed[key] = kube.can_i("list", kinds.PROMETHEUS)[0]
    if not allowed[key]:
        return ()
    try:
        return tuple(kube.list(kinds.PROMETHEUS).items)
    except APIForbidden:
        return ()


def read_snapshot(kube: Kube, namespace: str, catalog: Catalog, *,
                  daemonsets: Sequence[str] | None = None,
                  services: Sequence[str] | None = None,
                  cluster_scope: bool = True, whole: WholePods | None = None,
                  cache: Informer | None = None, clock: Clock | None = None,
                  leases: Sequence[Obj] | None = None) -> Snapshot:
    """The namespace as the planner and gates see it.

    `daemonsets`/`services` narrow a read to what a wait needs; None reads everything the
    catalog names plus every Service of the namespace. `cluster_scope` reads the Namespace, the
    CRs and the monitors too (skipped by narrow reads). `whole` reads the doubtful printed
    pods whole (default: up to MAX_GETS by name, else by selector). Given the run's cache
    (`cache`, engine/informer.py), every part but the cluster-scoped ones comes from it.
    `leases`: the guard's Leases as the caller holds them (the leading guard's own), not
    listed.
    """
    # The Namespace is cluster-scoped too: a narrow read (or the guard's) takes it as known.
    ns_exists = kube.get(kinds.NAMESPACE, namespace) is not None if cluster_scope else True
    if not ns_exists:
        return Snapshot(namespace, namespace_exists=False)
    source = reader(kube, namespace, cache, whole)
    wanted_ds = set(daemonsets) if daemonsets is not None else {
        c.daemonset for c in catalog.components}
    ds_map = {o.name(d): d for d in source.daemonsets() if o.name(d) in wanted_ds}
    svc_map = {o.name(s): s for s in source.services()
               if services is None or o.name(s) in services}
    comps = [c for c in catalog.components if c.daemonset in ds_map]
    endpoints = read_endpoints(kube, namespace, svc_map, source=source)
    pods = source.pods(comps, endpoints)

    cps: tuple[Obj, ...] = ()
    gcs: tuple[Obj, ...] = ()
    monitors: tuple[Obj, ...] = ()
    pod_monitors: tuple[Obj, ...] = ()
    prometheuses: tuple[Obj, ...] = ()
    nvidia_api = sm_api = False
    if cluster_scope:
        if kube.has_api(kinds.CLUSTER_POLICY.group, kinds.CLUSTER_POLICY.version):
            nvidia_api = True
            cps = tuple(kube.list(kinds.CLUSTER_POLICY).items)
        if kube.has_api(kinds.GPU_CLUSTER.group, kinds.GPU_CLUSTER.version):
            nvidia_api = True
            gcs = tuple(kube.list(kinds.GPU_CLUSTER).items)
        sm_api = kube.has_api(kinds.SERVICE_MONITOR.group, kinds.SERVICE_MONITOR.version)
        if sm_api:
            monitors = _monitors(kube, kinds.SERVICE_MONITOR, namespace)
            if kube.has_kind(kinds.POD_MONITOR):
                pod_monitors = _monitors(kube, kinds.POD_MONITOR, namespace)
            prometheuses = _prometheuses(kube, cache.allowed if cache is not None else {})
    whole_read = daemonsets is None and services is None
    held, leases_read = (((tuple(leases), True) if leases is not None
                           else read_guard_leases(kube, namespace, catalog)) if whole_read
                          else ((), False))
    return Snapshot(namespace=namespace, cluster_policies=cps, gpu_clusters=gcs,
                    daemonsets=ds_map, services=svc_map, pods=pods, endpoints=endpoints,
                    service_monitors=monitors, servicemonitor_api=sm_api, nvidia_api=nvidia_api,
                    pod_monitors=pod_monitors, prometheuses=prometheuses, guard_leases=held,
                    leases_read=leases_read,
                    taken_at=read_at(kube, clock) if whole_read else (clock or SystemClock()).now())


def narrow(kube: Kube, base: Snapshot, catalog: Catalog, *, daemonsets: Sequence[str],
           cache: Informer | None = None) -> Snapshot:
    """A fresh read of just these objects and the pods, keeping the base's CRs and
    ServiceMonitors."""
    fresh = read_snapshot(kube, base.namespace, catalog, daemonsets=daemonsets,
                          services=None, cluster_scope=False, cache=cache)
    return Snapshot(namespace=base.namespace, cluster_policies=base.cluster_policies,
                    gpu_clusters=base.gpu_clusters, daemonsets=fresh.daemonsets,
                    services=fresh.services, pods=fresh.pods, endpoints=fresh.endpoints,
                    service_monitors=base.service_monitors, pod_monitors=base.pod_monitors,
                    prometheuses=base.prometheuses,
                    servicemonitor_api=base.servicemonitor_api, nvidia_api=base.nvidia_api,
                    guard_leases=base.guard_leases, leases_read=base.leases_read,
                    taken_at=base.taken_at)
