"""Pure pieces of the endpoints controller: the subsets, after kubernetes/pkg/controller/
endpoint (endpoints_controller.go), pkg/api/v1/endpoints (RepackSubsets) and
k8s.io/endpointslice/util (ShouldPodBeInEndpoints, ShouldSetHostname). No store, no I/O; the
object around them (labels, annotations, when to write) is `endpointsobject`.

- `member`: one pod's part in a Service's Endpoints (`ShouldPodBeInEndpoints` with
  includeTerminating = publishNotReadyAddresses, `podToEndpointAddressForService`,
  `podutil.FindPort` through the EndpointSlice controller's `endpoint_ports`,
  `addEndpointSubset`: ready, or every address with publishNotReadyAddresses, in `addresses`).
- `Book`: a Service's members kept sorted per (port set, ready) group, updated a pod at a time;
  `repack` gives `RepackSubsets`' layout from it (ports grouped by the exact set of addresses
  that offer them, addresses sorted by IP then uid; a headless Service without ports gets one
  port-less subset). Upstream orders ports and subsets by an md5 of their Go dump; here they
  are ordered by their JSON text (a stable order, not upstream's).
- `truncation` / `truncate_subsets`: `truncateEndpoints` (at most `MAX_CAPACITY` addresses,
  ready ones first, each subset its proportional share, rounded up).
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from dcgm_sim.controllers import endpointslices as E
from dcgm_sim.controllers import pods as P

Obj = dict[str, Any]
Entry = tuple[str, str, str]  # (ip, uid, pod name): LessEndpointAddress order
Group = tuple[tuple[str, ...], bool]  # (port keys, ready)

MAX_CAPACITY = 1000  # maxCapacity
NO_PORTS = ""  # RepackSubsets' sentinel port: a headless Service without ports


def service_ip_set(svc: Mapping[str, Any]) -> bool:
    """`helper.IsServiceIPSet`."""
    return (svc.get("spec") or {}).get("clusterIP") not in (None, "", "None")


def should_pod_be_in_endpoints(pod: Mapping[str, Any], include_terminating: bool) -> bool:
    """`ShouldPodBeInEndpoints`: not terminal, has an IP, not being deleted (unless asked)."""
    if P.is_pod_terminal(pod) or not P.pod_ip(pod):
        return False
    return include_terminating or not P.is_deleting(pod)


def _pod_ips(pod: Mapping[str, Any]) -> list[str]:
    status = pod.get("status") or {}
    ips = [str(i.get("ip")) for i in status.get("podIPs") or [] if i.get("ip")]
    return ips or ([str(status["podIP"])] if status.get("podIP") else [])


def pod_address(svc: Mapping[str, Any], pod: Mapping[str, Any]) -> Obj | None:
    """`podToEndpointAddressForService` (the pod IP of the Service's first IP family) plus the
    hostname `ShouldSetHostname` allows; None when the pod has no IP of that family."""
    spec = svc.get("spec") or {}
    ips = _pod_ips(pod)
    if spec.get("ipFamilies"):
        v6 = spec["ipFamilies"][0] == "IPv6"
    elif spec.get("clusterIP") not in (None, "", "None"):
        v6 = ":" in str(spec["clusterIP"])
    else:
        v6 = bool(ips) and ":" in ips[0]
    ip = next((i for i in ips if (":" in i) == v6), None)
    if ip is None:
        return None
    meta = pod["metadata"]
    address: Obj = {"ip": ip, "nodeName": P.node_name(pod),
                    "targetRef": {"kind": "Pod", "namespace": meta["namespace"],
                                  "name": meta["name"], "uid": meta["uid"]}}
    pod_spec = pod.get("spec") or {}
    if (pod_spec.get("hostname") and pod_spec.get("subdomain") == svc["metadata"]["name"]
            and meta["namespace"] == svc["metadata"]["namespace"]):
        address["hostname"] = pod_spec["hostname"]
    return address


def port_key(port: Mapping[str, Any]) -> str:
    return P.canonical_json(port)


def endpoint_port_keys(svc: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[str, ...]:
    """`endpointPortFromServicePort` for each Service port the pod resolves (core
    EndpointPort: an empty name is left out); (NO_PORTS,) for a headless Service without
    ports, () when nothing resolves."""
    spec = svc.get("spec") or {}
    if not spec.get("ports"):
        return (NO_PORTS,) if spec.get("clusterIP") == "None" else ()
    ports = E.endpoint_ports(svc, pod)
    return tuple(port_key({k: v for k, v in p.items() if not (k == "name" and v == "")})
                 for p in ports)


@dataclass(frozen=True)
class Member:
    """One pod's part in a Service's Endpoints."""

    entry: Entry
    address: Obj
    ready: bool
    ports: tuple[str, ...]

    @property
    def group(self) -> Group:
        return (self.ports, self.ready)


def member(svc: Mapping[str, Any], pod: Mapping[str, Any] | None) -> Member | None:
    """The pod's address, readiness and ports for the Service, None when it has none."""
    if pod is None:
        return None
    publish = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
    if not should_pod_be_in_endpoints(pod, publish):
        return None
    address = pod_address(svc, pod)
    ports = endpoint_port_keys(svc, pod)
    if address is None or not ports:
        return None
    entry = (address["ip"], address["targetRef"]["uid"], pod["metadata"]["name"])
    return Member(entry, address, publish or P.is_pod_ready(pod), ports)


@dataclass(frozen=True)
class Packed:
    """One repacked subset before it is written out: its ports and sorted address runs."""

    ports: tuple[str, ...]
    ready: tuple[list[Entry], ...]
    not_ready: tuple[list[Entry], ...]

    @property
    def counts(self) -> tuple[int, int]:
        return sum(map(len, self.ready)), sum(map(len, self.not_ready))


class Book:
    """A Service's members by pod name, and per group a list of entries kept sorted."""

    def __init__(self, members: Iterable[tuple[str, Member | None]] = ()) -> None:
        self.members: dict[str, Member] = {}
        self._groups: dict[Group, list[Entry]] = {}
        for name, m in members:
            if m is not None:
                self.members[name] = m
                self._groups.setdefault(m.group, []).append(m.entry)
        for run in self._groups.values():
            run.sort()

    def put(self, name: str, new: Member | None) -> None:
        """Record the pod's current member (None: it has none)."""
        old = self.members.pop(name, None)
        if old is not None:
            run = self._groups[old.group]
            del run[bisect.bisect_left(run, old.entry)]
            if not run:
                del self._groups[old.group]
        if new is not None:
            self.members[name] = new
            bisect.insort(self._groups.setdefault(new.group, []), new.entry)

    def repack(self) -> list[Packed]:
        """`RepackSubsets`: ports offered by exactly the same addresses share a subset."""
        signatures = {ports for ports, _ in self._groups}
        offering: dict[str, set[tuple[str, ...]]] = {}
        for sig in signatures:
            for port in sig:
                offering.setdefault(port, set()).add(sig)
        shared: dict[frozenset[tuple[str, ...]], list[str]] = {}
        for port, offered_by in offering.items():
            shared.setdefault(frozenset(offered_by), []).append(port)
        out = []
        for sigs, ports in shared.items():
            ordered = tuple(sorted(p for p in ports if p != NO_PORTS))
            runs = sorted(sigs)
            out.append(Packed(ordered,
                              tuple(self._groups[(s, True)] for s in runs if (s, True) in
                                    self._groups),
                              tuple(self._groups[(s, False)] for s in runs if (s, False) in
                                    self._groups)))
        return sorted(out, key=lambda p: (p.ports, _first(p)))

    def subsets(self, packed: Sequence[Packed],
                plan: Sequence[tuple[int, int]] | None) -> list[Obj]:
        """The subsets as written: `plan` (from `truncation`) says how many of each to keep."""
        out = []
        for i, p in enumerate(packed):
            keep = plan[i] if plan is not None else p.counts
            sub: Obj = {}
            ready = self._addresses(p.ready, keep[0])
            not_ready = self._addresses(p.not_ready, keep[1])
            if ready:
                sub["addresses"] = ready
            if not_ready:
                sub["notReadyAddresses"] = not_ready
            if p.ports:
                sub["ports"] = [json.loads(k) for k in p.ports]
            out.append(sub)
        return out

    def _addresses(self, runs: tuple[list[Entry], ...], n: int) -> list[Obj]:
        entries: Iterable[Entry] = runs[0][:n] if len(runs) == 1 else islice(
            heapq.merge(*runs), n)
        return [self.members[e[2]].address for e in entries]


def _first(p: Packed) -> Entry:
    heads = [run[0] for run in (*p.ready, *p.not_ready) if run]
    return min(heads) if heads else ("", "", "")


def truncation(counts: Sequence[tuple[int, int]]) -> list[tuple[int, int]] | None:
    """`truncateEndpoints`: how many (ready, not-ready) addresses each subset keeps, or None
    when all fit. Over capacity, ready addresses are kept first: the not-ready ones share
    what room is left, or, with more than `MAX_CAPACITY` ready, go and the ready ones are cut;
    each subset gets its proportional share rounded up, the last ones what remains."""
    total_ready = sum(r for r, _ in counts)
    total_not_ready = sum(n for _, n in counts)
    if total_ready + total_not_ready <= MAX_CAPACITY:
        return None
    cut_ready = total_ready > MAX_CAPACITY
    room, total = ((MAX_CAPACITY, total_ready) if cut_ready
                   else (MAX_CAPACITY - total_ready, total_not_ready))
    left = room
    plan = []
    for ready, not_ready in counts:
        share = min(math.ceil((float(ready if cut_ready else not_ready) / total) * room), left)
        if cut_ready:
            kept = min(ready, share)
            plan.append((kept, 0))
        else:
            kept = min(not_ready, share)
            plan.append((ready, kept))
        left -= kept
    return plan


def truncate_subsets(subsets: Sequence[Mapping[str, Any]]) -> tuple[list[Obj], bool]:
    """`truncateEndpoints` on written-out subsets: (the subsets, whether any were cut)."""
    plan = truncation([(len(s.get("addresses") or []), len(s.get("notReadyAddresses") or []))
                       for s in subsets])
    if plan is None:
        return [dict(s) for s in subsets], False
    out = []
    for s, (ready, not_ready) in zip(subsets, plan, strict=True):
        sub = {k: v for k, v in s.items() if k not in ("addresses", "notReadyAddresses")}
        if ready:
            sub["addresses"] = list(s.get("addresses") or [])[:ready]
        if not_ready:
            sub["notReadyAddresses"] = list(s.get("notReadyAddresses") or [])[:not_ready]
        out.append(sub)
    return out, True
