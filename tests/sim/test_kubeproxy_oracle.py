"""The kube-proxy oracle (tests/helpers/kubeproxy.py) on plain objects: each rule it takes
from kubernetes/kubernetes pkg/proxy (which slices are merged, port matching by name and
protocol, dedup of one IP:port, the terminating fallback, internalTrafficPolicy Local, the
Services and slices kube-proxy never lists), and the API view against a simulated cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.model import kinds
from tests.helpers.kubeproxy import (
    HEADLESS,
    IPV6,
    SERVICE_PROXY_NAME,
    ApiView,
    Endpoint,
    RoutedEndpoints,
    routes,
    routes_by_port,
)

Obj = dict[str, Any]
NS = "gpu-operator"


def _service(name: str = "svc", ports: list[Obj] | None = None, *, local: bool = False,
             labels: dict[str, str] | None = None, **spec: Any) -> Obj:
    body: Obj = {"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                 "ipFamilies": ["IPv4"], "ports": ports if ports is not None else [
                     {"name": "metrics", "port": 9400, "protocol": "TCP"}]}
    if local:
        body["internalTrafficPolicy"] = "Local"
    body.update(spec)
    return {"metadata": {"name": name, "namespace": NS, "labels": labels or {}}, "spec": body}


def _ep(ip: str, node: str, pod: str | None = None, **conditions: bool | None) -> Obj:
    ep: Obj = {"addresses": [ip], "nodeName": node,
               "targetRef": {"kind": "Pod", "name": pod or f"pod-{node}", "namespace": NS},
               "conditions": {k: v for k, v in conditions.items() if v is not None}}
    return ep


def _slice(name: str, endpoints: list[Obj], ports: list[Obj] | None = None, *,
           service: str = "svc", address_type: str = "IPv4",
           labels: dict[str, str] | None = None) -> Obj:
    return {"metadata": {"name": name, "namespace": NS,
                         "labels": {"kubernetes.io/service-name": service, **(labels or {})}},
            "addressType": address_type, "endpoints": endpoints,
            "ports": ports if ports is not None else [
                {"name": "metrics", "port": 9400, "protocol": "TCP"}]}


def _pods(svc: Obj, slices: list[Obj], node: str = "n1", port: str = "metrics") -> set[str]:
    r = routes(svc, slices, node, port)
    assert r.endpoints == r.possible, r
    return set(r.pods)


def test_every_slice_of_the_name_is_merged_and_no_other() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")]), _slice("b", [_ep("10.0.0.2", "n2")]),
              _slice("c", [_ep("10.0.0.3", "n3")], service="other"),
              {**_slice("d", [_ep("10.0.0.4", "n4")]), "metadata": {
                  "name": "d", "namespace": NS, "labels": {}}}]  # no service-name label
    assert _pods(_service(), slices) == {"pod-n1", "pod-n2"}
    other_ns = _slice("e", [_ep("10.0.0.5", "n5")])
    other_ns["metadata"]["namespace"] = "elsewhere"
    assert _pods(_service(), [other_ns]) == set()


def test_a_slice_port_of_another_name_contributes_nothing_to_the_service_port() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")]),
              _slice("b", [_ep("10.0.0.2", "n2")], [{"name": "gpu-metrics", "port": 9400,
                                                     "protocol": "TCP"}])]
    assert _pods(_service(), slices) == {"pod-n1"}
    r = routes(_service(), slices, "n1", "metrics")
    assert {(e.ip, e.port) for e in r.endpoints} == {("10.0.0.1", 9400)}
    assert routes(_service(), slices, "n1", "gpu-metrics").possible == frozenset()  # no such


def test_the_slice_port_number_is_used_not_the_service_port() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")], [{"name": "metrics", "port": 19400,
                                                     "protocol": "TCP"}])]
    assert routes(_service(), slices, "n1", "metrics").endpoints == {
        Endpoint("10.0.0.1", 19400, "pod-n1", "n1")}


def test_a_protocol_mismatch_contributes_nothing() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")], [{"name": "metrics", "port": 9400,
                                                     "protocol": "UDP"}]),
              _slice("b", [_ep("10.0.0.2", "n2")], [{"name": "metrics", "port": 9400}])]
    assert _pods(_service(), slices) == {"pod-n2"}  # a missing protocol is TCP
    udp = _service(ports=[{"name": "metrics", "port": 9400, "protocol": "UDP"}])
    assert _pods(udp, slices) == {"pod-n1"}


def test_an_unnamed_slice_port_is_the_unnamed_service_port_only() -> None:
    """The API server defaults a slice port's missing name to "" (pkg/apis/discovery/v1/
    defaults.go), so kube-proxy never meets the nil name its cache would skip."""
    slices = [_slice("a", [_ep("10.0.0.1", "n1")], [{"port": 9400, "protocol": "TCP"}]),
              _slice("b", [_ep("10.0.0.2", "n2")], [{"name": None, "port": 9400}])]
    assert _pods(_service(), slices) == set()
    unnamed = _service(ports=[{"port": 80, "targetPort": 9400}])
    assert _pods(unnamed, slices, port="") == {"pod-n1", "pod-n2"}


def test_a_port_without_a_number_and_an_endpoint_without_addresses_are_ignored() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")], [{"name": "metrics", "protocol": "TCP"}]),
              _slice("b", [{"addresses": [], "nodeName": "n2"}, _ep("10.0.0.3", "n3")])]
    assert _pods(_service(), slices) == {"pod-n3"}


def test_nil_conditions_count_as_ready_and_serving() -> None:
    slices = [_slice("a", [{"addresses": ["10.0.0.1"], "nodeName": "n1"},
                           _ep("10.0.0.2", "n2", ready=None),
                           _ep("10.0.0.3", "n3", ready=False)])]
    assert {e.ip for e in routes(_service(), slices, "n1", "metrics").endpoints} == {
        "10.0.0.1", "10.0.0.2"}


def test_a_non_terminating_copy_of_an_ip_port_wins_over_a_terminating_one() -> None:
    """IP reuse: a terminating pod's slice entry and a new pod's with the same IP:port. The
    non-terminating one replaces the other whatever order the slices are met in."""
    old = _ep("10.0.0.1", "n1", "old", ready=False, serving=True, terminating=True)
    new = _ep("10.0.0.1", "n1", "new", ready=True)
    for order in ([old, new], [new, old]):
        slices = [_slice(f"s{i}", [ep]) for i, ep in enumerate(order)]
        assert _pods(_service(), slices) == {"new"}


def test_disagreeing_non_terminating_copies_make_the_answer_order_dependent() -> None:
    """Two non-terminating copies of one IP:port: the last met wins and slices are met in Go
    map order, so kube-proxy may route to it or not; `endpoints` holds only what is certain."""
    slices = [_slice("a", [_ep("10.0.0.1", "n1", ready=True)]),
              _slice("b", [_ep("10.0.0.1", "n1", ready=False)]),
              _slice("c", [_ep("10.0.0.2", "n2")])]
    r = routes(_service(), slices, "n1", "metrics")
    assert r.pods == {"pod-n2"} and r.possible_pods == {"pod-n1", "pod-n2"}
    # Identical copies are one endpoint, whatever slice they come from.
    same = [_slice("a", [_ep("10.0.0.1", "n1")]), _slice("b", [_ep("10.0.0.1", "n1")])]
    assert len(routes(_service(), same, "n1", "metrics").possible) == 1


def test_all_terminating_copies_leave_the_first_met_either_way() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1", "x", ready=False, terminating=True)]),
              _slice("b", [_ep("10.0.0.1", "n1", "y", ready=False, serving=False,
                               terminating=True)])]
    r = routes(_service(), slices, "n1", "metrics")
    assert r.pods == set() and r.possible_pods == {"x"}


def test_terminating_endpoints_serve_only_when_none_is_ready() -> None:
    going = _ep("10.0.0.1", "n1", ready=False, serving=True, terminating=True)
    stopped = _ep("10.0.0.2", "n2", ready=False, serving=False, terminating=True)
    up = _ep("10.0.0.3", "n3")
    assert _pods(_service(), [_slice("a", [going, stopped, up])]) == {"pod-n3"}
    assert _pods(_service(), [_slice("a", [going, stopped])]) == {"pod-n1"}
    assert _pods(_service(), [_slice("a", [stopped])]) == set()


def test_internal_traffic_policy_local_stays_on_the_node() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1"), _ep("10.0.0.2", "n2"),
                           _ep("10.0.0.3", "n3", ready=False)])]
    svc = _service(local=True)
    assert _pods(svc, slices, "n1") == {"pod-n1"}
    assert _pods(svc, slices, "n2") == {"pod-n2"}
    assert _pods(svc, slices, "n3") == set()  # its own is not ready: no other node's
    assert _pods(svc, slices, "n4") == set()
    assert _pods(_service(), slices, "n3") == {"pod-n1", "pod-n2"}  # Cluster: any node


def test_local_falls_back_to_the_nodes_own_terminating_endpoint_only() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1", ready=False, serving=True, terminating=True),
                           _ep("10.0.0.2", "n2")])]
    assert _pods(_service(local=True), slices, "n1") == {"pod-n1"}
    assert _pods(_service(local=True), slices, "n2") == {"pod-n2"}


@pytest.mark.parametrize("svc", [
    _service(clusterIP="None", clusterIPs=["None"]),
    _service(clusterIP=""),
    _service(type="ExternalName", externalName="example.com"),
    _service(labels={SERVICE_PROXY_NAME: "other-proxy"}),
    _service(labels={SERVICE_PROXY_NAME: ""}),
    _service(labels={HEADLESS: ""}),
], ids=["headless", "no-cluster-ip", "external-name", "service-proxy-name",
        "empty-service-proxy-name", "headless-label"])
def test_services_kube_proxy_skips_route_nowhere(svc: Obj) -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")])]
    assert routes(svc, slices, "n1", "metrics").possible == frozenset()


def test_slices_with_the_informer_excluded_labels_are_not_seen() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")], labels={SERVICE_PROXY_NAME: "x"}),
              _slice("b", [_ep("10.0.0.2", "n2")], labels={HEADLESS: ""}),
              _slice("c", [_ep("10.0.0.3", "n3")])]
    assert _pods(_service(), slices) == {"pod-n3"}


def test_only_slices_of_the_proxiers_address_type_are_used() -> None:
    slices = [_slice("a", [_ep("10.0.0.1", "n1")]),
              _slice("b", [_ep("fd00::1", "n2")], address_type="IPv6"),
              _slice("c", [_ep("10.0.0.3", "n3")], address_type="FQDN"),
              _slice("d", [_ep("fd00::4", "n4")])]  # an IPv6 address in an IPv4 slice
    assert _pods(_service(), slices) == {"pod-n1"}
    assert routes(_service(), slices, "n1", "metrics", family=IPV6).possible == frozenset()
    dual = _service(ipFamilies=["IPv4", "IPv6"], clusterIPs=["10.96.0.10", "fd00:96::10"])
    assert routes(dual, slices, "n1", "metrics", family=IPV6).pods == {"pod-n2"}


def test_addresses_are_normalised_and_only_the_first_is_used() -> None:
    slices = [_slice("a", [{**_ep("010.000.000.001", "n1"), "addresses": [
        "010.000.000.001", "10.0.0.9"]}]), _slice("b", [_ep("10.0.0.1", "n1")])]
    r = routes(_service(), slices, "n1", "metrics")
    assert {e.ip for e in r.possible} == {"10.0.0.1"} and len(r.possible) == 1


def test_zone_hints_narrow_cluster_traffic_only_when_every_ready_endpoint_has_one() -> None:
    a = {**_ep("10.0.0.1", "n1"), "hints": {"forZones": [{"name": "z1"}]}}
    b = {**_ep("10.0.0.2", "n2"), "hints": {"forZones": [{"name": "z2"}]}}
    assert routes(_service(), [_slice("s", [a, b])], "n9", "metrics", zone="z1").pods == {
        "pod-n1"}
    bare = _ep("10.0.0.3", "n3")
    assert routes(_service(), [_slice("s", [a, b, bare])], "n9", "metrics",
                  zone="z1").pods == {"pod-n1", "pod-n2", "pod-n3"}


def test_routes_by_port_answers_each_port_on_its_own() -> None:
    svc = _service(ports=[{"name": "metrics", "port": 9400}, {"name": "debug", "port": 9401}])
    slices = [_slice("a", [_ep("10.0.0.1", "n1")])]
    got = routes_by_port(svc, slices, "n1")
    assert got["metrics"].pods == {"pod-n1"} and got["debug"].pods == set()
    assert routes_by_port(None, slices, "n1") == {}


def test_the_api_view_lists_what_the_informers_list_and_follows_commits() -> None:
    """Through the sim's API, with kube-proxy's label selector: a Service labelled for another
    proxy is not listed; `RoutedEndpoints` sees the same from the store's commits."""
    with SimCluster(nodes=2, stack="gpucluster", operator_reconcile_seconds=None,
                    time_scale=0.02) as sim:
        sim.wait_idle()
        follower = RoutedEndpoints(["nvidia-dcgm-dra"], NS)
        with ApiView(sim.kubeconfig) as view, follower.follow(sim.store):
            nodes = view.nodes()
            before = view.reach(NS, ["nvidia-dcgm-dra"])["nvidia-dcgm-dra"]
            assert set(before) == set(nodes) and len(nodes) == 2
            for node, ports in before.items():
                assert ports and all(r.pods and all(e.node == node for e in r.endpoints)
                                     for r in ports.values()), (node, ports)
            for name, extra in (("other-proxy", {SERVICE_PROXY_NAME: "x"}), ("mine", {})):
                sim.store.create(kinds.ENDPOINTSLICE, _slice(name, [], labels={
                    "endpointslice.kubernetes.io/managed-by": "test", **extra}))
            listed = {s["metadata"]["name"] for s in view.slices(NS)}
            assert "mine" in listed and "other-proxy" not in listed
            svc = copy.deepcopy(sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm-dra"))
            svc["metadata"].setdefault("labels", {})[SERVICE_PROXY_NAME] = "elsewhere"
            sim.store.update(kinds.SERVICE, svc)  # kube-proxy no longer lists it
            assert "nvidia-dcgm-dra" not in view.services(NS)
            after = view.reach(NS, ["nvidia-dcgm-dra"])["nvidia-dcgm-dra"]
            assert after == {node: {} for node in nodes}
        assert follower.lowest_routed == {"nvidia-dcgm-dra": 0}
        assert follower.lowest_nodes == {"nvidia-dcgm-dra": 0}
