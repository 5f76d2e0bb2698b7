"""Scrape paths to exporter pods (SPEC §4): annotation discovery and ServiceMonitors.

Two paths of one discovery mechanism (two annotated Services, or two ServiceMonitor paths) are
a certain duplicate: whichever Prometheus reads that mechanism scrapes the pod twice. An
annotation path plus a ServiceMonitor path is a duplicate only for a Prometheus that uses both
(annotation discovery is a hand-written scrape config; the Prometheus Operator reads only
ServiceMonitors), which the tool cannot see: it is reported as a possible duplicate. The what-if
gates of phases 2 and 3 count every path (the tool never creates even a possible duplicate);
`verify` fails on certain ones. ServiceMonitors that select the same Service with different
endpoint settings are a conflict. All are reported, never resolved here.
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


@dataclass(frozen=True)
class ScrapePath:
    via: str  # "annotation" or "servicemonitor/<namespace>/<name>"
    service: str

    def __str__(self) -> str:
        return f"{self.via} → Service/{self.service}"

    @property
    def mechanism(self) -> str:
        """The discovery a Prometheus must use for this path: annotation or servicemonitor."""
        return self.via.split("/", 1)[0]


def _sm_selects_namespace(sm: Obj, namespace: str) -> bool:
    ns_sel = o.dig(sm, "spec", "namespaceSelector") or {}
    if ns_sel.get("any"):
        return True
    names = ns_sel.get("matchNames") or []
    if names:
        return namespace in names
    return o.meta(sm).get("namespace") == namespace


def _sm_selector(sm: Obj) -> Selector:
    """`spec.selector` is a LabelSelector value, not a pointer, in prometheus-operator: absent
    means empty, which selects every Service. One Kubernetes would reject selects nothing (the
    operator skips that ServiceMonitor)."""
    try:
        return from_label_selector(o.dig(sm, "spec", "selector") or {})
    except SelectorError:
        return NOTHING


def monitors_of(snapshot: Snapshot, service: Obj) -> list[Obj]:
    """ServiceMonitors whose namespaceSelector and selector match the Service."""
    out = []
    for sm in snapshot.service_monitors:
        if not _sm_selects_namespace(sm, snapshot.namespace):
            continue
        if _sm_selector(sm).matches(o.labels(service)):
            out.append(sm)
    return out


def service_paths(snapshot: Snapshot, service: Obj) -> list[ScrapePath]:
    name = o.name(service)
    paths = []
    if o.annotations_of(service).get("prometheus.io/scrape") == "true":
        paths.append(ScrapePath("annotation", name))
    for sm in monitors_of(snapshot, service):
        paths.append(ScrapePath(f"servicemonitor/{o.meta(sm).get('namespace')}/{o.name(sm)}",
                                name))
    return paths


def exporter_pods(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[PodView]:
    names = set(daemonsets)
    return [p for p in snapshot.pods
            if p.owner_kind == "DaemonSet" and p.owner_name in names and not p.deleting]


def scrape_paths(snapshot: Snapshot, daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Every scrape path reaching each exporter pod, keyed by pod name."""
    per_service = [(s, service_paths(snapshot, s)) for s in snapshot.services.values()]
    per_service = [(s, p) for s, p in per_service if p]
    out: dict[str, list[ScrapePath]] = {}
    for pod in exporter_pods(snapshot, daemonsets):
        out[pod.name] = [path for svc, paths in per_service if service_selects(svc, pod.labels)
                         for path in paths]
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


def certain_duplicates(snapshot: Snapshot,
                       daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Exporter pods reached by more than one path of the same mechanism, with those paths:
    every Prometheus that reads that mechanism scrapes them twice."""
    out = {}
    for pod, paths in scrape_paths(snapshot, daemonsets).items():
        for mechanism in ("annotation", "servicemonitor"):
            same = [p for p in paths if p.mechanism == mechanism]
            if len(same) > 1:
                out[pod] = same
                break
    return out


def possible_duplicates(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[str]:
    """Exporter pods reached once by annotation discovery and once by a ServiceMonitor (and not
    certainly duplicated): scraped twice only by a Prometheus configured for both."""
    return sorted(pod for pod, paths in scrape_paths(snapshot, daemonsets).items()
                  if len(paths) == 2 and {p.mechanism for p in paths} == {
                      "annotation", "servicemonitor"})


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
