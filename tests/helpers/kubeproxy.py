"""What kube-proxy routes a Service's cluster traffic to, node by node: a test oracle.

Reading back the EndpointSlices a tool wrote proves only that it wrote them. A consumer of a
stable name reaches what each node's kube-proxy programs for the Service's cluster IP, and that
is decided by rules the writer of a slice does not control: which slices kube-proxy lists at all,
how it merges the slices of one name, which slice ports belong to which Service port, which copy
of an endpoint listed twice wins, and which endpoints a node may use under its traffic policy.
This module computes that answer from the objects as the API returns them, after upstream
kubernetes/kubernetes (the 1.33-1.34 sources; older releases differ where noted):

* cmd/kube-proxy/app/server.go: the Service and EndpointSlice informers list with the label
  selector `!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless`; an
  object carrying either label (any value, even empty) is never seen (`INFORMER_SELECTOR`).
* pkg/proxy/servicechangetracker.go, pkg/proxy/util/utils.go (`ShouldSkipService`,
  `GetClusterIPByFamily`): a Service with `clusterIP` None or empty (headless), of type
  ExternalName, or without a cluster IP of the proxier's IP family gets no rules. Its ports are
  keyed by (name, protocol).
* pkg/proxy/endpointschangetracker.go: a slice whose `addressType` is not the proxier's family
  (IPv4 or IPv6; never FQDN) is dropped; pkg/proxy/endpointslicecache.go keys slices by
  namespace and `kubernetes.io/service-name` (a slice without it is dropped).
* pkg/proxy/endpointslicecache.go, `endpointInfoByServicePort` / `addEndpoints`: every slice
  port becomes the ServicePortName (its name, its protocol) and contributes that slice's
  endpoints at its port number, so a slice port whose name or protocol differs from the Service
  port's contributes nothing to it; a port with a nil or zero number is ignored, and so is an
  endpoint without addresses; only `addresses[0]` is used (normalised as ParseIPSloppy does).
  A nil `ready` or `serving` condition counts as true, a nil `terminating` as false.
  Endpoints of one Service port are deduplicated by "IP:port": a later copy replaces an earlier
  one only when it is not terminating, and slices are met in Go map order. So a non-terminating
  copy always beats a terminating one, but which of several non-terminating copies wins (and,
  when all are terminating, which of those) is undefined (older releases kept the first copy
  met unless a later one was on this node). The oracle does not pick: `Routing` holds the
  endpoints routed in **every** order (`endpoints`) and those routed in **some** order
  (`possible`); they differ only when such copies disagree.
* pkg/proxy/topology.go, `CategorizeEndpoints` (and pkg/proxy/service.go for which list serves
  cluster-IP traffic: `internalTrafficPolicy: Local` uses the local list, Cluster the cluster
  list): Cluster traffic goes to the ready endpoints (narrowed by topology hints when every
  ready endpoint has one and one matches this node: node hints first, as with the
  PreferSameTrafficDistribution gate on, then zone hints), else, when none is ready anywhere,
  to the serving-and-terminating ones. Local traffic goes to
  the ready endpoints whose `nodeName` is this node, else to this node's serving-and-terminating
  ones, else nowhere: it never leaves the node.
* pkg/apis/discovery/v1/defaults.go: the API server defaults a slice port's missing name to ""
  and its missing protocol to TCP, so kube-proxy never meets the nil name the cache would
  ignore; the oracle applies the same defaults (the Service port's protocol defaults to TCP too),
  so an unnamed slice port belongs to the Service's unnamed port only.

Not modelled: the proxier's own data path (iptables/nftables/ipvs probabilities, session
affinity, conntrack), external traffic (NodePorts, load balancers, `externalTrafficPolicy`),
kube-proxy's sync delay (the answer is for informers that saw exactly the objects given),
the legacy v1 Endpoints (kube-proxy reads only EndpointSlices; slices the mirroring controller
would make from custom Endpoints are not synthesised).
The pod an endpoint names (`targetRef`) is carried for the tests' attribution; kube-proxy keeps
only the address.

`routes` is pure (a Service, every EndpointSlice, a node, a port name, an IP family);
`ApiView` lists the same objects through the official client with kube-proxy's selector, so
the answer is what a kube-proxy watching that API server would program; `RoutedEndpoints`
follows the store's commits to find the fewest endpoints a name was routed to during a change.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config

from dcgm_sim.store import Event, Store
from migrator.model import kinds

Obj = dict[str, Any]

SERVICE_NAME = "kubernetes.io/service-name"
SERVICE_PROXY_NAME = "service.kubernetes.io/service-proxy-name"
HEADLESS = "service.kubernetes.io/headless"
INFORMER_SELECTOR = f"!{SERVICE_PROXY_NAME},!{HEADLESS}"
IPV4, IPV6 = "IPv4", "IPv6"
MAX_ORDERS = 4096  # resolutions of undefined dedup tried before the oracle gives up


@dataclass(frozen=True, order=True)
class Endpoint:
    """One backend of a Service port as kube-proxy programs it, with the pod and node its
    slice entry names ("" when it names none)."""

    ip: str
    port: int
    pod: str
    node: str


@dataclass(frozen=True)
class Routing:
    """Where one node's kube-proxy sends one Service port's cluster-IP traffic."""

    endpoints: frozenset[Endpoint]  # in every order kube-proxy can meet the slices in
    possible: frozenset[Endpoint]  # in some order (a superset of `endpoints`)

    @property
    def pods(self) -> frozenset[str]:
        """The pods surely routed to."""
        return frozenset(e.pod for e in self.endpoints)

    @property
    def possible_pods(self) -> frozenset[str]:
        """The pods that may be routed to."""
        return frozenset(e.pod for e in self.possible)


NOWHERE = Routing(frozenset(), frozenset())


@dataclass(frozen=True)
class _Copy:
    """One slice entry of an endpoint for one Service port, with what kube-proxy keeps."""

    endpoint: Endpoint
    ready: bool
    serving: bool
    terminating: bool
    zones: frozenset[str]
    nodes: frozenset[str]


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def informer_sees(obj: Mapping[str, Any]) -> bool:
    """Whether kube-proxy's informers list this Service or EndpointSlice at all."""
    labels = _labels(obj)
    return SERVICE_PROXY_NAME not in labels and HEADLESS not in labels


def _is_ipv6(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).version == 6
    except ValueError:
        return ":" in address


def cluster_ip(service: Mapping[str, Any], family: str = IPV4) -> str:
    """`GetClusterIPByFamily`: the Service's cluster IP of this family, "" when none."""
    spec = service.get("spec") or {}
    families = spec.get("ipFamilies") or []
    if not families:
        ip = str(spec.get("clusterIP") or "")
        if ip in ("", "None") or _is_ipv6(ip) != (family == IPV6):
            return ""
        return ip
    ips = spec.get("clusterIPs") or []
    for idx, fam in enumerate(families):
        if fam == family and idx < len(ips):
            return str(ips[idx])
    return ""


def proxied(service: Mapping[str, Any], family: str = IPV4) -> bool:
    """Whether kube-proxy programs the Service at all: listed by the informer, not headless
    (`ShouldSkipService`), not ExternalName, with a cluster IP of the proxier's family."""
    spec = service.get("spec") or {}
    if not informer_sees(service) or spec.get("clusterIP") in (None, "", "None"):
        return False
    return spec.get("type") != "ExternalName" and cluster_ip(service, family) != ""


def service_ports(service: Mapping[str, Any]) -> dict[str, str]:
    """The Service's port names with their protocols (TCP by default)."""
    return {str(p.get("name") or ""): str(p.get("protocol") or "TCP")
            for p in (service.get("spec") or {}).get("ports") or []}


def _normalised(address: str) -> str:
    """`utilnet.ParseIPSloppy(addr).String()`: IPv4 may carry leading zeros."""
    try:
        if ":" not in address:
            return str(ipaddress.ip_address(".".join(str(int(o)) for o in address.split("."))))
        return str(ipaddress.ip_address(address))
    except ValueError:
        return address


def _names(hints: Any, key: str) -> frozenset[str]:
    return frozenset(str(h.get("name")) for h in (hints or {}).get(key) or [])


def _copies(endpoint_slice: Mapping[str, Any], port: int) -> Iterator[_Copy]:
    """`addEndpoints`: the slice's endpoints at this port number, as kube-proxy keeps them."""
    for ep in endpoint_slice.get("endpoints") or []:
        addresses = ep.get("addresses") or []
        if not addresses:
            continue
        cond = ep.get("conditions") or {}
        ref = ep.get("targetRef") or {}
        pod = str(ref.get("name") or "") if ref.get("kind", "Pod") == "Pod" else ""
        yield _Copy(Endpoint(_normalised(str(addresses[0])), port, pod,
                             str(ep.get("nodeName") or "")),
                    ready=cond.get("ready") is not False,
                    serving=cond.get("serving") is not False,
                    terminating=cond.get("terminating") is True,
                    zones=_names(ep.get("hints"), "forZones"),
                    nodes=_names(ep.get("hints"), "forNodes"))


def _slice_ports(endpoint_slice: Mapping[str, Any], name: str, protocol: str) -> list[int]:
    """The numbers of the slice's ports that are this ServicePortName, after the API server's
    defaulting (a missing name is "", a missing protocol TCP); nil or 0 numbers are ignored."""
    out = []
    for p in endpoint_slice.get("ports") or []:
        if (str(p.get("name") or ""), str(p.get("protocol") or "TCP")) != (name, protocol):
            continue
        if p.get("port"):
            out.append(int(p["port"]))
    return out


def slices_of(service: Mapping[str, Any], slices: Iterable[Mapping[str, Any]],
              family: str = IPV4) -> list[Mapping[str, Any]]:
    """The slices kube-proxy merges for this Service: listed by its informer, of the
    proxier's address type, in the Service's namespace and carrying its name."""
    meta = service.get("metadata") or {}
    out = []
    for sl in slices:
        sl_meta = sl.get("metadata") or {}
        if not informer_sees(sl) or sl.get("addressType") != family:
            continue
        if (sl_meta.get("namespace") or meta.get("namespace")) != meta.get("namespace"):
            continue
        if _labels(sl).get(SERVICE_NAME) and _labels(sl).get(SERVICE_NAME) == meta.get("name"):
            out.append(sl)
    return out


def _candidates(service: Mapping[str, Any], slices: Iterable[Mapping[str, Any]], port: str,
                family: str) -> list[list[_Copy]]:
    """Per "IP:port" of the Service port, the copies that can win `addEndpoints`' dedup: the
    non-terminating ones when there is one (a later one replaces any earlier), else every
    terminating one (the first met stays). Copies of the wrong IP family are dropped."""
    protocol = service_ports(service)[port]
    seen: dict[tuple[str, int], list[_Copy]] = {}
    for sl in slices_of(service, slices, family):
        for number in _slice_ports(sl, port, protocol):
            for c in _copies(sl, number):
                if _is_ipv6(c.endpoint.ip) != (family == IPV6):
                    continue
                same = seen.setdefault((c.endpoint.ip, c.endpoint.port), [])
                if c not in same:
                    same.append(c)
    out = []
    for copies in seen.values():
        live = [c for c in copies if not c.terminating]
        out.append(live or copies)
    return out


def _topology_filter(ready: Sequence[_Copy], node: str, zone: str) -> Callable[[_Copy], bool]:
    """`topologyModeFromHints` / `availableForTopology`: hints narrow Cluster traffic only when
    every ready endpoint has one and one matches this node (or its zone)."""
    if ready and all(c.nodes for c in ready) and any(node in c.nodes for c in ready):
        return lambda c: node in c.nodes
    if ready and all(c.zones for c in ready) and any(zone in c.zones for c in ready):
        return lambda c: zone in c.zones
    return lambda c: True


def categorize(chosen: Sequence[_Copy], node: str, local: bool, zone: str = "") -> set[Endpoint]:
    """`CategorizeEndpoints` for cluster-IP traffic from `node`: the local list under
    `internalTrafficPolicy: Local`, else the cluster list."""
    if local:
        mine = [c for c in chosen if c.endpoint.node == node]
        use = [c for c in mine if c.ready] or [c for c in mine if c.serving and c.terminating]
        return {c.endpoint for c in use}
    ready = [c for c in chosen if c.ready]
    near = _topology_filter(ready, node, zone)
    use = [c for c in ready if near(c)] or [c for c in chosen if c.serving and c.terminating]
    return {c.endpoint for c in use}


def routes(service: Mapping[str, Any] | None, slices: Iterable[Mapping[str, Any]], node: str,
           port: str, *, family: str = IPV4, zone: str = "") -> Routing:
    """Where `node`'s kube-proxy (of IP `family`, its Node in topology `zone`) sends cluster-IP
    traffic for the Service port named `port`, given every EndpointSlice it could list."""
    if service is None or not proxied(service, family) or port not in service_ports(service):
        return NOWHERE
    local = (service.get("spec") or {}).get("internalTrafficPolicy") == "Local"
    options = _candidates(service, list(slices), port, family)
    orders = 1
    for copies in options:
        orders *= len(copies)
    if orders > MAX_ORDERS:
        raise ValueError(f"{orders} ways to resolve duplicate endpoints: too many to try")
    every: set[Endpoint] | None = None
    some: set[Endpoint] = set()
    for chosen in itertools.product(*options):
        got = categorize(chosen, node, local, zone)
        every = got if every is None else every & got
        some |= got
    return Routing(frozenset(every or ()), frozenset(some))


def routes_by_port(service: Mapping[str, Any] | None, slices: Iterable[Mapping[str, Any]],
                   node: str, *, family: str = IPV4) -> dict[str, Routing]:
    """`routes` for every port of the Service ({} when it does not exist)."""
    if service is None:
        return {}
    listed = list(slices)
    return {p: routes(service, listed, node, p, family=family) for p in service_ports(service)}


class ApiView:
    """Services, EndpointSlices and Nodes read through the official client as kube-proxy's
    informers list them (its label selector applied by the API server)."""

    def __init__(self, kubeconfig: str) -> None:
        self._api = config.new_client_from_config(kubeconfig)
        self._core = client.CoreV1Api(self._api)
        self._discovery = client.DiscoveryV1Api(self._api)

    def close(self) -> None:
        self._api.close()

    def __enter__(self) -> ApiView:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @staticmethod
    def _json(response: Any) -> Any:
        return json.loads(response.data)

    def services(self, namespace: str) -> dict[str, Obj]:
        listed = self._json(self._core.list_namespaced_service(
            namespace, label_selector=INFORMER_SELECTOR, _preload_content=False))
        return {str(s["metadata"]["name"]): dict(s) for s in listed.get("items") or []}

    def slices(self, namespace: str) -> list[Obj]:
        listed = self._json(self._discovery.list_namespaced_endpoint_slice(
            namespace, label_selector=INFORMER_SELECTOR, _preload_content=False))
        return [dict(s) for s in listed.get("items") or []]

    def nodes(self) -> list[str]:
        listed = self._json(self._core.list_node(_preload_content=False))
        return [str(n["metadata"]["name"]) for n in listed.get("items") or []]

    def reach(self, namespace: str, names: Iterable[str],
              nodes: Iterable[str] | None = None) -> dict[str, dict[str, dict[str, Routing]]]:
        """Service name → node → port → where that node's kube-proxy sends the port's
        cluster-IP traffic, from one listing of the Services and one of the slices (every
        Node when `nodes` is not given; {} for a name kube-proxy has no Service of)."""
        slices = self.slices(namespace)
        services = self.services(namespace)
        clients = list(self.nodes() if nodes is None else nodes)
        return {name: {node: routes_by_port(services.get(name), slices, node)
                       for node in clients} for name in names}


class RoutedEndpoints:
    """For each of some Services, from the store's commits: the fewest endpoints kube-proxy
    routed its cluster traffic to (over every node, per port, the fewest port) and the fewest
    nodes hosting one, in any committed state since `seed` (the consumers' side of
    tests/helpers/readiness.py's ReadyEndpoints, which counts ready slice entries)."""

    def __init__(self, services: Iterable[str], namespace: str) -> None:
        self.names = tuple(services)
        self.namespace = namespace
        self._services: dict[str, Obj] = {}
        self._slices: dict[str, Obj] = {}
        self._nodes: set[str] = set()
        self.lowest_routed: dict[str, int] = {}
        self.lowest_nodes: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"lowest routed {self.lowest_routed}, lowest nodes routed to {self.lowest_nodes}"

    def seed(self, store: Store) -> None:
        """Start from the store as it is now (hold its lock to start at one commit exactly)."""
        self._nodes = {str(n["metadata"]["name"]) for n in store.list(kinds.NODE)[0]}
        for name in self.names:
            svc = store.find(kinds.SERVICE, self.namespace, name)
            if svc is not None:
                self._services[name] = svc
        for sl in store.list(kinds.ENDPOINTSLICE, self.namespace)[0]:
            self._slices[str(sl["metadata"]["name"])] = sl
        for name in self.names:
            self._note(name)

    def apply(self, event: Event) -> str | None:
        """Take one committed change in; returns the followed Service it concerns, if any."""
        obj, gone = event.object, event.type == "DELETED"
        meta = obj.get("metadata") or {}
        if event.resource.key == kinds.NODE.key:
            (self._nodes.discard if gone else self._nodes.add)(str(meta.get("name")))
            return None
        if meta.get("namespace") != self.namespace:
            return None
        if event.resource.key == kinds.SERVICE.key and meta.get("name") in self.names:
            name = str(meta["name"])
            if gone:
                self._services.pop(name, None)
            else:
                self._services[name] = obj
        elif event.resource.key == kinds.ENDPOINTSLICE.key:
            old = self._slices.pop(str(meta.get("name")), None)
            if not gone:
                self._slices[str(meta.get("name"))] = obj
            name = str(_labels(obj).get(SERVICE_NAME) or "")
            if old is not None and _labels(old).get(SERVICE_NAME) != name:
                self._note(str(_labels(old).get(SERVICE_NAME)))
            if name not in self.names:
                return None
        else:
            return None
        self._note(name)
        return name

    @contextmanager
    def follow(self, store: Store) -> Iterator[None]:
        """Seed, then apply every commit while the block runs (seeded and subscribed under the
        store's lock: no commit falls between)."""
        def record(event: Event) -> None:
            self.apply(event)

        with store.lock:
            self.seed(store)
            store.subscribe(record)
        try:
            yield
        finally:
            store.unsubscribe(record)

    def routed(self, name: str) -> tuple[int, int]:
        """Now: the endpoints the name's traffic surely goes to from some node (the fewest
        over its ports) and the nodes hosting them (0 and 0 without a Service)."""
        svc = self._services.get(name)
        ports = service_ports(svc) if svc is not None else {}
        if svc is None or not ports:
            return 0, 0
        slices = list(self._slices.values())
        counts = []
        for port in ports:
            reached: set[Endpoint] = set()
            for node in self._nodes:
                reached |= routes(svc, slices, node, port).endpoints
            counts.append((len(reached), len({e.node for e in reached})))
        return min(c[0] for c in counts), min(c[1] for c in counts)

    def _note(self, name: str) -> None:
        if name not in self.names:
            return
        routed, nodes = self.routed(name)
        self.lowest_routed[name] = min(self.lowest_routed.get(name, routed), routed)
        self.lowest_nodes[name] = min(self.lowest_nodes.get(name, nodes), nodes)
