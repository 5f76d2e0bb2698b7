"""Stable names shared across both stacks, as pure functions: which operator Services the
GPUCluster pods must join, and the EndpointSlice writes that make them join
(docs/architecture.md, "Clusters running both stacks: shared EndpointSlices").

With a ClusterPolicy and a GPUCluster in one cluster, the ClusterPolicy operator owns the
stable names (`nvidia-dcgm`, `nvidia-dcgm-exporter`): it renders them with a selector on its own
pods and replaces them whole on every reconcile, so a selector the tool set would be reverted.
The tool never writes those Services. Instead it gives each one EndpointSlices of its own —
`kubernetes.io/service-name: <stable name>`, `endpointslice.kubernetes.io/managed-by:
dcgm-migrate` — listing the GPUCluster pods on the nodes the operator's own slices do not
cover. kube-proxy and Prometheus' `role: endpointslice` discovery merge every slice carrying
the Service's name; the EndpointSlice controller manages only slices carrying its own
managed-by value, and no operator writes EndpointSlices, so nothing reverts them.

What a shared slice holds is copied from what the cluster already computed: the endpoints
(addresses, conditions, node, zone, pod) of the GPUCluster Service's controller-made slices
(`nvidia-dcgm-dra`, …), and the ports of the operator's Service, named as there (kube-proxy
matches slice ports to Service ports by name) with the number its `targetPort` resolves to on
the GPUCluster pod template. Configuration conflicts have one rule: the Service that owns the
stable name keeps its configuration; the GPUCluster pods join it as they are, and every
difference (a port the GPUCluster pods do not serve, another type or traffic policy) is
reported, never applied.

Each address family is shared on its own, as the EndpointSlice controller keeps one set of
slices per `addressType`: a family of the operator Service's `spec.ipFamilies` gets slices of
that `addressType` holding the GPUCluster endpoints of that family (kube-proxy's proxier of
each family reads only its own).

The slices belong to their keeper, not to the Service: their one ownerReference names the
guard's Lease (`Keeper`), so deleting the guard (its manifest carries the Lease) lets the
garbage collector remove them, while a Service that is re-rendered or adopted keeps none that
nobody maintains. A dependent goes only when *all* its owners are gone, which is why the
Service is not a second owner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migrator.model import aliasing
from migrator.model import objects as o
from migrator.model.slices import (
    CONTROLLER_NAME,
    CREATE,
    DELETE,
    IPV4,
    IPV6,
    MANAGED_BY_LABEL,
    MAX_ENDPOINTS,
    OPERATOR_KIND,
    SERVICE_NAME_LABEL,
    SHARED_FROM_ANNOTATION,
    UPDATE,
    Keeper,
    ShapedEndpoints,
    SliceWrite,
    _endpoints_of,
    _key,
    is_shared_slice,
    rendered_by,
)
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Common, Component

Obj = dict[str, Any]
__all__ = ["CONTROLLER_NAME", "CREATE", "DELETE", "IPV4", "IPV6", "MANAGED_BY_LABEL",
           "MAX_ENDPOINTS", "OPERATOR_KIND", "SERVICE_NAME_LABEL", "SHARED_FROM_ANNOTATION",
           "UPDATE", "Keeper", "ShapedEndpoints", "Share", "SliceWrite", "_endpoints_of",
           "all_writes", "families", "is_shared_slice", "rendered_by", "shared_names",
           "shared_slices", "shares", "slice_prefix", "slice_writes"]

# Service fields whose difference between the two stacks' Services is reported as a conflict
# (ports are compared one by one, as they resolve on the GPUCluster pods).
COMPARED_SPEC_FIELDS = tuple(f for f in aliasing.COPIED_SPEC_FIELDS
                             if f not in ("ipFamilies", "ipFamilyPolicy"))
# What the API server defaults a field to when a Service leaves it out: a Service that omits
# one and a Service that spells the default agree.
SPEC_DEFAULTS = {"type": "ClusterIP", "internalTrafficPolicy": "Cluster",
                 "sessionAffinity": "None", "publishNotReadyAddresses": False}

@dataclass(frozen=True)
class Share:
    """One operator Service the pods of one GPUCluster component join."""

    service: Obj  # the operator's Service of the stable name
    component: Component  # the GPUCluster component whose pods join it
    owner: str  # `ClusterPolicy/<name>`
    ports: tuple[Obj, ...]  # the shared slices' ports
    # addressType → the GPUCluster endpoints of that family on nodes the operator's slices
    # miss, for each family the operator's Service serves
    by_family: Mapping[str, tuple[Obj, ...]]
    conflicts: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return o.name(self.service)

    @property
    def endpoints(self) -> tuple[Obj, ...]:
        """Every shared endpoint, family after family."""
        return tuple(e for f in sorted(self.by_family) for e in self.by_family[f])

    def as_dict(self) -> dict[str, Any]:
        nodes = sorted({str(e.get("nodeName") or "") for e in self.endpoints} - {""})
        ready = sum(1 for e in self.endpoints if (e.get("conditions") or {}).get("ready"))
        return {"name": self.name, "owner": self.owner, "source": self.component.service,
                "endpoints": len(self.endpoints), "ready": ready, "nodes": len(nodes),
                "families": sorted(self.by_family), "conflicts": list(self.conflicts)}


# ---- what is shared ---------------------------------------------------------------------------

def _by_service(slices: Iterable[Mapping[str, Any]], managed_by: str) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for sl in slices:
        labels = o.labels(sl)
        if labels.get(MANAGED_BY_LABEL) == managed_by and SERVICE_NAME_LABEL in labels:
            out.setdefault(labels[SERVICE_NAME_LABEL], []).append(dict(sl))
    return out



def _container_ports(daemonset: Mapping[str, Any]) -> list[Obj]:
    spec = o.dig(daemonset, "spec", "template", "spec") or {}
    return [p for c in spec.get("containers") or [] for p in c.get("ports") or []]


def _ports(service: Mapping[str, Any], daemonset: Mapping[str, Any],
           comp: Component) -> tuple[list[Obj], list[str]]:
    """The operator Service's ports as the GPUCluster pods serve them: (slice ports,
    conflicts). A `targetPort` naming no container port, or a number no declared container
    port has, is a port those pods do not serve: left out and reported."""
    declared = _container_ports(daemonset)
    out, conflicts = [], []
    for p in o.dig(service, "spec", "ports") or []:
        target = p.get("targetPort", p.get("port"))
        protocol = p.get("protocol") or "TCP"
        number: int | None
        if isinstance(target, str) and not target.isdigit():
            number = next((int(c["containerPort"]) for c in declared
                           if c.get("name") == target
                           and (c.get("protocol") or "TCP") == protocol), None)
        else:
            number = int(target)
            if declared and not any(int(c.get("containerPort") or 0) == number
                                    for c in declared):
                number = None
        if number is None:
            conflicts.append(f"port {p.get('name') or p.get('port')} (targetPort {target}) is "
                             f"not a container port of DaemonSet/{comp.daemonset}: its pods "
                             "join without it")
            continue
        port: Obj = {"name": p.get("name") or "", "port": number, "protocol": protocol}
        if p.get("appProtocol"):
            port["appProtocol"] = p["appProtocol"]
        out.append(port)
    return out, conflicts


def _config_conflicts(service: Mapping[str, Any], source: Mapping[str, Any] | None) -> list[str]:
    """Settings the two stacks' Services disagree on (an omitted field read as the API server
    defaults it); the stable name keeps its own. `internalTrafficPolicy` is among them: the
    GPUCluster pods joining a `Cluster` name are reached from every node, not their own."""
    if source is None:
        return []
    have, other = service.get("spec") or {}, source.get("spec") or {}

    def value(spec: Mapping[str, Any], f: str) -> Any:
        return spec.get(f, SPEC_DEFAULTS.get(f))

    return [f"{f}: {value(have, f)!r} here, {value(other, f)!r} on Service/{o.name(source)} "
            "(this Service's setting applies to both stacks' pods)"
            for f in COMPARED_SPEC_FIELDS if f in have or f in other
            if value(have, f) != value(other, f)]


def families(service: Mapping[str, Any]) -> tuple[str, ...]:
    """The address families a Service serves (`spec.ipFamilies`; the API server always sets
    it, IPv4 is read for an object that predates dual-stack)."""
    return tuple(o.dig(service, "spec", "ipFamilies") or (IPV4,))


def _address_type(slice_: Mapping[str, Any]) -> str:
    return str(slice_.get("addressType") or IPV4)


def shared_names(snapshot: Snapshot, catalog: Catalog) -> list[tuple[Component, Obj, str]]:
    """(GPUCluster component, operator Service, `ClusterPolicy/<name>`) for each stable name
    whose pods must be shared: the stable name of a GPUCluster component whose DaemonSet runs
    here is a ClusterPolicy's Service (the operator rendered it), not the tool's alias, not
    being deleted, and not handed over to an operator release that selects both stacks'
    pods itself. The one answer to "does the identity here depend on the guard's slices"."""
    out = []
    for comp in catalog.components:
        if not comp.alias or comp.daemonset not in snapshot.daemonsets:
            continue
        svc = snapshot.services.get(comp.alias)
        owner = rendered_by(svc) if svc is not None else None
        if (svc is None or owner is None or o.terminating(svc)
                or catalog.common.tool_owned(svc) or catalog.managed_by_release(svc)):
            continue
        out.append((comp, dict(svc), owner))
    return out


def shares(snapshot: Snapshot, catalog: Catalog, slices: Iterable[Mapping[str, Any]],
           shaped: ShapedEndpoints | None = None) -> list[Share]:
    """Every operator Service of a stable name that GPUCluster pods must join
    (`shared_names`). Its shared endpoints, per address family it serves, are the GPUCluster
    Service's endpoints of that family on nodes that no endpoint of the operator's own slices
    is on; a family it serves that the GPUCluster slices do not list is reported."""
    all_slices = list(slices)
    controller = _by_service(all_slices, CONTROLLER_NAME)
    out = []
    for comp, svc, owner in shared_names(snapshot, catalog):
        covered = {str(e.get("nodeName") or "") for sl in controller.get(comp.alias or "", [])
                   for e in sl.get("endpoints") or []}
        source_slices = controller.get(comp.service, [])
        by_family: dict[str, tuple[Obj, ...]] = {}
        conflicts: list[str] = []
        for family in families(svc):
            seen: dict[str, Obj] = {}
            for sl in source_slices:
                if _address_type(sl) != family:
                    continue
                for ep in _endpoints_of(sl, snapshot.namespace, shaped):
                    if ep.get("nodeName") and ep["nodeName"] not in covered:
                        seen.setdefault(_key(ep), ep)
            by_family[family] = tuple(e for _, e in sorted(
                seen.items(), key=lambda kv: (kv[1].get("nodeName", ""), kv[0])))
            if source_slices and not any(_address_type(sl) == family for sl in source_slices):
                conflicts.append(f"Service/{comp.alias} serves {family}, but the "
                                 f"EndpointSlices of Service/{comp.service} list no {family} "
                                 f"address: the {comp.stack} pods join it without {family}")
        ports, port_conflicts = _ports(svc, snapshot.daemonsets[comp.daemonset], comp)
        conflicts += port_conflicts + _config_conflicts(svc, snapshot.services.get(comp.service))
        out.append(Share(svc, comp, owner, tuple(ports), by_family, tuple(conflicts)))
    return out


# ---- the writes -------------------------------------------------------------------------------

def _slice_body(share: Share, name: str, family: str, endpoints: Sequence[Obj], namespace: str,
                catalog: Catalog, keeper: Keeper) -> Obj:
    mb = catalog.common.managed_by
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": name, "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: share.name, MANAGED_BY_LABEL: mb.value,
                       mb.key: mb.value},
            "annotations": {SHARED_FROM_ANNOTATION: share.component.service},
            "ownerReferences": [keeper.reference()],
        },
        "addressType": family,
        "ports": [dict(p) for p in share.ports],
        "endpoints": [dict(e) for e in endpoints],
    }


def _same_slice(live: Mapping[str, Any], body: Mapping[str, Any],
                shaped: ShapedEndpoints | None) -> bool:
    lm, bm = o.meta(live), o.meta(body)
    return bool(all(o.labels(live).get(k) == v for k, v in (bm.get("labels") or {}).items())
                and o.annotations_of(live).get(SHARED_FROM_ANNOTATION)
                == bm["annotations"][SHARED_FROM_ANNOTATION]
                and [(r.get("kind"), r.get("name"), r.get("uid"))
                     for r in lm.get("ownerReferences") or []]
                == [(r["kind"], r["name"], r["uid"]) for r in bm["ownerReferences"]]
                and [_canonical_port(p) for p in live.get("ports") or []]
                == [_canonical_port(p) for p in body.get("ports") or []]
                and list(_endpoints_of(live, str(lm.get("namespace") or ""), shaped))
                == list(body.get("endpoints") or []))


def _canonical_port(p: Mapping[str, Any]) -> tuple[Any, ...]:
    return (p.get("name") or "", p.get("port"), p.get("protocol") or "TCP",
            p.get("appProtocol"))


def slice_prefix(stable: str, family: str) -> str:
    """The names of the tool's slices of one stable name and family: `<name>-dcgm-migrate-<n>`
    for IPv4 (as before dual-stack), `<name>-dcgm-migrate-ipv6-<n>` for IPv6."""
    return f"{stable}-dcgm-migrate-" + ("" if family == IPV4 else f"{family.lower()}-")


def _free_name(prefix: str, taken: set[str]) -> str:
    i = 0
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"


def _delete(sl: Mapping[str, Any], stable: str, why: str) -> SliceWrite:
    return SliceWrite(DELETE, o.name(sl), stable, why,
                      resource_version=o.resource_version(sl))


def slice_writes(share: Share | None, stable: str, existing: Sequence[Mapping[str, Any]],
                 namespace: str, catalog: Catalog, keeper: Keeper,
                 shaped: ShapedEndpoints | None = None) -> list[SliceWrite]:
    """The writes that make the shared slices of `stable` hold `share`'s endpoints, one set of
    slices per address family (none for `share` None: every shared slice of that name goes).
    A slice of a family the Service no longer serves is deleted."""
    by_family: dict[str, list[Obj]] = {}
    for sl in sorted(existing, key=o.name):
        by_family.setdefault(_address_type(sl), []).append(dict(sl))
    if share is None:
        why = f"Service/{stable} needs no shared slice (the tool's alias, handed over, or gone)"
        return [_delete(sl, stable, why) for f in sorted(by_family) for sl in by_family[f]]
    out = []
    for family in sorted(set(by_family) | set(share.by_family)):
        current = by_family.get(family, [])
        if family not in share.by_family:
            out += [_delete(sl, stable, f"Service/{stable} no longer serves {family}")
                    for sl in current]
            continue
        out += _family_writes(share, stable, family, current, namespace, catalog, keeper, shaped)
    return out


def _family_writes(share: Share, stable: str, family: str, current: Sequence[Obj],
                   namespace: str, catalog: Catalog, keeper: Keeper,
                   shaped: ShapedEndpoints | None) -> list[SliceWrite]:
    """One family's writes. Like the EndpointSlice controller's reconciler, an endpoint stays
    in the slice that has it, new ones fill slices with room before a new slice is made, and
    a slice left empty is deleted, so one pod's change is one write."""
    endpoints = share.by_family[family]
    if not endpoints:
        return [_delete(sl, stable, "no GPUCluster pod to share") for sl in current]
    wanted = {_key(e): e for e in endpoints}
    placed: dict[str, list[Obj]] = {}
    for sl in current:
        placed[o.name(sl)] = [wanted.pop(_key(e)) for e in sl.get("endpoints") or []
                              if _key(e) in wanted]
    rest = list(wanted.values())  # in share order: by node
    for name in sorted(placed):
        room = MAX_ENDPOINTS - len(placed[name])
        if room > 0 and rest:
            placed[name] += rest[:room]
            rest = rest[room:]
    taken = set(placed)
    new: dict[str, list[Obj]] = {}
    while rest:
        name = _free_name(slice_prefix(stable, family), taken)
        taken.add(name)
        new[name], rest = rest[:MAX_ENDPOINTS], rest[MAX_ENDPOINTS:]
    out = []
    for sl in current:
        name = o.name(sl)
        if not placed[name]:
            out.append(_delete(sl, stable, "its endpoints left"))
            continue
        body = _slice_body(share, name, family, placed[name], namespace, catalog, keeper)
        if not _same_slice(sl, body, shaped):
            out.append(SliceWrite(UPDATE, name, stable,
                                  f"the {share.component.stack} pods of "
                                  f"Service/{share.component.service} changed", body,
                                  o.resource_version(sl)))
    for name, eps in new.items():
        out.append(SliceWrite(CREATE, name, stable,
                              f"Service/{stable} belongs to {share.owner} and selects only its "
                              f"pods; {len(eps)} {share.component.stack} {family} endpoints "
                              "join it",
                              _slice_body(share, name, family, eps, namespace, catalog,
                                          keeper)))
    return out


def shared_slices(slices: Iterable[Mapping[str, Any]], common: Common) -> dict[str, list[Obj]]:
    """The tool's slices by the stable name they carry."""
    ours: dict[str, list[Obj]] = {}
    for sl in slices:
        if is_shared_slice(sl, common):
            ours.setdefault(o.labels(sl).get(SERVICE_NAME_LABEL, ""), []).append(dict(sl))
    return ours


def all_writes(snapshot: Snapshot, catalog: Catalog, slices: Iterable[Mapping[str, Any]],
               keeper: Keeper, *, enabled: bool, shaped: ShapedEndpoints | None = None
               ) -> tuple[list[Share], list[SliceWrite]]:
    """Every shared name and every write its slices need; with `enabled` False (the alias
    phase is not completed) every shared slice goes. A caller that reads the same slices
    again passes its `shaped`, so each slice version is shaped once."""
    all_slices = list(slices)
    found = shares(snapshot, catalog, all_slices, shaped) if enabled else []
    ours = shared_slices(all_slices, catalog.common)
    by_name = {s.name: s for s in found}
    writes = []
    for stable in sorted(set(by_name) | set(ours)):
        writes += slice_writes(by_name.get(stable), stable, ours.get(stable, []),
                               snapshot.namespace, catalog, keeper, shaped)
    return found, writes
