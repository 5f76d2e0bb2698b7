"""What a kubelet writes into a pod's status — Pending on acceptance, Running with container
statuses and its pod IPs, the Ready condition — and the pod IPs it hands out: one from each of
the node's `spec.podCIDRs`, in their order (the first is the primary `podIP`; two on a
dual-stack cluster, as a CNI plugin gives them). Pure builders, shared by the simulated kubelet
(kubelet.py) and the seeding of a cluster whose pods already run (seed.py). Upstream: kubelet
`generateAPIPodStatus` (pkg/kubelet/kubelet_pods.go) and the Ready condition from
`GeneratePodReadyCondition` (pkg/kubelet/status/generate.go).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from dcgm_sim.network import DEFAULT as DEFAULT_NETWORK
from dcgm_sim.network import IPV6, Network, cidr_family

Obj = dict[str, Any]


def host_ip(node: Mapping[str, Any]) -> str:
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP" and addr.get("address"):
            return str(addr["address"])
    h = zlib.crc32(node["metadata"]["name"].encode())
    return f"172.{16 + (h >> 16) % 16}.{(h >> 8) % 256}.{1 + h % 254}"


def _parse_cidr(text: str) -> tuple[int, int]:
    """An IPv4 CIDR as (network, prefix length) ints; ValueError when it is not one."""
    address, slash, length = text.partition("/")
    octets = [int(part) for part in address.split(".")]
    prefix = int(length) if slash else 32
    if len(octets) != 4 or not all(0 <= x <= 255 for x in octets) or not 0 <= prefix <= 32:
        raise ValueError(f"not an IPv4 CIDR: {text!r}")
    value = (octets[0] << 24) | (octets[1] << 16) | (octets[2] << 8) | octets[3]
    mask = (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF
    return value & mask, prefix


def pod_cidr(node: Mapping[str, Any]) -> range:
    """The usable host addresses (as ints) of the node's podCIDR, as `IPv4Network.hosts()`
    gives them; a stable /24 from the node's name when it has none. Plain int arithmetic: the
    kubelet allocates one on every pod start, on a rollout's critical path."""
    cidr = (node.get("spec") or {}).get("podCIDR")
    network, prefix = 0, -1
    if cidr:
        with contextlib.suppress(ValueError):  # a malformed one: the name-derived /24 below
            network, prefix = _parse_cidr(str(cidr))
    if prefix < 0:
        h = zlib.crc32(node["metadata"]["name"].encode()) % 4096
        network, prefix = (10 << 24) | ((200 + h // 256) << 16) | ((h % 256) << 8), 24
    size = 1 << (32 - prefix)
    if prefix >= 31:
        return range(network, network + size)
    return range(network + 1, network + size - 1)


def _dotted(address: int) -> str:
    return f"{address >> 24}.{(address >> 16) & 255}.{(address >> 8) & 255}.{address & 255}"


def _cond(ctype: str, ok: bool, now: str, reason: str = "", message: str = "") -> Obj:
    cond: Obj = {"type": ctype, "status": "True" if ok else "False", "lastProbeTime": None,
                 "lastTransitionTime": now}
    if not ok and reason:
        cond["reason"] = reason
        if message:
            cond["message"] = message
    return cond


def _merge_conditions(old: list[Obj], new: list[Obj]) -> list[Obj]:
    """Keep `lastTransitionTime` of conditions whose status did not change."""
    prev = {c.get("type"): c for c in old}
    out = []
    for cond in new:
        before = prev.get(cond["type"])
        if before is not None and before.get("status") == cond["status"]:
            cond = dict(cond, lastTransitionTime=before.get("lastTransitionTime"))
        out.append(cond)
    return out


def _container_names(pod: Mapping[str, Any], key: str = "containers") -> list[str]:
    return [c.get("name", "") for c in (pod.get("spec") or {}).get(key) or []]


def _images(pod: Mapping[str, Any], key: str = "containers") -> dict[str, str]:
    return {c.get("name", ""): c.get("image", "") for c in (pod.get("spec") or {}).get(key) or []}


def _container_id(pod: Mapping[str, Any], name: str) -> str:
    meta = pod.get("metadata", {})
    ident = f"{meta.get('namespace')}/{meta.get('name')}/{name}"
    return "containerd://" + hashlib.sha256(ident.encode()).hexdigest()


def _readiness(pod: Mapping[str, Any], ready: bool, now: str) -> list[Obj]:
    """Ready and ContainersReady, which the kubelet always sets together (no readiness gates
    here), with the unready containers named when they are False."""
    unready = f"containers with unready status: [{' '.join(_container_names(pod))}]"
    return [_cond("Ready", ready, now, "ContainersNotReady", unready),
            _cond("ContainersReady", ready, now, "ContainersNotReady", unready)]


def _conditions(pod: Mapping[str, Any], now: str, *, sandbox: bool, ready: bool) -> list[Obj]:
    """The kubelet's five pod conditions: the sandbox is up (`sandbox`, and then the init
    containers are done), Ready/ContainersReady as `ready`, scheduled."""
    inits = _container_names(pod, "initContainers")
    return [_cond("PodReadyToStartContainers", sandbox, now),
            _cond("Initialized", sandbox or not inits, now, "ContainersNotInitialized",
                  f"containers with incomplete status: [{' '.join(inits)}]"),
            *_readiness(pod, ready, now),
            _cond("PodScheduled", True, now)]


def _host(node: Mapping[str, Any]) -> Obj:
    """`hostIP` and `hostIPs`: the node's InternalIPs, one per family, primary first."""
    ips = [str(a["address"]) for a in (node.get("status") or {}).get("addresses") or []
           if a.get("type") == "InternalIP" and a.get("address")]
    ips = ips[:1] + [ip for ip in ips[1:] if (":" in ip) != (":" in ips[0])][:1]
    return {"hostIP": host_ip(node), "hostIPs": [{"ip": i} for i in ips or [host_ip(node)]]}


def pending_status(pod: Mapping[str, Any], node: Mapping[str, Any], now: str) -> Obj:
    """What the kubelet reports when it accepts a pod: Pending, containers being created."""
    names = _container_names(pod)
    inits = _container_names(pod, "initContainers")
    images = _images(pod)
    status: Obj = {
        "phase": "Pending",
        "qosClass": (pod.get("status") or {}).get("qosClass", "BestEffort"),
        **_host(node),
        "startTime": now,
        "conditions": _merge_conditions((pod.get("status") or {}).get("conditions") or [],
                                        _conditions(pod, now, sandbox=False, ready=False)),
        "containerStatuses": [
            {"name": n, "image": images[n], "imageID": "", "ready": False, "restartCount": 0,
             "started": False, "state": {"waiting": {"reason": "ContainerCreating"}},
             "lastState": {}}
            for n in names
        ],
    }
    if inits:
        init_images = _images(pod, "initContainers")
        status["initContainerStatuses"] = [
            {"name": n, "image": init_images[n], "imageID": "", "ready": False,
             "restartCount": 0, "started": False,
             "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}}
            for n in inits
        ]
    return status


def running_status(
    pod: Mapping[str, Any], node: Mapping[str, Any], ip: str | Sequence[str], ready: bool,
    now: str
) -> Obj:
    """Running with `ip` (or several, primary first); Ready and ContainersReady as `ready`
    says."""
    ips = [ip] if isinstance(ip, str) else list(ip)
    old: Obj = dict(pod.get("status") or {})
    started = old.get("startTime") or now
    names = _container_names(pod)
    inits = _container_names(pod, "initContainers")
    images = _images(pod)
    status: Obj = {
        "phase": "Running",
        "qosClass": old.get("qosClass", "BestEffort"),
        **_host(node),
        "podIP": ips[0],
        "podIPs": [{"ip": i} for i in ips],
        "startTime": started,
        "conditions": _merge_conditions(old.get("conditions") or [],
                                        _conditions(pod, now, sandbox=True, ready=ready)),
        "containerStatuses": [
            {"name": n, "image": images[n], "imageID": f"{images[n]}@sha256:" + "0" * 64,
             "containerID": _container_id(pod, n), "ready": ready, "restartCount": 0,
             "started": True, "state": {"running": {"startedAt": now}}, "lastState": {}}
            for n in names
        ],
    }
    if inits:
        init_images = _images(pod, "initContainers")
        status["initContainerStatuses"] = [
            {"name": n, "image": init_images[n], "imageID": f"{init_images[n]}@sha256:" + "0" * 64,
             "containerID": _container_id(pod, n), "ready": True, "restartCount": 0,
             "started": False, "lastState": {},
             "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                      "startedAt": started, "finishedAt": now}}}
            for n in inits
        ]
    old_cs = {c["name"]: c for c in old.get("containerStatuses") or []}
    for cs in status["containerStatuses"]:
        before = old_cs.get(cs["name"])
        if before and "running" in (before.get("state") or {}):
            cs["state"] = before["state"]  # a readiness flip does not restart the container
    return status


def with_ready(pod: Mapping[str, Any], ready: bool, now: str) -> Obj:
    """The pod's status with Ready/ContainersReady (and containers' `ready`) set to `ready`."""
    status: Obj = dict(pod.get("status") or {})
    new = {c["type"]: c for c in _readiness(pod, ready, now)}
    conds = [new.get(c.get("type", ""), c) for c in status.get("conditions") or []]
    status["conditions"] = _merge_conditions(status.get("conditions") or [], conds)
    status["containerStatuses"] = [
        dict(cs, ready=ready) for cs in status.get("containerStatuses") or []
    ]
    return status


def node_pod_cidrs(node: Mapping[str, Any], network: Network = DEFAULT_NETWORK) -> list[str]:
    """The node's `spec.podCIDRs` (or its `podCIDR`); stable ones from its name when it has
    none (a node made without the node IPAM controller's work)."""
    spec = node.get("spec") or {}
    cidrs = [str(c) for c in spec.get("podCIDRs") or [] if c]
    if not cidrs and spec.get("podCIDR"):
        cidrs = [str(spec["podCIDR"])]
    return cidrs or network.fallback_pod_cidrs(node["metadata"]["name"])


class IPAllocator:
    """Per-node pod IPs from the node's podCIDRs, lowest free address first in each."""

    def __init__(self, network: Network = DEFAULT_NETWORK) -> None:
        self._used: dict[str, set[str]] = {}
        self.network = network

    def take(self, node: Mapping[str, Any]) -> str:
        """One address from the node's `podCIDR` (`pod_cidr`): the IPv4-only cluster's path."""
        return self._take_v4(node["metadata"]["name"], pod_cidr(node))

    def take_all(self, node: Mapping[str, Any]) -> list[str]:
        """One address per podCIDR of the node, primary first (an IPv4-only cluster: `take`,
        as it always was)."""
        if not self.network.dual and self.network.primary != IPV6:
            return [self.take(node)]
        name = node["metadata"]["name"]
        out = []
        for cidr in node_pod_cidrs(node, self.network):
            if cidr_family(cidr) == IPV6:
                out.append(self._take_v6(name, cidr))
            else:
                out.append(self._take_v4(name, pod_cidr({"metadata": node["metadata"],
                                                         "spec": {"podCIDR": cidr}})))
        return out

    def _take_v4(self, name: str, hosts: range) -> str:
        used = self._used.setdefault(name, set())
        for address in hosts:
            ip = _dotted(address)
            if address & 255 == 1 or ip in used:
                continue
            used.add(ip)
            return ip
        raise RuntimeError(f"node {name} has no free pod IP")

    def _take_v6(self, name: str, cidr: str) -> str:
        """The lowest free address past `::1` (the gateway's, as `.1` is in IPv4)."""
        net = ipaddress.IPv6Network(cidr, strict=False)
        used = self._used.setdefault(name, set())
        base = int(net.network_address)
        for offset in range(2, net.num_addresses):
            ip = str(ipaddress.IPv6Address(base + offset))
            if ip not in used:
                used.add(ip)
                return ip
        raise RuntimeError(f"node {name} has no free pod IP in {cidr}")

    def mark(self, node_name: str, ip: str) -> None:
        self._used.setdefault(node_name, set()).add(ip)

    def release(self, node_name: str, ip: str | None) -> None:
        if ip:
            self._used.get(node_name, set()).discard(ip)


# ---- the controller --------------------------------------------------------------------------
