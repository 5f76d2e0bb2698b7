"""A compact, immutable view of what the tool read from one namespace: the planner, gates and
drift detection work on it, never on the API. Pods and endpoints keep only what gates need."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from migrator.model import objects as o
from migrator.model import printed
from migrator.model.objects import Obj
from migrator.model.selectors import for_service


@dataclass(frozen=True)
class PodView:
    name: str
    uid: str
    node: str
    labels: Mapping[str, str]
    ready: bool
    deleting: bool
    owner_kind: str | None
    owner_name: str | None
    node_lost: bool = False  # marked not Ready by the node lifecycle controller
    why: str = ""  # why it is not Ready ("" when it is): `objects.pod_not_ready_reason`
    printed: bool = False  # read as its printed row (`model/printed.py`), not whole
    version: int = 0  # its resourceVersion as an integer (0: not one)
    # its `prometheus.io/*` annotations (the `kubernetes-pods` job)
    scrape_annotations: Mapping[str, str] = field(default_factory=dict)
    phase: str = ""  # "": a printed row cannot tell (a doubtful one is read whole before gates)

    @property
    def daemonset(self) -> str | None:
        """The DaemonSet that controls it, if one does."""
        return self.owner_name if self.owner_kind == "DaemonSet" else None

    @property
    def doubtful(self) -> bool:
        """A printed view that is not plainly healthy: only the whole pod can tell."""
        return self.printed and not self.ready

    @staticmethod
    def of(pod: Mapping[str, Any]) -> PodView:
        """The view of a whole pod, or of a printed one (believed only when plainly healthy;
        otherwise `doubtful`, and not Ready until its whole read says so)."""
        owner, meta, row = o.controller_owner(pod) or {}, o.meta(pod), printed.is_printed(pod)
        if row:
            ready = printed.plainly_healthy(pod)
            node, phase = printed.node_of(pod), "Running" if ready else ""
            why = "" if ready else str(printed.cells(pod).get("Status") or "not Ready")
        else:
            ready, why = o.pod_ready(pod), o.pod_not_ready_reason(pod)
            node = str(o.dig(pod, "spec", "nodeName") or "")
            phase = str(o.dig(pod, "status", "phase") or "")
        scrape = {k: v for k, v in o.annotations_of(pod).items() if k.startswith("prometheus.io/")}
        return PodView(
            name=o.name(pod), uid=str(meta.get("uid", "")), node=node, labels=o.labels(pod),
            ready=ready, deleting=bool(meta.get("deletionTimestamp")),
            owner_kind=owner.get("kind"), owner_name=owner.get("name"),
            node_lost=_marked_not_ready(pod), why=why, printed=row,
            version=o.int_version(meta.get("resourceVersion")), scrape_annotations=scrape,
            phase=phase)

    def contradicted(self, slices: Iterable[EndpointView]) -> bool:
        """A printed Ready view that an EndpointSlice newer than the pod lists as not serving."""
        return self.printed and self.ready and any(
            e.pod == self.name and e.version > self.version and not e.serving for e in slices)


def _marked_not_ready(pod: Mapping[str, Any]) -> bool:
    """Ready False under ContainersReady True, no readiness gates: `MarkPodsNotReady`."""
    if o.dig(pod, "spec", "readinessGates"):
        return False
    conds = {c.get("type"): c.get("status") for c in o.dig(pod, "status", "conditions") or []}
    return conds.get("Ready") == "False" and conds.get("ContainersReady") == "True"


@dataclass(frozen=True)
class EndpointView:
    pod: str | None
    node: str | None
    ready: bool
    serving: bool
    version: int = 0  # its EndpointSlice's resourceVersion as an integer
    uid: str | None = None  # its targetRef's pod uid
    address: str | None = None  # its first address
    slice: str = ""  # the EndpointSlice that lists it
    managed_by: str = ""  # that slice's `endpointslice.kubernetes.io/managed-by`


@dataclass(frozen=True)
class ServiceEndpoints:
    """Every endpoint of one Service, gathered from its EndpointSlices."""

    service: str
    endpoints: tuple[EndpointView, ...] = ()

    @property
    def ready_total(self) -> int:
        return sum(1 for e in self.endpoints if e.ready)

    def ready_by_node(self) -> dict[str, int]:
        return dict(Counter(e.node or "" for e in self.endpoints if e.ready))

    def ready_pods(self) -> frozenset[str]:
        return frozenset(e.pod for e in self.endpoints if e.ready and e.pod)


def endpoints_from_slices(service: str, slices: Iterable[Mapping[str, Any]]) -> ServiceEndpoints:
    """Merge a Service's EndpointSlices; a nil `ready` condition counts as ready (API contract)."""
    views: dict[tuple[str | None, str | None], EndpointView] = {}
    for sl in slices:
        version = o.int_version(o.meta(sl).get("resourceVersion"))
        managed_by = o.labels(sl).get(o.MANAGED_BY_LABEL, "")
        for ep in sl.get("endpoints") or []:
            cond, ref = ep.get("conditions") or {}, ep.get("targetRef") or {}
            ready = cond.get("ready") is None or bool(cond.get("ready"))
            key = (ref.get("name"), (ep.get("addresses") or [None])[0])
            # the same endpoint may briefly sit in two slices: the first one counts
            views.setdefault(key, EndpointView(
                pod=key[0], node=ep.get("nodeName"), ready=ready,
                serving=bool(cond.get("serving", ready)), version=version,
                uid=ref.get("uid"), address=key[1], slice=o.name(sl), managed_by=managed_by))
    return ServiceEndpoints(service, tuple(views.values()))


@dataclass(frozen=True)
class Snapshot:
    namespace: str
    namespace_exists: bool = True
    cluster_policies: tuple[Obj, ...] = ()
    gpu_clusters: tuple[Obj, ...] = ()
    daemonsets: Mapping[str, Obj] = field(default_factory=dict)
    services: Mapping[str, Obj] = field(default_factory=dict)
    pods: tuple[PodView, ...] = ()
    endpoints: Mapping[str, ServiceEndpoints] = field(default_factory=dict)
    service_monitors: tuple[Obj, ...] = ()
    pod_monitors: tuple[Obj, ...] = ()
    nvidia_api: bool = True
    # any namespace's: their ServiceMonitors' discovery role (none: the operator's default)
    prometheuses: tuple[Obj, ...] = ()
    # The guard's Leases, whether they could be read, and the wall time of the read.
    guard_leases: tuple[Obj, ...] = ()
    leases_read: bool = False
    taken_at: datetime | None = None
    # The Nodes' names, read only where a check needs them (None: not read).
    nodes: frozenset[str] | None = None

    def crs(self, kind: str) -> tuple[Obj, ...]:
        """The operator's CRs of `kind` (ClusterPolicy or GPUCluster; any other: none)."""
        return {"ClusterPolicy": self.cluster_policies, "GPUCluster": self.gpu_clusters}.get(
            kind, ())

    @cached_property
    def memo(self) -> dict[Any, Any]:
        """Results of pure functions of this snapshot, kept by them (`monitoring.scrape_paths`)."""
        return {}

    @cached_property
    def _pods_by_daemonset(self) -> dict[str, list[PodView]]:
        index: dict[str, list[PodView]] = {}
        for p in self.pods:
            if p.daemonset:
                index.setdefault(p.daemonset, []).append(p)
        return index

    def lists_every_ready_pod(self) -> bool:
        """Each Service's slices list every Ready pod it selects: when not, and only then, can a
        deleted node explain it (its Ready pods stay until their garbage collector)."""
        ours = {p.name for p in self.pods}
        for name, svc in self.services.items():
            listed = self.endpoints_of(name).ready_pods()
            if listed.isdisjoint(ours):  # another workload's Service (or none listed yet)
                continue
            selector = (svc.get("spec") or {}).get("selector") or {}
            if any(p.ready and p.name not in listed for p in self.pods_matching(selector)):
                return False
        return True

    def on_deleted_nodes(self) -> frozenset[str]:
        """The pods bound to a node the cluster no longer has (their garbage collector's
        quarantine lasts 40 to 60 s): none unless the Nodes were read."""
        if self.nodes is None:
            return frozenset()
        return frozenset(p.name for p in self.pods if p.node and p.node not in self.nodes)

    def pods_of(self, daemonset: str) -> list[PodView]:
        return list(self._pods_by_daemonset.get(daemonset, ()))

    def pods_matching(self, selector: Mapping[str, str]) -> list[PodView]:
        """The pods a Service with this `spec.selector` picks (none for an empty one); each
        selector matched once per snapshot (at 5,000 nodes, 10,000 pods a time)."""
        key = ("pods_matching", tuple(sorted(selector.items())))
        if key not in self.memo:
            sel = for_service(selector)
            self.memo[key] = [p for p in self.pods if not p.deleting and sel.matches(p.labels)]
        return list(self.memo[key])

    def endpoints_of(self, service: str) -> ServiceEndpoints:
        return self.endpoints.get(service) or ServiceEndpoints(service)

    def fingerprint(self) -> str:
        """A hash of what a plan depends on: spec and metadata of the DaemonSets, Services,
        CRs and ServiceMonitors, not status (a pod restart does not make a plan stale)."""
        def monitors(items: Iterable[Obj]) -> list[str]:
            return sorted(json.dumps(list(_fields(m, _MONITOR).values()), sort_keys=True)
                          for m in items)

        doc = {
            "namespace": self.namespace,
            "ds": {n: list(_fields(d, _DS).values()) for n, d in sorted(self.daemonsets.items())},
            "svc": {n: [*_fields(s, _SVC).values(), _svc_spec(s)]
                    for n, s in sorted(self.services.items())},
            "cr": sorted("".join(map(str, _fields(c, _CR).values()))
                         for c in (*self.cluster_policies, *self.gpu_clusters)),
            "sm": monitors(self.service_monitors),
            # PodMonitors only when there are any: plans saved before they counted stay valid
            **({"pm": monitors(self.pod_monitors)} if self.pod_monitors else {}),
        }
        raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def fingerprint_fields(self) -> dict[str, dict[str, str]]:
        """What `fingerprint` covers, per `Kind/name` and field as short hashes (saved plans)."""
        out = {f"DaemonSet/{n}": _hashed(_fields(d, _DS)) for n, d in self.daemonsets.items()}
        out |= {f"Service/{n}": _hashed(_fields(s, _SVC) | {f"spec.{k}": v
                                                             for k, v in _svc_spec(s).items()})
                for n, s in self.services.items()}
        for kind, items, paths in (("ClusterPolicy", self.cluster_policies, _CR),
                                   ("GPUCluster", self.gpu_clusters, _CR),
                                   ("ServiceMonitor", self.service_monitors, _MONITOR),
                                   ("PodMonitor", self.pod_monitors, _MONITOR)):
            out |= {f"{kind}/{o.name(m)}": _hashed(_fields(m, paths)) for m in items}
        return out


def changed_fields(saved: Mapping[str, Mapping[str, str]],
                   now: Mapping[str, Mapping[str, str]]) -> list[str]:
    """`Kind/name field` for each field two `fingerprint_fields` differ in (or `(created)`)."""
    found: list[str] = []
    for obj in sorted(set(saved) | set(now)):
        if obj not in saved:
            found.append(f"{obj} (created)")
        elif obj not in now:
            found.append(f"{obj} (deleted)")
        else:
            found += [f"{obj} {f}" for f in sorted(set(saved[obj]) | set(now[obj]))
                      if saved[obj].get(f) != now[obj].get(f)]
    return found


_CR = ("metadata.uid", "metadata.generation")
_DS = (*_CR, "metadata.labels", "spec.template.metadata.labels", "spec.updateStrategy")
_SVC = ("metadata.uid", "metadata.labels", "metadata.annotations", "metadata.ownerReferences")
_MONITOR = ("metadata.uid", "metadata.labels", "spec")


def _fields(obj: Obj, paths: Iterable[str]) -> dict[str, Any]:
    """These dotted fields of the object; labels and annotations `{}` when absent."""
    got = {p: o.dig(obj, *p.split(".")) for p in paths}
    return {p: dict(v or {}) if p.endswith(("labels", "annotations")) else v
            for p, v in got.items()}


def _svc_spec(s: Obj) -> dict[str, Any]:
    return {k: v for k, v in (s.get("spec") or {}).items()
            if k not in ("clusterIP", "clusterIPs")}


def _hashed(fields: Mapping[str, Any]) -> dict[str, str]:
    return {k: hashlib.sha256(json.dumps(v, sort_keys=True, default=str).encode())
            .hexdigest()[:16] for k, v in fields.items()}
