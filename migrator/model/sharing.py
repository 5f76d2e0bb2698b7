"""Stable names shared across both stacks (docs/architecture.md), pure: the ClusterPolicy
operator reverts any edit of its Services, so the GPUCluster pods join them through the tool's own
EndpointSlices (per address family, owned by the guard's Lease); conflicts are only reported."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from migrator.model import aliasing
from migrator.model import objects as o
from migrator.model.objects import (
    CONTROLLER_NAME,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    rendered_by,
)
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Common, Component

Obj = dict[str, Any]

SHARED_FROM_ANNOTATION = "dcgm-migrate/shared-from"
MAX_ENDPOINTS = 100  # per slice: the EndpointSlice controller's --max-endpoints-per-slice
IPV4, IPV6 = "IPv4", "IPv6"
CREATE, UPDATE, DELETE = "create", "update", "delete"
# Service fields whose difference between the stacks' Services is reported, and their defaults.
COMPARED_SPEC_FIELDS = tuple(f for f in aliasing.COPIED_SPEC_FIELDS
                             if f not in ("ipFamilies", "ipFamilyPolicy"))
SPEC_DEFAULTS = {"type": "ClusterIP", "internalTrafficPolicy": "Cluster",
                 "sessionAffinity": "None", "publishNotReadyAddresses": False}


def _endpoint(ep: Mapping[str, Any], namespace: str) -> Obj:
    """The fields of a controller-made endpoint a shared slice carries, in a fixed shape."""
    ref = ep.get("targetRef") or {}
    cond = ep.get("conditions") or {}
    out: Obj = {"addresses": list(ep.get("addresses") or []),
                "conditions": {k: bool(cond[k]) for k in ("ready", "serving", "terminating")
                               if k in cond}}
    out.update({key: ep[key] for key in ("nodeName", "zone") if ep.get(key)})
    if ref:
        out["targetRef"] = {"kind": ref.get("kind", "Pod"), "name": ref.get("name"),
                            "namespace": ref.get("namespace") or namespace,
                            "uid": ref.get("uid")}
    return out


def _shaped(slice_: Mapping[str, Any], namespace: str) -> tuple[Obj, ...]:
    return tuple(ep if (shaped := _endpoint(ep, namespace)) == ep else shaped
                 for ep in slice_.get("endpoints") or [])


class ShapedEndpoints:
    """Each slice's endpoints shaped once per version (docs/performance.md: at 15,000 nodes this
    was most of a guard pass); one entry per uid, cleared when full. Do not mutate the result."""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._by_uid: dict[str, tuple[str, str, tuple[Obj, ...]]] = {}

    def of(self, slice_: Mapping[str, Any], namespace: str) -> tuple[Obj, ...]:
        uid, version = str(o.meta(slice_).get("uid") or ""), o.resource_version(slice_)
        if not uid or not version:
            return _shaped(slice_, namespace)
        hit = self._by_uid.get(uid)
        if hit is not None and hit[0] == version and hit[1] == namespace:
            return hit[2]
        if len(self._by_uid) >= self._limit:
            self._by_uid.clear()
        shaped = _shaped(slice_, namespace)
        self._by_uid[uid] = (version, namespace, shaped)
        return shaped


def _endpoints_of(slice_: Mapping[str, Any], namespace: str,
                  shaped: ShapedEndpoints | None = None) -> tuple[Obj, ...]:
    """`_endpoint` of every endpoint of the slice, through `shaped` where the caller keeps one."""
    return shaped.of(slice_, namespace) if shaped is not None else _shaped(slice_, namespace)


def _key(ep: Mapping[str, Any]) -> str:
    ref = ep.get("targetRef") or {}
    return str(ref.get("uid") or ref.get("name") or ",".join(ep.get("addresses") or []))


@dataclass(frozen=True)
class Keeper:
    """The object the shared slices belong to (their one ownerReference): the guard's Lease."""

    api_version: str
    kind: str
    name: str
    uid: str

    @staticmethod
    def of(obj: Mapping[str, Any]) -> Keeper:
        return Keeper(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""), o.name(obj),
                      str(o.meta(obj).get("uid") or ""))

    def reference(self) -> Obj:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name,
                "uid": self.uid, "controller": False}


@dataclass(frozen=True)
class SliceWrite:
    """One write to one shared EndpointSlice."""

    action: str  # create | update | delete
    name: str
    service: str  # the stable name it belongs to
    reason: str
    body: Obj = field(default_factory=dict)  # create / update: the whole slice
    resource_version: str = ""  # update / delete: the version it was decided on

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "endpointSlice": self.name, "service": self.service,
                "reason": self.reason,
                "endpoints": len(self.body.get("endpoints") or []) if self.body else 0}


@dataclass(frozen=True)
class Share:
    """One operator Service the pods of one GPUCluster component join."""

    service: Obj  # the operator's Service of the stable name
    component: Component  # the GPUCluster component whose pods join it
    owner: str  # `ClusterPolicy/<name>`
    ports: tuple[Obj, ...]  # the shared slices' ports
    # addressType → the GPUCluster endpoints of that family on nodes the operator's slices miss
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


def _ports(service: Mapping[str, Any], daemonset: Mapping[str, Any],
           comp: Component) -> tuple[list[Obj], list[str]]:
    """The operator Service's ports as the GPUCluster pods serve them, and conflicts: a
    `targetPort` no declared container port has is left out and reported."""
    declared = [p for c in o.template_containers(daemonset)[0] for p in c.get("ports") or []]
    out, conflicts = [], []
    for p in o.dig(service, "spec", "ports") or []:
        number = o.resolve_port(p, declared)  # a number no container declares is left out too
        if declared and not any(int(c.get("containerPort") or 0) == number for c in declared):
            number = None
        if number is None:
            conflicts.append(f"port {p.get('name') or p.get('port')} (targetPort "
                             f"{o.target_port(p)}) is not a container port of "
                             f"DaemonSet/{comp.daemonset}: its pods join without it")
            continue
        port: Obj = {"name": p.get("name") or "", "port": number,
                     "protocol": p.get("protocol") or "TCP"}
        if p.get("appProtocol"):
            port["appProtocol"] = p["appProtocol"]
        out.append(port)
    return out, conflicts


def _config_conflicts(service: Mapping[str, Any], source: Mapping[str, Any] | None) -> list[str]:
    """Settings the two stacks' Services disagree on (an omitted field read as defaulted); the
    stable name keeps its own."""
    if source is None:
        return []
    have, other = service.get("spec") or {}, source.get("spec") or {}
    pairs = {f: (have.get(f, SPEC_DEFAULTS.get(f)), other.get(f, SPEC_DEFAULTS.get(f)))
             for f in COMPARED_SPEC_FIELDS if f in have or f in other}
    return [f"{f}: {mine!r} here, {theirs!r} on Service/{o.name(source)} "
            "(this Service's setting applies to both stacks' pods)"
            for f, (mine, theirs) in pairs.items() if mine != theirs]


def families(service: Mapping[str, Any]) -> tuple[str, ...]:
    """The address families a Service serves (`spec.ipFamilies`; IPv4 for an older object)."""
    return tuple(o.dig(service, "spec", "ipFamilies") or (IPV4,))


def _address_type(slice_: Mapping[str, Any]) -> str:
    return str(slice_.get("addressType") or IPV4)


def shared_names(snapshot: Snapshot, catalog: Catalog) -> list[tuple[Component, Obj, str]]:
    """(GPUCluster component, operator Service, `ClusterPolicy/<name>`) for each stable name a
    ClusterPolicy renders (live, not handed over to a release) that a running component needs."""
    out = []
    for comp in catalog.components:
        if not comp.alias or comp.daemonset not in snapshot.daemonsets:
            continue
        svc = snapshot.services.get(comp.alias)
        if (svc is None or (owner := rendered_by(svc)) is None or o.terminating(svc)
                or catalog.common.tool_owned(svc) or catalog.managed_by_release(svc)):
            continue
        out.append((comp, dict(svc), owner))
    return out


def shares(snapshot: Snapshot, catalog: Catalog, slices: Iterable[Mapping[str, Any]],
           shaped: ShapedEndpoints | None = None) -> list[Share]:
    """Every `shared_names` Service, with the GPUCluster Service's endpoints of each family it
    serves on nodes no endpoint of the operator's own slices is on."""
    controller = _by_stable_name(slices, CONTROLLER_NAME)
    out = []
    for comp, svc, owner in shared_names(snapshot, catalog):
        covered = {str(e.get("nodeName") or "") for sl in controller.get(comp.alias or "", [])
                   for e in sl.get("endpoints") or []}
        source_slices = controller.get(comp.service, [])
        by_family: dict[str, tuple[Obj, ...]] = {}
        conflicts: list[str] = []
        for family in families(svc):
            of_family = [sl for sl in source_slices if _address_type(sl) == family]
            seen: dict[str, Obj] = {}
            for sl in of_family:
                for ep in _endpoints_of(sl, snapshot.namespace, shaped):
                    if ep.get("nodeName") and ep["nodeName"] not in covered:
                        seen.setdefault(_key(ep), ep)
            by_family[family] = tuple(e for _, e in sorted(
                seen.items(), key=lambda kv: (kv[1].get("nodeName", ""), kv[0])))
            if source_slices and not of_family:
                conflicts.append(f"Service/{comp.alias} serves {family}, but the "
                                 f"EndpointSlices of Service/{comp.service} list no {family} "
                                 f"address: the {comp.stack} pods join it without {family}")
        ports, port_conflicts = _ports(svc, snapshot.daemonsets[comp.daemonset], comp)
        conflicts += port_conflicts + _config_conflicts(svc, snapshot.services.get(comp.service))
        out.append(Share(svc, comp, owner, tuple(ports), by_family, tuple(conflicts)))
    return out


def _slice_body(share: Share, name: str, family: str, endpoints: Sequence[Obj], namespace: str,
                catalog: Catalog, keeper: Keeper) -> Obj:
    mb = catalog.common.managed_by
    meta = {"name": name, "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: share.name, MANAGED_BY_LABEL: mb.value,
                       mb.key: mb.value},
            "annotations": {SHARED_FROM_ANNOTATION: share.component.service},
            "ownerReferences": [keeper.reference()]}
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
            "addressType": family, "ports": [dict(p) for p in share.ports],
            "endpoints": [dict(e) for e in endpoints]}


def _same_slice(live: Mapping[str, Any], body: Mapping[str, Any],
                shaped: ShapedEndpoints | None) -> bool:
    def port(p: Mapping[str, Any]) -> tuple[Any, ...]:
        return (p.get("name") or "", p.get("port"), p.get("protocol") or "TCP",
                p.get("appProtocol"))

    lm, bm = o.meta(live), o.meta(body)
    return bool(all(o.labels(live).get(k) == v for k, v in (bm.get("labels") or {}).items())
                and o.annotations_of(live).get(SHARED_FROM_ANNOTATION)
                == bm["annotations"][SHARED_FROM_ANNOTATION]
                and [(r.get("kind"), r.get("name"), r.get("uid"))
                     for r in lm.get("ownerReferences") or []]
                == [(r["kind"], r["name"], r["uid"]) for r in bm["ownerReferences"]]
                and [port(p) for p in live.get("ports") or []]
                == [port(p) for p in body.get("ports") or []]
                and list(_endpoints_of(live, str(lm.get("namespace") or ""), shaped))
                == list(body.get("endpoints") or []))


def _delete(sl: Mapping[str, Any], stable: str, why: str) -> SliceWrite:
    return SliceWrite(DELETE, o.name(sl), stable, why, resource_version=o.resource_version(sl))


def slice_writes(share: Share | None, stable: str, existing: Sequence[Mapping[str, Any]],
                 namespace: str, catalog: Catalog, keeper: Keeper,
                 shaped: ShapedEndpoints | None = None) -> list[SliceWrite]:
    """The writes that make the shared slices of `stable` hold `share`'s endpoints, one slice
    set per family (`share` None, or a family no longer served: its slices go)."""
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
    """One family's writes. As the EndpointSlice controller does, an endpoint stays where it
    is, new ones fill slices with room first, and an emptied slice goes: one pod, one write."""
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
        room = max(0, MAX_ENDPOINTS - len(placed[name]))
        placed[name], rest = placed[name] + rest[:room], rest[room:]
    # `<name>-dcgm-migrate-<n>` for IPv4 (as before dual-stack), `...-ipv6-<n>` for IPv6.
    prefix = f"{stable}-dcgm-migrate-" + ("" if family == IPV4 else f"{family.lower()}-")
    i, new = 0, {}
    while rest:
        while (name := f"{prefix}{i}") in placed:
            i += 1
        new[name], rest, i = rest[:MAX_ENDPOINTS], rest[MAX_ENDPOINTS:], i + 1
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


def _by_stable_name(slices: Iterable[Mapping[str, Any]], managed_by: str,
                    keep: Callable[[Mapping[str, Any]], bool] | None = None
                    ) -> dict[str, list[Obj]]:
    """The slices of this managed-by value (that `keep` keeps) by the Service name they carry."""
    found: dict[str, list[Obj]] = {}
    for sl in slices:
        labels = o.labels(sl)
        if labels.get(MANAGED_BY_LABEL) == managed_by and (keep is None or keep(sl)):
            found.setdefault(labels.get(SERVICE_NAME_LABEL, ""), []).append(dict(sl))
    return found


def shared_slices(slices: Iterable[Mapping[str, Any]], common: Common) -> dict[str, list[Obj]]:
    """The tool's slices (its managed-by values on both labels) by the stable name they carry."""
    return _by_stable_name(slices, common.managed_by.value, common.tool_owned)


class Sharing(Enum):
    """What the alias phase's record allows the guard to share."""

    ON = "on"  # the phase completed: every name it shares
    KEEP = "keep"  # `apply` re-runs it (a stack change, drift): only the names shared already,
    # since the nodes they serve would lose the stable names for the length of the re-run
    OFF = "off"  # never completed, or rolled back (or being): every shared slice goes


def all_writes(snapshot: Snapshot, catalog: Catalog, slices: Iterable[Mapping[str, Any]],
               keeper: Keeper, *, mode: Sharing, shaped: ShapedEndpoints | None = None
               ) -> tuple[list[Share], list[SliceWrite]]:
    """Every shared name and every write its slices need, as `mode` allows."""
    all_slices = list(slices)
    ours = shared_slices(all_slices, catalog.common)
    found = [] if mode is Sharing.OFF else [
        s for s in shares(snapshot, catalog, all_slices, shaped)
        if mode is Sharing.ON or s.name in ours]
    by_name = {s.name: s for s in found}
    return found, [w for stable in sorted(set(by_name) | set(ours))
                   for w in slice_writes(by_name.get(stable), stable, ours.get(stable, []),
                                         snapshot.namespace, catalog, keeper, shaped)]
