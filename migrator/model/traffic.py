"""The verdict's checks (model/outcome.py) that a stable name which lists endpoints delivers its
consumers' traffic to DCGM (pure): no foreign Ready pods, every targetPort served (as `findPort`),
and the guard's slices as kube-proxy meets them (a live guard Lease, every ready endpoint a pod)."""
from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from migrator.model import objects as o
from migrator.model import sharing
from migrator.model.findings import Finding, Need, alive, named
from migrator.model.selectors import for_service
from migrator.model.snapshot import EndpointView, PodView, Snapshot
from migrator.model.stacks import Catalog
from migrator.model.wording import counted

GUARD_COMMAND = "dcgm-migrate guard -n {ns}"  # in-cluster: docs/guard.yaml


def foreign_endpoints(snapshot: Snapshot, need: Need, svc: Mapping[str, Any],
                      allowed: Collection[str]) -> Finding:
    """Ready pods the Service selects that none of the name's DaemonSets owns."""
    subject = f"Service/{need.service}"
    owners = {c.daemonset for c in need.components}
    selector = o.dig(svc, "spec", "selector") or {}
    selects = for_service(selector).matches
    strays = sorted((p for p in snapshot.pods  # the cheap tests first: 30,000 pods at scale
                     if p.daemonset not in owners and p.ready and p.node and not p.deleting
                     and selects(p.labels)), key=lambda p: p.name)
    if not strays:
        return Finding("no-foreign-endpoints", subject, True,
                       "every ready endpoint is a pod of " + named(f"DaemonSet/{d}"
                                                                    for d in owners))
    what = f"{len(strays)} Ready pods outside its DaemonSets: " + named(
        f"{p.name} on {p.node}" for p in strays)
    if need.service in allowed:
        return Finding("no-foreign-endpoints", subject, True,
                       f"{what} (allowed by --allow-foreign-pods)")
    local = " (under internalTrafficPolicy Local, the only DCGM its node's consumers reach)" \
        if o.dig(svc, "spec", "internalTrafficPolicy") == "Local" else ""
    return Finding(
        "no-foreign-endpoints", subject, False,
        f"its selector {selector} makes {what} endpoints of it{local}",
        f"take the label off them (`kubectl label pod {strays[0].name} "
        f"{' '.join(f'{k}-' for k in sorted(selector))} -n {snapshot.namespace}`), or, if they "
        "belong behind this name, switch with --allow-foreign-pods (recorded in the state)")


def _unserved(port: Mapping[str, Any], declared: list[Mapping[str, Any]]) -> str | None:
    """Why no container serves this targetPort (None: one does, or a number with none declared)."""
    target, label = o.target_port(port), port.get("name") or port.get("port")
    protocol = port.get("protocol") or "TCP"
    same = [p for p in declared if (p.get("protocol") or "TCP") == protocol]
    number = o.resolve_port(port, same)
    if number is None:
        return f"port {label} → targetPort {target!r}: no container has a port of that name"
    if not declared or any(int(p.get("containerPort") or 0) == number for p in same):
        return None
    return (f"port {label} → targetPort {target}: no container declares it (they declare "
            f"{', '.join(sorted({str(p.get('containerPort')) for p in same})) or 'none'})")


def ports_served(snapshot: Snapshot, need: Need, svc: Mapping[str, Any], fix: str) -> Finding:
    """Every port of the Service reaches a port a container of its DaemonSets declares."""
    subject = f"Service/{need.service}"
    declared: list[Mapping[str, Any]] = []
    for comp in need.components:  # containers and restartable init containers, as findPort
        containers, inits = o.template_containers(snapshot.daemonsets.get(comp.daemonset))
        runs = containers + [c for c in inits if c.get("restartPolicy") == "Always"]
        declared += [p for c in runs for p in c.get("ports") or []]
    ports = o.dig(svc, "spec", "ports") or []
    bad = [why for port in ports if (why := _unserved(port, declared))]
    if bad:
        return Finding("ports-served", subject, False,
                       "; ".join(bad) + ": connections to it are refused", fix)
    return Finding("ports-served", subject, True,
                   f"{counted(len(ports), 'port')}, each to a port its containers declare")


def _renewed(lease: Mapping[str, Any]) -> datetime | None:
    text = o.dig(lease, "spec", "renewTime")
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def lease_live(lease: Mapping[str, Any], now: datetime | None) -> bool:
    """Does a replica hold this Lease, renewed within its duration as of `now` (None: a
    snapshot with no read time, judged by the holder alone)?"""
    spec = lease.get("spec") or {}
    if not spec.get("holderIdentity"):
        return False
    renewed = _renewed(lease)
    if now is None or renewed is None:
        return now is None
    return renewed + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0)) >= now


def _lease_detail(leases: Sequence[Mapping[str, Any]], now: datetime | None) -> str:
    if not leases:
        return "no guard Lease exists"
    parts = []
    for lease in leases:
        holder = o.dig(lease, "spec", "holderIdentity") or "no holder"
        renewed = _renewed(lease)
        age = (f"renewed {int((now - renewed).total_seconds())} s ago" if now and renewed
               else "never renewed")
        parts.append(f"Lease/{o.name(lease)} ({holder}, {age}, lasts "
                     f"{o.dig(lease, 'spec', 'leaseDurationSeconds') or 0} s)")
    return ", ".join(parts)


def _guard_live(snapshot: Snapshot, names: Sequence[str]) -> Finding:
    subject = "Lease/guard"
    shown = named(f"Service/{n}" for n in names)
    if not snapshot.leases_read:
        return Finding("guard-live", subject, False,
                       f"cannot tell whether a guard keeps {shown}: listing Leases is refused",
                       f"grant list on coordination.k8s.io leases in {snapshot.namespace} "
                       "(docs/rbac.yaml)")
    live = [lease for lease in snapshot.guard_leases if lease_live(lease, snapshot.taken_at)]
    if live:
        return Finding("guard-live", subject, True,
                       f"{_lease_detail(live, snapshot.taken_at)} keeps {shown}")
    return Finding("guard-live", subject, False,
                   f"{shown} depend on the guard's EndpointSlices and no guard runs: "
                   f"{_lease_detail(snapshot.guard_leases, snapshot.taken_at)}",
                   f"run `{GUARD_COMMAND.format(ns=snapshot.namespace)}` (in-cluster: "
                   "docs/guard.yaml); its first pass repairs the slices")


def _stale(pods: Mapping[str, PodView], ep: EndpointView) -> str:
    """Why a shared endpoint routes nowhere ("" when it is a live Ready pod of the name's
    DaemonSets on its node); `pods`: those DaemonSets' pods by uid and by name."""
    pod = pods.get(ep.uid) if ep.uid else pods.get(ep.pod or "")
    where = f"{ep.pod or ep.address} on {ep.node or 'no node'}"
    if pod is None or pod.deleting:
        return f"{where}: the pod is gone"
    if pod.node != ep.node:
        return f"{where}: the pod runs on {pod.node}"
    if not pod.ready:
        return f"{where}: the pod is not Ready"
    return ""


def _joining_nodes(snapshot: Snapshot, need: Need) -> set[str]:
    """Nodes whose pod of a shared name's kind is a GPUCluster pod that no pod of the stack
    owning the name stands beside: the nodes that reach the name only through the guard."""
    nodes = {c.stack: {p.node for p in alive(snapshot.pods_of(c.daemonset))}
             for c in need.components}
    joining = set().union(*(nodes[c.stack] for c in need.components if c.alias))
    owning = set().union(*(nodes[c.stack] for c in need.components if not c.alias))
    return joining - owning


def shared_findings(snapshot: Snapshot, catalog: Catalog, needs: Sequence[Need]
                     ) -> list[Finding]:
    """The guard's slices, judged as kube-proxy meets them (module docstring)."""
    ns = snapshot.namespace
    tool = catalog.common.managed_by.value
    shared = {c.alias for c, _, _ in sharing.shared_names(snapshot, catalog)}
    out = []
    kept: list[str] = []
    for need in needs:
        ours = [e for e in snapshot.endpoints_of(need.service).endpoints if e.managed_by == tool]
        if not ours and not (need.service in shared and _joining_nodes(snapshot, need)):
            continue
        kept.append(need.service)
        subject = f"Service/{need.service}"
        delete = (f"`kubectl -n {ns} delete endpointslices -l {o.MANAGED_BY_LABEL}={tool},"
                  f"{o.SERVICE_NAME_LABEL}={need.service}`")
        if need.service not in shared:
            out.append(Finding("shared-endpoints", subject, False,
                               f"{len(ours)} endpoints of the tool's EndpointSlices are left on "
                               "a name that is not shared any more (handed over, or the "
                               f"tool's alias): {named({e.slice for e in ours})}",
                               f"the guard deletes them on its next pass, or: {delete}"))
            continue
        pods = {key: p for c in need.components for p in snapshot.pods_of(c.daemonset)
                for key in (p.uid, p.name)}  # one index per name, not a scan per endpoint
        stale = [why for e in ours if e.ready for why in [_stale(pods, e)] if why]
        if stale:
            out.append(Finding("shared-endpoints", subject, False,
                               f"{len(stale)} ready endpoints of the tool's EndpointSlices "
                               f"route to no Ready pod: {named(stale)}",
                               f"run `{GUARD_COMMAND.format(ns=ns)}` (in-cluster: "
                               f"docs/guard.yaml), whose first pass rewrites them, or: {delete}"))
        else:
            out.append(Finding("shared-endpoints", subject, True,
                               f"{len(ours)} shared endpoints, each a Ready pod on its node"))
    if kept:
        out.insert(0, _guard_live(snapshot, kept))
    return out
