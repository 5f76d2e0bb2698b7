"""What is wrong with the scrape targets `model/monitoring.py` finds (pure; reported, never
resolved). Two targets of one mechanism (annotations, or the Operator's) are a certain duplicate;
one of each only possible (a Prometheus reading both, which the tool cannot see)."""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.monitoring import (
    ANNOTATION,
    OPERATOR,
    SERVICE_JOB,
    ScrapePath,
    annotation_job,
    drop_relabeling,
    listed,
    monitor_ref,
    monitors_of,
    scrape_paths,
)
from migrator.model.snapshot import PodView, Snapshot

# Addresses one Endpoints object holds (upstream pkg/controller/endpoint, maxCapacity): beyond,
# it is marked truncated and `role: endpoints` discovery misses the rest.
ENDPOINTS_CAPACITY = 1000


def _flow(rule: Mapping[str, Any]) -> str:
    """A relabeling as one line of YAML flow style."""
    return "{" + ", ".join(f"{k}: [{', '.join(v)}]" if isinstance(v, list) else f"{k}: {v}"
                           for k, v in rule.items()) + "}"


def shared_slice_fix(snapshot: Snapshot, duplicated: Mapping[str, list[ScrapePath]]) -> str:
    """The consumer's fix for duplicates through the tool's EndpointSlices under `role:
    endpointslice`: where the drop relabeling goes; "" if none."""
    fixes: dict[str, str] = {}
    for path in (p for found in duplicated.values() for p in found):
        if not path.slice or path.via in fixes:
            continue
        ref = path.via.split("/", 1)[1]
        sm = next((m for m in snapshot.service_monitors if monitor_ref(m) == ref), {})
        view = next((e for e in snapshot.endpoints_of(path.service).endpoints
                     if e.slice == path.slice), None)
        rule = _flow(drop_relabeling(view.managed_by if view else "dcgm-migrate"))
        owner = o.controller_owner(sm) or {}
        fixes[path.via] = (
            f"add {rule} to ClusterPolicy/{owner.get('name')} "
            "spec.dcgmExporter.serviceMonitor.relabelings (the GPU Operator renders "
            f"that list into ServiceMonitor {ref}; keep any entries it has)"
            if owner.get("kind") == "ClusterPolicy" else
            f"add {rule} to the relabelings of every endpoint of ServiceMonitor {ref}")
    if not fixes:
        return ""
    return ("the tool's EndpointSlices of the shared Service reach these pods a second time "
            "under role endpointslice: " + "; ".join(fixes[k] for k in sorted(fixes))
            + " (docs/monitoring.md, 'Discovery roles')")


def unscraped(paths: Mapping[str, list[ScrapePath]], pods: Iterable[PodView]) -> list[str]:
    """Ready exporter pods no target reaches: their GPUs are missing from every dashboard."""
    return sorted(p.name for p in pods if p.ready and not paths.get(p.name))


def truncated_endpoints(snapshot: Snapshot) -> list[str]:
    """Annotated Services listing more pods than one Endpoints object holds."""
    out = []
    for name, svc in sorted(snapshot.services.items()):
        annotated = annotation_job(o.annotations_of(svc), SERVICE_JOB) is not None
        if annotated and (count := len(listed(snapshot, svc))) > ENDPOINTS_CAPACITY:
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
    only duplicates the change would create or worsen count."""
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
    """The pods reached by more than one target of one mechanism, with those targets."""
    out = {}
    for pod, found in paths.items():
        for mechanism in (ANNOTATION, OPERATOR):
            same = [p for p in found if p.mechanism == mechanism]
            if len(same) > 1:
                out[pod] = same
                break
    return out


def possible(paths: Mapping[str, list[ScrapePath]]) -> list[str]:
    """The pods reached once by annotation discovery and once by the Prometheus Operator."""
    return sorted(pod for pod, found in paths.items()
                  if len(found) == 2 and {p.mechanism for p in found} == {ANNOTATION, OPERATOR})


def duplicates_through(paths: Mapping[str, list[ScrapePath]], services: Iterable[str]
                       ) -> list[str]:
    """Exporter pods scraped more than once, one path through these Services (the tool's)."""
    names = set(services)
    return sorted(pod for pod, found in paths.items()
                  if len(found) > 1 and any(p.service in names for p in found))


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

