"""The cluster's IP families: IPv4-only (the default), IPv6-only, or dual-stack IPv4-primary.

One setting, read by everything that hands out or reads addresses: Service allocation
(`allocation`, after `--service-cluster-ip-range`), the nodes' `spec.podCIDRs` (`seed`, after
the node IPAM controller's `--cluster-cidr`), the kubelet's pod IPs (one per podCIDR,
`podstatus`) and the EndpointSlice controller (one slice set per Service IP family). It lives
on the `Store` (`store.network`), as the apiserver's and controller-manager's flags would, so
every writer sees the same one. The IPv6 ranges are kind's defaults (`fd00:10:96::/112`,
`fd00:10:244::/56`); the IPv4 ones are kubeadm's.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass

IPV4, IPV6 = "IPv4", "IPv6"
SETTINGS: dict[str, tuple[str, ...]] = {"ipv4": (IPV4,), "ipv6": (IPV6,), "dual": (IPV4, IPV6)}

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
SERVICE_CIDRS: dict[str, IPNetwork] = {
    IPV4: ipaddress.ip_network("10.96.0.0/12"),
    IPV6: ipaddress.ip_network("fd00:10:96::/112"),
}


def family_of(ip: str) -> str:
    """`IPv4` or `IPv6` for an address; a plain text test, as `utilnet.IsIPv6String` reads it."""
    return IPV6 if ":" in ip else IPV4


def other_family(family: str) -> str:
    return IPV6 if family == IPV4 else IPV4


@dataclass(frozen=True)
class Network:
    """The cluster-wide family setting: `ipv4`, `ipv6` or `dual` (IPv4 primary)."""

    setting: str = "ipv4"

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise ValueError(f"unknown IP family setting {self.setting!r}: "
                             f"one of {', '.join(SETTINGS)}")

    @property
    def families(self) -> tuple[str, ...]:
        """The configured families, primary first (`--service-cluster-ip-range` order)."""
        return SETTINGS[self.setting]

    @property
    def primary(self) -> str:
        return self.families[0]

    @property
    def dual(self) -> bool:
        return len(self.families) == 2

    def service_cidr(self, family: str) -> IPNetwork:
        return SERVICE_CIDRS[family]

    def node_pod_cidrs(self, index: int) -> list[str]:
        """The podCIDRs the node IPAM controller gives the `index`-th node (0-based)."""
        return [pod_cidr_for(family, index) for family in self.families]

    def fallback_pod_cidrs(self, node_name: str) -> list[str]:
        """Stable podCIDRs from a node's name, for a node created without any."""
        h = zlib.crc32(node_name.encode()) % 4096
        return [f"10.{200 + h // 256}.{h % 256}.0/24" if family == IPV4
                else str(ipaddress.ip_network(f"fd00:10:245:{h:x}::/64"))
                for family in self.families]


DEFAULT = Network()


def pod_cidr_for(family: str, index: int) -> str:
    """The `index`-th node's podCIDR of `family`: a /24 of 10.128.0.0/9, a /64 of
    fd00:10:244::/48."""
    if family == IPV4:
        return f"10.{128 + index // 256}.{index % 256}.0/24"
    return str(ipaddress.ip_network(f"fd00:10:244:{index:x}::/64"))  # RFC 5952 text


def cidr_family(cidr: str) -> str:
    return family_of(cidr.partition("/")[0])
