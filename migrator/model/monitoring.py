"""Scrape targets of exporter pods (docs/monitoring.md): what real Prometheus discovery makes of
the annotations, ServiceMonitors and PodMonitors in the cluster, one `ScrapePath` per target.

Annotation discovery is modelled on the de-facto standard configuration, the
prometheus-community `prometheus` chart's default jobs, over Prometheus' Kubernetes discovery
(`discovery/kubernetes/endpoints.go`, `pod.go`):

- `kubernetes-service-endpoints` (`role: endpoints`) keeps Services annotated
  `prometheus.io/scrape: "true"`; `-slow` keeps `prometheus.io/scrape_slow: "true"` (and the
  first job drops those). Each pod the Service lists gives one target per endpoint port, plus
  one per container port no endpoint port covers; `prometheus.io/port` rewrites every address
  to that port, and targets whose labels end up identical are one target.
- `kubernetes-pods` (`role: pod`) keeps pods annotated the same way, drops Pending, Succeeded
  and Failed pods, and gives one target per declared container port and one port-free target
  per container (init containers included) that declares none; `prometheus.io/port` again
  collapses them.

The Prometheus Operator makes one job per ServiceMonitor endpoint (`serviceMonitor/<ns>/<name>/
<i>`) over the Services it selects, and one per PodMonitor endpoint over the pods it selects,
each keeping the port it names.

Two targets of one mechanism (annotation jobs, or the Prometheus Operator's) are a certain
duplicate: whichever Prometheus reads that mechanism scrapes the pod twice. An annotation target
plus an operator target is a duplicate only for a Prometheus that uses both (annotation
discovery is a hand-written scrape config; the Prometheus Operator reads only its monitors),
which the tool cannot see: it is reported as a possible duplicate. The what-if gates of phases 2
and 3 count every target (the tool never creates even a possible duplicate); the verdict fails
on certain ones and on a Ready exporter pod that no target reaches. ServiceMonitors that select
the same Service with different endpoint settings are a conflict. All are reported, never
resolved here.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from migrator.model import objects as o
from migrator.model.gates import GateResult, service_selects
from migrator.model.selectors import NOTHING, Selector, SelectorError, from_label_selector
from migrator.model.snapshot import PodView, Snapshot

Obj = dict[str, Any]


ANNOTATION, OPERATOR = "annotation", "prometheus-operator"
SCRAPE, SCRAPE_SLOW = "prometheus.io/scrape", "prometheus.io/scrape_slow"
PORT = "prometheus.io/port"
SERVICE_JOB, POD_JOB = "kubernetes-service-endpoints", "kubernetes-pods"
# The endpoints controller keeps at most this many addresses in one Endpoints object and marks
# it `endpoints.kubernetes.io/over-capacity: truncated`: `role: endpoints` discovery then misses
# the rest (upstream pkg/controller/endpoint, maxCapacity).
ENDPOINTS_CAPACITY = 1000
NOT_LISTED_PHASES = ("Pending", "Succeeded", "Failed", "Completed")


@dataclass(frozen=True)
class ScrapePath:
    """One scrape target that reaches a pod."""

    via: str  # "annotation", "servicemonitor/<ns>/<name>" or "podmonitor/<ns>/<name>"
    service: str  # the Service the target is discovered through; "" for a pod-level target
    job: str = ""  # the scrape job that holds it
    port: str = ""  # the target's port after relabelling ("" for a port-free target)

    def __str__(self) -> str:
        through = f"Service/{self.service}" if self.service else "pod annotation"
        where = f":{self.port}" if self.port else ""
        return f"{self.job if self.via == ANNOTATION else self.via} → {through}{where}"

    @property
    def mechanism(self) -> str:
        """The discovery a Prometheus must use for this path: annotation jobs or the
        Prometheus Operator (ServiceMonitors and PodMonitors)."""
        return ANNOTATION if self.via == ANNOTATION else OPERATOR


def annotation_job(annotations: Mapping[str, str], base: str) -> str | None:
    """The chart job that keeps an object with these annotations (regex `true`, anchored)."""
    if annotations.get(SCRAPE_SLOW) == "true":
        return f"{base}-slow"
    if annotations.get(SCRAPE) == "true":
        return base
    return None


def _relabelled(annotations: Mapping[str, str], ports: Iterable[str]) -> list[str]:
    """The distinct target ports once `prometheus.io/port` (digits only) rewrote them."""
    wanted = annotations.get(PORT, "")
    found = sorted(set(ports))
    if wanted.isdigit() and found:
        return [wanted]
    return found


def _containers(snapshot: Snapshot, pod: PodView, *, init: bool) -> list[Obj]:
    """The pod's containers, from its DaemonSet's template (pods run the template)."""
    ds = snapshot.daemonsets.get(pod.owner_name or "") if pod.owner_kind == "DaemonSet" else None
    spec = o.dig(ds, "spec", "template", "spec") or {}
    found = list(spec.get("containers") or [])
    if init:
        found += list(spec.get("initContainers") or [])
    return found


def _container_ports(containers: Iterable[Obj]) -> list[Obj]:
    return [p for c in containers for p in c.get("ports") or []]


def _resolve(port: Obj, container_ports: Iterable[Obj]) -> int | None:
    """A Service port's targetPort for this pod (a name resolves against container ports)."""
    target = port.get("targetPort", port.get("port"))
    if target is None:
        return None
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    protocol = port.get("protocol") or "TCP"
    return next((int(p["containerPort"]) for p in container_ports
                 if p.get("name") == target and (p.get("protocol") or "TCP") == protocol), None)


def listed(snapshot: Snapshot, service: Obj,
           among: Iterable[PodView] | None = None) -> list[PodView]:
    """The pods (of `among`, default all) a Service's Endpoints/EndpointSlices list (selected,
    not terminal, started; being deleted only with `publishNotReadyAddresses`)."""
    publish = bool(o.dig(service, "spec", "publishNotReadyAddresses"))
    return [p for p in (snapshot.pods if among is None else among)
            if service_selects(service, p.labels) and p.node
            and p.phase not in NOT_LISTED_PHASES and (publish or not p.deleting)]


def _service_targets(snapshot: Snapshot, service: Obj, pod: PodView) -> list[ScrapePath]:
    job = annotation_job(o.annotations_of(service), SERVICE_JOB)
    if job is None:
        return []
    cports = _container_ports(_containers(snapshot, pod, init=False))
    seen = {_resolve(p, cports) for p in o.dig(service, "spec", "ports") or []}
    seen.discard(None)
    ports = [str(n) for n in seen]
    ports += [str(p["containerPort"]) for p in cports if int(p["containerPort"]) not in seen]
    return [ScrapePath(ANNOTATION, o.name(service), job, port)
            for port in _relabelled(o.annotations_of(service), ports)]


def _pod_targets(snapshot: Snapshot, pod: PodView) -> list[ScrapePath]:
    job = annotation_job(pod.scrape_annotations, POD_JOB)
    if job is None or pod.phase in NOT_LISTED_PHASES or not pod.node:
        return []
    containers = _containers(snapshot, pod, init=True)
    ports = [str(p["containerPort"]) for c in containers for p in c.get("ports") or []]
    ports += ["" for c in containers if not c.get("ports")]
    return [ScrapePath(ANNOTATION, "", job, port)
            for port in _relabelled(pod.scrape_annotations, ports)]


def _sm_targets(service: Obj, sm: Obj) -> list[ScrapePath]:
    """One target per ServiceMonitor endpoint that keeps a port of the Service."""
    via = f"servicemonitor/{o.meta(sm).get('namespace')}/{o.name(sm)}"
    out = []
    svc_ports = o.dig(service, "spec", "ports") or []
    for i, ep in enumerate(o.dig(sm, "spec", "endpoints") or []):
        if "port" in ep:
            kept = [p for p in svc_ports if p.get("name") == ep["port"]]
        elif "targetPort" in ep:
            kept = [p for p in svc_ports
                    if str(p.get("targetPort", p.get("port"))) == str(ep["targetPort"])]
        else:
            kept = list(svc_ports)
        out += [ScrapePath(via, o.name(service), f"serviceMonitor/{via.split('/', 1)[1]}/{i}",
                           str(p.get("targetPort", p.get("port")))) for p in kept]
    return out


def _pm_targets(snapshot: Snapshot, pod: PodView, pm: Obj) -> list[ScrapePath]:
    """One target per PodMonitor endpoint that keeps a container port of the pod."""
    via = f"podmonitor/{o.meta(pm).get('namespace')}/{o.name(pm)}"
    cports = _container_ports(_containers(snapshot, pod, init=False))
    out = []
    for i, ep in enumerate(o.dig(pm, "spec", "podMetricsEndpoints") or []):
        if "port" in ep:
            kept = [p for p in cports if p.get("name") == ep["port"]]
        elif "targetPort" in ep:
            kept = [p for p in cports if str(ep["targetPort"]) in (
                str(p.get("containerPort")), p.get("name"))]
        else:
            kept = list(cports)
        out += [ScrapePath(via, "", f"podMonitor/{via.split('/', 1)[1]}/{i}",
                           str(p.get("containerPort"))) for p in kept]
    return out


def _monitor_namespace(monitor: Obj, namespace: str) -> bool:
    """A monitor's `namespaceSelector` covers the namespace (empty: its own namespace)."""
    ns_sel = o.dig(monitor, "spec", "namespaceSelector") or {}
    if ns_sel.get("any"):
        return True
    names = ns_sel.get("matchNames") or []
    if names:
        return namespace in names
    return o.meta(monitor).get("namespace") == namespace


def _monitor_selector(monitor: Obj) -> Selector:
    """`spec.selector` is a LabelSelector value, not a pointer, in prometheus-operator: absent
    means empty, which selects everything. One Kubernetes would reject selects nothing (the
    operator skips that monitor)."""
    try:
        return from_label_selector(o.dig(monitor, "spec", "selector") or {})
    except SelectorError:
        return NOTHING


def monitors_of(snapshot: Snapshot, service: Obj) -> list[Obj]:
    """ServiceMonitors whose namespaceSelector and selector match the Service."""
    return [sm for sm in snapshot.service_monitors
            if _monitor_namespace(sm, snapshot.namespace)
            and _monitor_selector(sm).matches(o.labels(service))]


def exporter_pods(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[PodView]:
    names = set(daemonsets)
    return [p for p in snapshot.pods
            if p.owner_kind == "DaemonSet" and p.owner_name in names and not p.deleting]


def scrape_paths(snapshot: Snapshot, daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Every scrape target reaching each exporter pod, keyed by pod name (computed once per
    snapshot: it is immutable, and a report asks for it several times)."""
    names = tuple(sorted(set(daemonsets)))
    key = ("scrape_paths", names)
    if key not in snapshot.memo:
        snapshot.memo[key] = _scrape_paths(snapshot, names)
    found: dict[str, list[ScrapePath]] = snapshot.memo[key]
    return {pod: list(paths) for pod, paths in found.items()}


def _scrape_paths(snapshot: Snapshot, daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    pods = exporter_pods(snapshot, daemonsets)
    out: dict[str, list[ScrapePath]] = {p.name: _pod_targets(snapshot, p) for p in pods}
    for svc in snapshot.services.values():
        sms = monitors_of(snapshot, svc)
        if annotation_job(o.annotations_of(svc), SERVICE_JOB) is None and not sms:
            continue
        per_daemonset: dict[str | None, list[ScrapePath]] = {}  # pods run their template
        for pod in listed(snapshot, svc, pods):
            if pod.owner_name not in per_daemonset:
                per_daemonset[pod.owner_name] = _service_targets(snapshot, svc, pod) + [
                    t for sm in sms for t in _sm_targets(svc, sm)]
            out[pod.name] += per_daemonset[pod.owner_name]
    pms = [pm for pm in snapshot.pod_monitors if _monitor_namespace(pm, snapshot.namespace)]
    for pm in pms:
        selector = _monitor_selector(pm)
        for pod in pods:
            if selector.matches(pod.labels):
                out[pod.name] += _pm_targets(snapshot, pod, pm)
    return out


def unscraped(paths: Mapping[str, list[ScrapePath]], pods: Iterable[PodView]) -> list[str]:
    """Ready exporter pods no target reaches: their GPUs are missing from every dashboard."""
    return sorted(p.name for p in pods if p.ready and not paths.get(p.name))


def truncated_endpoints(snapshot: Snapshot) -> list[str]:
    """Annotated Services listing more pods than one Endpoints object holds: the chart's
    `role: endpoints` job sees only the first ENDPOINTS_CAPACITY of them."""
    out = []
    for name, svc in sorted(snapshot.services.items()):
        if annotation_job(o.annotations_of(svc), SERVICE_JOB) is None:
            continue
        count = len(listed(snapshot, svc))
        if count > ENDPOINTS_CAPACITY:
            out.append(f"Service/{name} lists {count} pods, more than the {ENDPOINTS_CAPACITY} "
                       "addresses an Endpoints object holds (the endpoints controller truncates "
                       "it): a Prometheus job with `role: endpoints` scrapes only "
                       f"{ENDPOINTS_CAPACITY} of them; use `role: endpointslice` "
                       "(docs/monitoring.md)")
    return out


def duplicate_gate(snapshot: Snapshot, daemonsets: Iterable[str],
                   name: str = "no-duplicate-scrape",
                   before: Snapshot | None = None) -> GateResult:
    """No exporter pod reached by more than one scrape path. With `before` (a what-if check),
    only duplicates the change would create or worsen count: an existing one is a warning of
    its own, not a reason to refuse an unrelated change."""
    names = list(daemonsets)
    paths = scrape_paths(snapshot, names)
    prior = scrape_paths(before, names) if before is not None else {}
    dups = {pod: p for pod, p in paths.items()
            if len(p) > 1 and (before is None or len(p) > len(prior.get(pod, [])))}
    if not dups:
        existing = sum(1 for p in prior.values() if len(p) > 1)
        note = f" (the change adds none; {existing} already duplicated)" if existing else ""
        return GateResult(name, True,
                          f"{len(paths)} exporter pods, no new second scrape path{note}")
    pod, example = next(iter(sorted(dups.items())))
    return GateResult(name, False, f"{len(dups)} exporter pods scraped more than once, e.g. "
                      f"{pod} via {'; '.join(map(str, example))}")


def certain(paths: Mapping[str, list[ScrapePath]]) -> dict[str, list[ScrapePath]]:
    """The pods reached by more than one target of the same mechanism, with those targets:
    every Prometheus that reads that mechanism scrapes them twice."""
    out = {}
    for pod, found in paths.items():
        for mechanism in (ANNOTATION, OPERATOR):
            same = [p for p in found if p.mechanism == mechanism]
            if len(same) > 1:
                out[pod] = same
                break
    return out


def possible(paths: Mapping[str, list[ScrapePath]]) -> list[str]:
    """The pods reached once by annotation discovery and once by the Prometheus Operator (and
    not certainly duplicated): scraped twice only by a Prometheus configured for both."""
    return sorted(pod for pod, found in paths.items()
                  if len(found) == 2 and {p.mechanism for p in found} == {ANNOTATION, OPERATOR})


def certain_duplicates(snapshot: Snapshot,
                       daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Exporter pods with a certain duplicate (`certain`), with the targets."""
    return certain(scrape_paths(snapshot, daemonsets))


def possible_duplicates(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[str]:
    """Exporter pods with a possible duplicate (`possible`)."""
    return possible(scrape_paths(snapshot, daemonsets))


def duplicates_through(snapshot: Snapshot, daemonsets: Iterable[str],
                       services: Iterable[str]) -> list[str]:
    """Exporter pods scraped more than once where one of the paths goes through one of these
    Services (the tool's own aliases): a duplicate the migration is answerable for."""
    names = set(services)
    return sorted(pod for pod, paths in scrape_paths(snapshot, daemonsets).items()
                  if len(paths) > 1 and any(p.service in names for p in paths))


def conflicting_monitors(snapshot: Snapshot) -> list[str]:
    """ServiceMonitors that select the same Service with different endpoint settings."""
    found = []
    for svc in snapshot.services.values():
        sms = monitors_of(snapshot, svc)
        settings = {json.dumps(o.dig(sm, "spec", "endpoints"), sort_keys=True) for sm in sms}
        if len(sms) > 1 and len(settings) > 1:
            found.append(f"Service/{o.name(svc)} is selected by ServiceMonitors "
                         f"{', '.join(sorted(o.name(sm) for sm in sms))} with different "
                         "endpoint settings")
    return found


def with_service(snapshot: Snapshot, service: Obj) -> Snapshot:
    """The snapshot as it would be with this Service created or replaced (for what-if gates)."""
    services: Mapping[str, Obj] = {**snapshot.services, o.name(service): service}
    return replace(snapshot, services=services)
