"""Service admission: defaults, `clusterIP(s)` and `nodePort` allocation, and their immutability.

Mirrors the real server (`pkg/registry/core/service/storage`, `pkg/apis/core/validation`):
cluster IPs come from the service CIDR of each of the Service's IP families (10.96.0.0/12 and
fd00:10:96::/112 here, `network.py`; the first address of each is the `kubernetes`
Service's), after `ipfamilies` has defaulted the policy and families against the cluster's;
node ports come from 30000-32767; an update that omits `clusterIP`/`nodePort` keeps the
allocated values (`patchAllocatedValues`), one that changes them is 422 ("may not change once
set"; a secondary cluster IP may be added or released); an explicit value already held by
another Service is 422 ("provided ... is already allocated"). Addresses are plain strings:
nothing here touches a network. Pure.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim import ipfamilies
from dcgm_sim.network import DEFAULT as DEFAULT_NETWORK
from dcgm_sim.network import Network, family_of
from dcgm_sim.statuses import FieldErrors

Obj = dict[str, Any]

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")  # the IPv4 one (network.SERVICE_CIDRS)
NODE_PORT_RANGE = (30000, 32767)
_FIRST_DYNAMIC_IP = 10  # 10.96.0.1 is the kubernetes Service, low addresses left for static use


@dataclass(frozen=True)
class Allocated:
    """Addresses and ports held by the other Services of the cluster."""

    cluster_ips: frozenset[str] = frozenset()
    node_ports: frozenset[int] = frozenset()
    network: Network = DEFAULT_NETWORK  # the families and service CIDRs to allocate from


def allocated_by(services: list[Obj], *, excluding_uid: str = "",
                 network: Network = DEFAULT_NETWORK) -> Allocated:
    ips: set[str] = set()
    ports: set[int] = set()
    for svc in services:
        if excluding_uid and svc["metadata"].get("uid") == excluding_uid:
            continue
        spec = svc.get("spec") or {}
        ips.update(ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]
                   if ip and ip != "None")
        ports.update(int(p["nodePort"]) for p in spec.get("ports") or [] if p.get("nodePort"))
        if spec.get("healthCheckNodePort"):
            ports.add(int(spec["healthCheckNodePort"]))
    return Allocated(frozenset(ips), frozenset(ports), network)


def _needs_cluster_ip(spec: Obj) -> bool:
    return spec.get("type") != "ExternalName"


def _needs_node_port(spec: Obj) -> bool:
    return spec.get("type") in ("NodePort", "LoadBalancer")


def _needs_hc_node_port(spec: Obj) -> bool:
    return spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"


def apply_defaults(spec: Obj) -> None:
    """`SetDefaults_Service` (in place)."""
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["sessionAffinity"] == "ClientIP":
        spec.setdefault("sessionAffinityConfig", {"clientIP": {"timeoutSeconds": 10800}})
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if _needs_node_port(spec):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        if "targetPort" not in port and "port" in port:
            port["targetPort"] = port["port"]


@dataclass
class _Pool:
    taken_ips: set[str]
    taken_ports: set[int]
    network: Network = DEFAULT_NETWORK
    errors: FieldErrors = field(default_factory=FieldErrors)

    def next_ip(self, family: str) -> str:
        cidr = self.network.service_cidr(family)
        base = int(cidr.network_address)
        for offset in range(_FIRST_DYNAMIC_IP, cidr.num_addresses - 1):
            ip = str(ipaddress.ip_address(base + offset) if cidr.version == 6
                     else ipaddress.IPv4Address(base + offset))
            if ip not in self.taken_ips:
                self.taken_ips.add(ip)
                return ip
        raise RuntimeError("service CIDR exhausted")

    def next_port(self) -> int:
        for port in range(NODE_PORT_RANGE[0], NODE_PORT_RANGE[1] + 1):
            if port not in self.taken_ports:
                self.taken_ports.add(port)
                return port
        raise RuntimeError("node port range exhausted")

    def claim_ip(self, ip: str, path: str, ips: list[str]) -> None:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            self.errors.add("Invalid", path, "must be a valid IP address", ips)
            return
        cidr = self.network.service_cidr(family_of(ip))
        if addr not in cidr:
            self.errors.add("Invalid", path,
                            f"failed to allocate IP {ip}: the provided IP ({ip}) is not in the "
                            f"valid range. The range of valid IPs is {cidr}", ips)
        elif ip in self.taken_ips:
            self.errors.add("Invalid", path,
                            f"failed to allocate IP {ip}: provided IP is already allocated", ips)
        else:
            self.taken_ips.add(ip)

    def claim_port(self, port: int, path: str) -> None:
        low, high = NODE_PORT_RANGE
        if not low <= port <= high:
            self.errors.add("Invalid", path, "provided port is not in the valid range. The "
                            f"range of valid ports is {low}-{high}", port)
        elif port in self.taken_ports:
            self.errors.add("Invalid", path, "provided port is already allocated", port)
        else:
            self.taken_ports.add(port)


def _carry_allocated(spec: Obj, old: Obj) -> None:
    """`normalizeClusterIPs` + `patchAllocatedValues` for an update."""
    if old.get("clusterIPs") and not spec.get("clusterIPs") and (
            spec.get("clusterIP") == old.get("clusterIP")):
        spec["clusterIPs"] = list(old["clusterIPs"])
    if (old.get("clusterIP") != spec.get("clusterIP") and spec.get("clusterIP")
            and spec.get("clusterIPs") == old.get("clusterIPs")):
        spec["clusterIPs"] = [spec["clusterIP"]]
    if _needs_cluster_ip(old) and _needs_cluster_ip(spec):
        if not spec.get("clusterIP") and old.get("clusterIP"):
            spec["clusterIP"] = old["clusterIP"]
        if not spec.get("clusterIPs") and old.get("clusterIPs"):
            spec["clusterIPs"] = list(old["clusterIPs"])
        for f in ("ipFamilies", "ipFamilyPolicy"):
            if f not in spec and f in old:
                spec[f] = old[f]
    if _needs_node_port(old) and _needs_node_port(spec):
        used = {p.get("nodePort") for p in spec.get("ports") or [] if p.get("nodePort")}
        by_name = {p.get("name", ""): p.get("nodePort") for p in old.get("ports") or []}
        for port in spec.get("ports") or []:
            old_port = by_name.get(port.get("name", ""))
            if not port.get("nodePort") and old_port and old_port not in used:
                port["nodePort"] = old_port
    elif _needs_node_port(old):
        # Leaving NodePort/LoadBalancer: node ports carried over unchanged are released.
        olds = {p.get("nodePort") for p in old.get("ports") or []}
        for port in spec.get("ports") or []:
            if port.get("nodePort") in olds:
                port.pop("nodePort")
    if _needs_hc_node_port(old) and _needs_hc_node_port(spec):
        spec.setdefault("healthCheckNodePort", old.get("healthCheckNodePort"))
    elif _needs_hc_node_port(old) and spec.get("healthCheckNodePort") == old.get(
            "healthCheckNodePort"):
        spec.pop("healthCheckNodePort", None)


def _reserved(network: Network) -> set[str]:
    """The `kubernetes` Service's address in each service CIDR."""
    return {str(network.service_cidr(f).network_address + 1) for f in network.families}


def _keep_or_claim(spec: Obj, old_ips: list[str], families: list[str], pool: _Pool) -> None:
    """Claim the explicit cluster IPs an update did not already hold, then allocate one for
    each family that has none (`allocClusterIPs`)."""
    ips = list(spec.get("clusterIPs") or [])
    for ip in ips:
        if ip and ip not in old_ips:
            pool.claim_ip(ip, "spec.clusterIPs", ips)
    for family in families[len(ips):]:
        ips.append(pool.next_ip(family))
    if ips != (spec.get("clusterIPs") or []):
        spec["clusterIP"], spec["clusterIPs"] = ips[0], ips


def _cluster_ips(spec: Obj, old_spec: Obj, updating: bool, pool: _Pool) -> None:
    """Families first (`initIPFamilyFields`), then one cluster IP per family."""
    fams = ipfamilies.init_ip_families(spec, old_spec if updating else None, pool.network,
                                       pool.errors)
    ips = spec.get("clusterIPs") or []
    old_ips = list(old_spec.get("clusterIPs") or []) if _needs_cluster_ip(old_spec) else []
    if updating and old_ips and ips:
        for i in range(min(2, len(ips), len(old_ips))):
            if ips[i] != old_ips[i]:
                pool.errors.add("Invalid", f"spec.clusterIPs[{i}]", "may not change once set",
                                ips)
    if fams.policy is not None and not pool.errors.errors and (ips or [""])[0] != "None":
        _keep_or_claim(spec, old_ips if updating else [], fams.families, pool)
    if spec.get("clusterIP") != (spec.get("clusterIPs") or [None])[0]:
        pool.errors.add("Invalid", "spec.clusterIPs", "must match `clusterIP` when set",
                        spec.get("clusterIPs"))
    if fams.policy is not None:
        spec["ipFamilies"] = fams.families
        spec["ipFamilyPolicy"] = fams.policy


def admit_service(obj: Obj, old: Obj | None, allocated: Allocated) -> FieldErrors:
    """Default, allocate and validate a Service spec in place; returns the field errors."""
    spec = obj.setdefault("spec", {})
    apply_defaults(spec)
    network = allocated.network
    pool = _Pool(set(allocated.cluster_ips) | _reserved(network), set(allocated.node_ports),
                 network)
    old_spec = (old or {}).get("spec") or {}
    if old is not None:
        _carry_allocated(spec, old_spec)
    if spec.get("clusterIP") and not spec.get("clusterIPs"):
        spec["clusterIPs"] = [spec["clusterIP"]]
    if spec.get("clusterIPs") and not spec.get("clusterIP"):
        spec["clusterIP"] = spec["clusterIPs"][0]
    if _needs_cluster_ip(spec):
        _cluster_ips(spec, old_spec, old is not None, pool)
    old_ports = {p.get("nodePort") for p in old_spec.get("ports") or [] if p.get("nodePort")}
    for i, port in enumerate(spec.get("ports") or []):
        path = f"spec.ports[{i}].nodePort"
        if not _needs_node_port(spec):
            if port.get("nodePort"):
                pool.errors.add("Forbidden", path,
                                f"may not be used when `type` is '{spec.get('type')}'")
        elif not port.get("nodePort"):
            port["nodePort"] = pool.next_port()
        elif port["nodePort"] not in old_ports:
            pool.claim_port(int(port["nodePort"]), path)
    if _needs_hc_node_port(spec):
        if not spec.get("healthCheckNodePort"):
            spec["healthCheckNodePort"] = pool.next_port()
        elif spec["healthCheckNodePort"] != old_spec.get("healthCheckNodePort"):
            pool.claim_port(int(spec["healthCheckNodePort"]), "spec.healthCheckNodePort")
    _validate_ports(spec, pool.errors)
    _validate_load_balancer(spec, old_spec if old is not None else None, pool.errors)
    return pool.errors


_LB_ONLY = "may only be used when `type` is 'LoadBalancer'"


def _validate_load_balancer(spec: Obj, old: Obj | None, errors: FieldErrors) -> None:
    """The LoadBalancer-only fields, as upstream `ValidateService` and
    `validateLoadBalancerClassField` (`pkg/apis/core/validation/validation.go`) check them:
    source ranges, class and node-port allocation are Forbidden on any other type, each range
    must parse as a CIDR (spaces trimmed, `GetLoadBalancerSourceRanges`), and a LoadBalancer's
    class may not change once set."""
    is_lb = spec.get("type") == "LoadBalancer"
    ranges = spec.get("loadBalancerSourceRanges") or []
    if ranges:
        path = "spec.LoadBalancerSourceRanges"  # sic: upstream's path has the capital L
        if not is_lb:
            errors.add("Forbidden", path, _LB_ONLY)
        try:
            for cidr in ranges:
                ipaddress.ip_network(str(cidr).strip(), strict=False)
                if "/" not in str(cidr):
                    raise ValueError(cidr)
        except ValueError:
            errors.add("Invalid", path, "must be a list of IP ranges. For example, "
                       "10.240.0.0/24,10.250.0.0/24 ", " ".join(map(str, ranges)))
    if spec.get("allocateLoadBalancerNodePorts") is not None and not is_lb:
        errors.add("Forbidden", "spec.allocateLoadBalancerNodePorts", _LB_ONLY)
    cls = spec.get("loadBalancerClass")
    if cls is not None and not is_lb:
        errors.add("Forbidden", "spec.loadBalancerClass", _LB_ONLY)
    if (old is not None and is_lb and old.get("type") == "LoadBalancer"
            and old.get("loadBalancerClass") != cls):
        errors.add("Invalid", "spec.loadBalancerClass", "may not change once set", cls)


def _validate_ports(spec: Obj, errors: FieldErrors) -> None:
    ports = spec.get("ports") or []
    if not ports and spec.get("type") != "ExternalName" and spec.get("clusterIP") != "None":
        errors.add("Required", "spec.ports")
    seen: set[tuple[Any, Any]] = set()
    names: set[str] = set()
    for i, port in enumerate(ports):
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            errors.add("Invalid", f"spec.ports[{i}].port",
                       "must be between 1 and 65535, inclusive", number)
        if port.get("protocol") not in ("TCP", "UDP", "SCTP"):
            errors.add("NotSupported", f"spec.ports[{i}].protocol",
                       'supported values: "SCTP", "TCP", "UDP"', port.get("protocol"))
        if len(ports) > 1 and not port.get("name"):
            errors.add("Required", f"spec.ports[{i}].name")
        if port.get("name") in names:
            errors.add("Duplicate", f"spec.ports[{i}].name", value=port.get("name"))
        names.add(port.get("name", ""))
        if (number, port.get("protocol")) in seen:
            errors.add("Duplicate", f"spec.ports[{i}]",
                       value={"port": number, "protocol": port.get("protocol")})
        seen.add((number, port.get("protocol")))
