"""Read what the plan and the gates need into a Snapshot, in requests that do not grow with the
node count: the namespace's objects through one `Reader` (the run's cache, else paginated lists),
the cluster-scoped CRs and monitors from the API server. Pods are printed rows; those a row
cannot vouch for are read whole (`engine/wholepods.py`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.informer import Informer
from migrator.engine.wholepods import WholePods
from migrator.errors import APIForbidden
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.objects import SERVICE_NAME_LABEL
from migrator.model.snapshot import PodView, ServiceEndpoints, Snapshot, endpoints_from_slices
from migrator.model.stacks import Catalog, Component, belongs, pod_selectors

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]


def listed_pods(kube: Kube, namespace: str, selectors: Sequence[str]) -> list[PodView]:
    """Pods matching any of the selectors, each once, as their printed rows (metadata and
    plain health: enough to tell a pod's owner, not always its readiness)."""
    seen: dict[str, PodView] = {}
    for sel in selectors:
        views, _ = kube.collect(kinds.POD, namespace, label_selector=sel, keep=PodView.of,
                                printed=True)
        seen.update((view.uid, view) for view in views)
    return list(seen.values())


def read_pods(kube: Kube, namespace: str, selectors: Sequence[str],
              endpoints: Mapping[str, ServiceEndpoints] | None = None,
              whole: WholePods | None = None) -> tuple[PodView, ...]:
    """Pods matching any of the selectors, the doubtful ones read whole by `whole`."""
    return _resolved(kube, namespace, listed_pods(kube, namespace, selectors), endpoints or {},
                     selectors, whole or WholePods())


def _resolved(kube: Kube, namespace: str, listed: Iterable[PodView],
              endpoints: Mapping[str, ServiceEndpoints], selectors: Sequence[str],
              whole: WholePods) -> tuple[PodView, ...]:
    """The listed views with the doubtful ones read whole, ordered by node and name."""
    return tuple(sorted(whole.resolve(kube, namespace, listed, endpoints, selectors),
                        key=lambda p: (p.node, p.name)))


@dataclass(frozen=True)
class Reader:
    """The namespace's objects: from `cache` when given, else one list per kind."""

    kube: Kube
    namespace: str
    cache: Informer | None = None
    whole: WholePods | None = None  # the API server's pods only (a cache has its own)

    def objects(self, kind: kinds.Kind, label_selector: str | None = None) -> list[Obj]:
        """The cache's objects of `kind` (it holds them all), else those the selector lists."""
        if self.cache is not None:
            return self.cache.of(kind).items()
        return list(self.kube.list(kind, self.namespace, label_selector=label_selector).items)

    def endpoints(self, services: Iterable[str] | None = None) -> dict[str, ServiceEndpoints]:
        """These Services' endpoints from their EndpointSlices (None: every Service's)."""
        names = sorted(set(services)) if services is not None else None
        if names == []:
            return {}
        wanted = f"{SERVICE_NAME_LABEL} in ({','.join(names)})" if names else None
        by_service: dict[str, list[Obj]] = {n: [] for n in names or ()}
        for sl in self.objects(kinds.ENDPOINTSLICE, wanted):
            svc = o.labels(sl).get(SERVICE_NAME_LABEL, "")
            if names is None or svc in by_service:
                by_service.setdefault(svc, []).append(sl)
        return {n: endpoints_from_slices(n, sl) for n, sl in by_service.items()}

    def pods(self, comps: Sequence[Component],
             endpoints: Mapping[str, ServiceEndpoints]) -> tuple[PodView, ...]:
        if self.cache is None:
            selectors = pod_selectors(comps)
            return (read_pods(self.kube, self.namespace, selectors, endpoints, self.whole)
                    if selectors else ())
        mine = belongs(comps)
        listed = [p for p in self.cache.pods() if mine(p.labels)] if comps else []
        return _resolved(self.kube, self.namespace, listed, endpoints,
                         [str(r.label_selector) for r in self.cache.pod_reflectors],
                         self.cache.whole)


def read_daemonset_pods(kube: Kube, namespace: str, ds: Obj) -> list[PodView]:
    """The DaemonSet's own pods, the doubtful ones judged against every EndpointSlice."""
    match = o.dig(ds, "spec", "selector", "matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    pods = read_pods(kube, namespace, [selector], Reader(kube, namespace).endpoints())
    return [p for p in pods if p.daemonset == o.name(ds)]


def _monitors(kube: Kube, kind: kinds.Kind, namespace: str) -> tuple[Obj, ...]:
    """Monitors cluster-wide (one elsewhere may scrape these pods), else this namespace's."""
    try:
        return tuple(kube.list(kind).items)
    except APIForbidden:
        return tuple(kube.list(kind, namespace).items)


def _may_list(kube: Kube, kind: kinds.Kind, allowed: dict[str, bool]) -> bool:
    """Whether RBAC lets this user list `kind` cluster-wide, asked once per `allowed` (a run's
    cache keeps it): a least-privilege token is never refused a request."""
    key = f"list {kind.plural}"
    if key not in allowed:
        allowed[key] = kube.can_i("list", kind)[0]
    return allowed[key]


def _prometheuses(kube: Kube, allowed: dict[str, bool]) -> tuple[Obj, ...]:
    """Prometheus CRs cluster-wide; none where the CRD is absent or listing them is not allowed
    (asked first, once per run: a least-privilege token is never refused a request)."""
    if not kube.has_kind(kinds.PROMETHEUS) or not _may_list(kube, kinds.PROMETHEUS, allowed):
        return ()
    try:
        return tuple(kube.list(kinds.PROMETHEUS).items)
    except APIForbidden:
        return ()


def _cluster_scope(kube: Kube, namespace: str, allowed: dict[str, bool]) -> dict[str, Any]:
    """The Snapshot's cluster-scoped parts: the GPU Operator's CRs and the monitors."""
    out: dict[str, Any] = {"nvidia_api": False}
    for key, kind in (("cluster_policies", kinds.CLUSTER_POLICY),
                      ("gpu_clusters", kinds.GPU_CLUSTER)):
        if kube.has_api(kind.group, kind.version):
            out["nvidia_api"] = True
            out[key] = tuple(kube.list(kind).items)
    sm = kinds.SERVICE_MONITOR
    if kube.has_api(sm.group, sm.version):
        out["service_monitors"] = _monitors(kube, sm, namespace)
        if kube.has_kind(kinds.POD_MONITOR):
            out["pod_monitors"] = _monitors(kube, kinds.POD_MONITOR, namespace)
        out["prometheuses"] = _prometheuses(kube, allowed)
    return out


def read_snapshot(kube: Kube, namespace: str, catalog: Catalog, *,
                  daemonsets: Sequence[str] | None = None, cluster_scope: bool = True,
                  whole: WholePods | None = None, cache: Informer | None = None,
                  clock: Clock | None = None, leases: Sequence[Obj] | None = None) -> Snapshot:
    """The namespace as the planner and gates see it; `daemonsets` narrows it (None: all),
    `cluster_scope` adds the Namespace, CRs and monitors, `cache` serves all but those,
    `leases`: the guard's Leases as the caller holds them (not listed)."""
    # The Namespace is cluster-scoped too: a narrow read (or the guard's) takes it as known.
    if cluster_scope and kube.get(kinds.NAMESPACE, namespace) is None:
        return Snapshot(namespace, namespace_exists=False)
    source = Reader(kube, namespace, cache, whole)
    wanted_ds = set(daemonsets) if daemonsets is not None else {
        c.daemonset for c in catalog.components}
    ds_map = {o.name(d): d for d in source.objects(kinds.DAEMONSET) if o.name(d) in wanted_ds}
    svc_map = {o.name(s): s for s in source.objects(kinds.SERVICE)}
    endpoints = source.endpoints(svc_map)
    pods = source.pods([c for c in catalog.components if c.daemonset in ds_map], endpoints)
    scope = (_cluster_scope(kube, namespace, cache.allowed if cache is not None else {})
             if cluster_scope else {"nvidia_api": False})
    whole_read = daemonsets is None
    held, leases_read = (tuple(leases), True) if whole_read and leases is not None else ((), False)
    if whole_read and leases is None:  # the guard's Leases, by the tool's managed-by label
        mb = catalog.common.managed_by
        with contextlib.suppress(APIForbidden):
            held, leases_read = tuple(kube.list(kinds.LEASE, namespace,
                                                label_selector=f"{mb.key}={mb.value}").items), True
    clock = clock or SystemClock()
    snap = Snapshot(namespace=namespace, daemonsets=ds_map, services=svc_map, pods=pods,
                    endpoints=endpoints, guard_leases=held, leases_read=leases_read,
                    # the API server's clock (its latest `Date`): a skewed host misjudges guards
                    taken_at=(kube.server_date if whole_read else None) or clock.now(), **scope)
    return snap if snap.lists_every_ready_pod() else with_nodes(kube, snap, cache, clock)


def node_names(kube: Kube) -> frozenset[str]:
    """The Nodes' names (printed rows: at 5,000 nodes a fraction of the whole objects)."""
    return frozenset(kube.collect(kinds.NODE, keep=o.name, printed=True)[0])


def with_nodes(kube: Kube, snap: Snapshot, cache: Informer | None, clock: Clock) -> Snapshot:
    """The snapshot knowing the Nodes' names, read only where a deleted node may explain what
    is seen: a Service's slices leave out a Ready pod it selects (`read_snapshot`; a deleted
    node's pods stay Ready until their garbage collector, and the EndpointSlice controller
    leaves them out), or a gate after a write fails (`Apply.with_nodes`). The run's cache keeps
    the names a while (`KnownNodes`). As it was where RBAC does not allow the list (the
    guard's Role)."""
    try:
        if not _may_list(kube, kinds.NODE, cache.allowed if cache is not None else {}):
            return snap
        names = node_names(kube) if cache is None else cache.nodes.of(
            frozenset(p.node for p in snap.pods if p.node), clock.monotonic(),
            lambda: node_names(kube))
    except APIForbidden:
        return snap
    return dataclasses.replace(snap, nodes=names)


def narrow(kube: Kube, base: Snapshot, catalog: Catalog, *, daemonsets: Sequence[str],
           cache: Informer | None = None) -> Snapshot:
    """A fresh read of these DaemonSets and the pods, keeping the base's cluster-scoped parts."""
    fresh = read_snapshot(kube, base.namespace, catalog, daemonsets=daemonsets,
                          cluster_scope=False, cache=cache)
    return dataclasses.replace(base, namespace_exists=True, daemonsets=fresh.daemonsets,
                               services=fresh.services, pods=fresh.pods,
                               endpoints=fresh.endpoints, nodes=fresh.nodes)
