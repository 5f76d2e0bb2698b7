"""Where a stable name sends its consumers' traffic: the verdict's checks that a name which
exists and lists endpoints delivers them to DCGM (model/outcome.py). Which checks are
traffic-critical is defined once, in model/findings.py (`TRAFFIC_CHECKS`).

A Service can look whole — it exists, is Local, lists a ready endpoint on every node — and
still misroute or drop what its consumers send:

- `no-foreign-endpoints`: a Ready pod outside the name's DaemonSets carries the label it
  selects by, so it is an endpoint too; under `internalTrafficPolicy: Local` it may be the one
  a node's consumers reach. Only the `--allow-foreign-pods` the state recorded for that Service
  (the SRE's decision that those pods belong there) lets it pass.
- `ports-served`: a port whose targetPort no container of the name's DaemonSets declares (a
  number no container lists, a name none has), so kube-proxy forwards to a port nothing
  serves (upstream `findPort`, kubernetes `staging/src/k8s.io/endpointslice/utils.go`,
  resolves a named targetPort against the pod's containers and restartable init containers).

Pure: a Snapshot in, findings out."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.findings import TRAFFIC_CHECKS, Finding, Need, named, traffic_critical

__all__ = ["TRAFFIC_CHECKS", "foreign_endpoints", "ports_served", "traffic_critical"]
from migrator.model.snapshot import Snapshot


def foreign_endpoints(snapshot: Snapshot, need: Need, svc: Mapping[str, Any],
                      allowed: Collection[str]) -> Finding:
    """Ready pods the Service selects that none of the name's DaemonSets owns."""
    subject = f"Service/{need.service}"
    owners = {c.daemonset for c in need.components}
    service = dict(svc)
    strays = sorted((p for p in snapshot.pods  # the cheap tests first: 30,000 pods at scale
                     if not (p.owner_kind == "DaemonSet" and p.owner_name in owners)
                     and p.ready and p.node and not p.deleting
                     and g.service_selects(service, p.labels)),
                    key=lambda p: p.name)
    if not strays:
        return Finding("no-foreign-endpoints", subject, True,
                       "every ready endpoint is a pod of " + named(f"DaemonSet/{d}"
                                                                    for d in owners))
    what = f"{len(strays)} Ready pods outside its DaemonSets: " + named(
        f"{p.name} on {p.node}" for p in strays)
    if need.service in allowed:
        return Finding("no-foreign-endpoints", subject, True,
                       f"{what} (allowed by --allow-foreign-pods)")
    selector = o.dig(svc, "spec", "selector") or {}
    first = strays[0]
    local = " (under internalTrafficPolicy Local, the only DCGM its node's consumers reach)" \
        if o.dig(svc, "spec", "internalTrafficPolicy") == "Local" else ""
    return Finding(
        "no-foreign-endpoints", subject, False,
        f"its selector {selector} makes {what} endpoints of it{local}",
        f"take the label off them (`kubectl label pod {first.name} "
        f"{' '.join(f'{k}-' for k in sorted(selector))} -n {snapshot.namespace}`), or, if they "
        "belong behind this name, switch with --allow-foreign-pods (recorded in the state)")


def _containers(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[Mapping[str, Any]]:
    """The containers of these DaemonSets' templates, restartable init containers too."""
    out: list[Mapping[str, Any]] = []
    for name in daemonsets:
        spec = o.dig(snapshot.daemonsets.get(name) or {}, "spec", "template", "spec") or {}
        out += list(spec.get("containers") or [])
        out += [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    return out


def _unserved(port: Mapping[str, Any], declared: list[Mapping[str, Any]]) -> str | None:
    """Why no container serves this Service port's targetPort (None: one does, or the
    templates declare no port to judge by)."""
    target = port.get("targetPort", port.get("port"))
    protocol = port.get("protocol") or "TCP"
    same = [p for p in declared if (p.get("protocol") or "TCP") == protocol]
    label = port.get("name") or port.get("port")
    if isinstance(target, int) or str(target).isdigit():
        if not declared or any(int(p.get("containerPort") or 0) == int(target) for p in same):
            return None
        return (f"port {label} → targetPort {target}: no container declares it (they declare "
                f"{', '.join(sorted({str(p.get('containerPort')) for p in same})) or 'none'})")
    if any(p.get("name") == target for p in same):
        return None
    return f"port {label} → targetPort {target!r}: no container has a port of that name"


def ports_served(snapshot: Snapshot, need: Need, svc: Mapping[str, Any], fix: str) -> Finding:
    """Every port of the Service reaches a port a container of its DaemonSets declares."""
    subject = f"Service/{need.service}"
    declared = [p for c in _containers(snapshot, (c.daemonset for c in need.components))
                for p in c.get("ports") or []]
    ports = o.dig(svc, "spec", "ports") or []
    bad = [why for port in ports if (why := _unserved(port, declared))]
    if bad:
        return Finding("ports-served", subject, False,
                       "; ".join(bad) + ": connections to it are refused", fix)
    plural = "s" if len(ports) != 1 else ""
    return Finding("ports-served", subject, True,
                   f"{len(ports)} port{plural}, each to a port its containers declare")
