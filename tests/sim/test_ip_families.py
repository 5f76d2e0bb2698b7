"""IPv6-only and dual-stack simulated clusters (`SimCluster(ip_family=...)`, `sim serve
--ip-family`): node podCIDRs, pod IPs, Service ipFamilies/clusterIPs defaulting and its 422s,
one EndpointSlice set per Service family, the Endpoints controller's primary family, kubectl;
through the official client over HTTP."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import pods as P
from dcgm_sim.serve import ServeError, ServeOptions, build
from dcgm_sim_cli.sim import main
from migrator.model import kinds
from tests.helpers.kubectl import kubectl_for
from tests.sim.conftest import NS, make_client

Obj = dict[str, Any]
DCGM = "nvidia-dcgm-dra"  # a seeded Service of the gpucluster stack, selecting one pod per node


@pytest.fixture
def connect() -> Iterator[Callable[[SimCluster], client.ApiClient]]:
    """Official-client ApiClients for started sims, closed at teardown."""
    made: list[client.ApiClient] = []

    def make(sim: SimCluster) -> client.ApiClient:
        made.append(make_client(sim.url))
        return made[-1]

    yield make
    for api in made:
        api.close()


def _plain(api: client.ApiClient, model: Any) -> Any:
    return api.sanitize_for_serialization(model)


def _nodes(api: client.ApiClient) -> list[Obj]:
    """The nodes as JSON (the client's Node model wants nodeInfo fields the sim leaves out)."""
    resp: Any = client.CoreV1Api(api).list_node(_preload_content=False)  # a urllib3 response
    return cast(list[Obj], json.loads(resp.data)["items"])


def _version(ip: str) -> int:
    return ipaddress.ip_address(ip).version


def _slices(api: client.ApiClient, service: str) -> list[Obj]:
    items = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        NS, label_selector=f"kubernetes.io/service-name={service}")
    return cast(list[Obj], _plain(api, items)["items"])


def _ready_pods(api: client.ApiClient, selector: dict[str, str]) -> list[Obj]:
    text = ",".join(f"{k}={v}" for k, v in selector.items())
    items = _plain(api, client.CoreV1Api(api).list_namespaced_pod(NS, label_selector=text))
    return [p for p in items["items"] if P.is_pod_ready(p)]


def _by_type(slices: list[Obj]) -> dict[str, set[tuple[str, str]]]:
    """addressType -> {(pod name, address)} over the slices' endpoints."""
    out: dict[str, set[tuple[str, str]]] = {}
    for sl in slices:
        got = out.setdefault(sl["addressType"], set())
        for ep in sl.get("endpoints") or []:
            got.update((ep["targetRef"]["name"], a) for a in ep["addresses"])
    return out


def _service(name: str, selector: dict[str, str], **spec: Any) -> Any:
    return {"metadata": {"name": name, "namespace": NS},
            "spec": {"selector": selector, "ports": [{"name": "metrics", "port": 5555}], **spec}}


def _invalid(err: pytest.ExceptionInfo[ApiException]) -> list[tuple[str, str]]:
    assert err.value.status == 422 and err.value.body is not None
    body = json.loads(err.value.body)
    assert body["reason"] == "Invalid"
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


def test_ipv6_cluster_is_ipv6_everywhere(make_sim: Callable[..., SimCluster],
                                         connect: Callable[[SimCluster], client.ApiClient]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster", ip_family="ipv6")
    api = connect(sim)
    core = client.CoreV1Api(api)
    for node in _nodes(api):
        assert [_version(c.split("/")[0]) for c in node["spec"]["podCIDRs"]] == [6]
        assert node["spec"]["podCIDR"] == node["spec"]["podCIDRs"][0]
    pods = _plain(api, core.list_namespaced_pod(NS))["items"]
    assert pods
    for pod in pods:
        status = pod["status"]
        assert [_version(i["ip"]) for i in status["podIPs"]] == [6]
        assert status["podIP"] == status["podIPs"][0]["ip"]
        cidr = next(n["spec"]["podCIDR"] for n in _nodes(api)
                    if n["metadata"]["name"] == pod["spec"]["nodeName"])
        assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(cidr)
    svc = _plain(api, core.read_namespaced_service(DCGM, NS))["spec"]
    assert (svc["ipFamilies"], svc["ipFamilyPolicy"]) == (["IPv6"], "SingleStack")
    assert [_version(ip) for ip in svc["clusterIPs"]] == [6]
    assert svc["clusterIP"] == svc["clusterIPs"][0]
    assert ipaddress.ip_address(svc["clusterIP"]) in ipaddress.ip_network("fd00:10:96::/112")
    ready = {p["metadata"]["name"]: p["status"]["podIP"]
             for p in _ready_pods(api, svc["selector"])}
    assert len(ready) == 3
    assert _by_type(_slices(api, DCGM)) == {"IPv6": set(ready.items())}
    endpoints = _plain(api, core.read_namespaced_endpoints(DCGM, NS))
    assert {a["ip"] for ss in endpoints["subsets"] for a in ss["addresses"]} == set(
        ready.values())


def test_ipv6_cluster_allocates_new_services_and_pods_ipv6(
        make_sim: Callable[..., SimCluster],
        connect: Callable[[SimCluster], client.ApiClient]) -> None:
    sim = make_sim(nodes=2, stack="gpucluster", ip_family="ipv6")
    api = connect(sim)
    core = client.CoreV1Api(api)
    selector = _plain(api, core.read_namespaced_service(DCGM, NS))["spec"]["selector"]
    created = _plain(api, core.create_namespaced_service(NS, _service("v6", selector)))["spec"]
    assert created["ipFamilies"] == ["IPv6"] and _version(created["clusterIP"]) == 6
    victim = _ready_pods(api, selector)[0]["metadata"]["name"]
    core.delete_namespaced_pod(victim, NS, grace_period_seconds=0)
    sim.wait_for(lambda: len([p for p in sim.store.list(kinds.POD, NS)[0]
                              if P.labels_of(p).items() >= selector.items()
                              and P.is_pod_ready(p)]) == 2, timeout=30)
    sim.wait_idle()
    ready = {p["metadata"]["name"]: p["status"]["podIP"] for p in _ready_pods(api, selector)}
    assert all(_version(ip) == 6 for ip in ready.values()) and victim not in ready
    sim.wait_for(lambda: _by_type(_slices(api, "v6")) == {"IPv6": set(ready.items())})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _service("v4", selector, ipFamilies=["IPv4"]))
    assert _invalid(err) == [("spec.ipFamilies[0]",
                              'Invalid value: "IPv4": not configured on this cluster')]


def test_dual_stack_slices_follow_the_service_families(
        make_sim: Callable[..., SimCluster],
        connect: Callable[[SimCluster], client.ApiClient]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster", ip_family="dual")
    api = connect(sim)
    core = client.CoreV1Api(api)
    node = _nodes(api)[0]
    assert [_version(c.split("/")[0]) for c in node["spec"]["podCIDRs"]] == [4, 6]
    single = _plain(api, core.read_namespaced_service(DCGM, NS))["spec"]
    assert (single["ipFamilies"], single["ipFamilyPolicy"]) == (["IPv4"], "SingleStack")
    pods = _ready_pods(api, single["selector"])
    assert len(pods) == 3
    for pod in pods:
        assert [_version(i["ip"]) for i in pod["status"]["podIPs"]] == [4, 6]
        assert pod["status"]["podIP"] == pod["status"]["podIPs"][0]["ip"]
    v4 = {(p["metadata"]["name"], p["status"]["podIPs"][0]["ip"]) for p in pods}
    v6 = {(p["metadata"]["name"], p["status"]["podIPs"][1]["ip"]) for p in pods}
    assert _by_type(_slices(api, DCGM)) == {"IPv4": v4}

    dual = _plain(api, core.create_namespaced_service(
        NS, _service("dual", single["selector"], ipFamilyPolicy="PreferDualStack")))["spec"]
    assert (dual["ipFamilies"], dual["ipFamilyPolicy"]) == (["IPv4", "IPv6"], "PreferDualStack")
    assert [_version(ip) for ip in dual["clusterIPs"]] == [4, 6]
    sim.wait_for(lambda: _by_type(_slices(api, "dual")) == {"IPv4": v4, "IPv6": v6})
    sim.wait_idle()
    endpoints = _plain(api, core.read_namespaced_endpoints("dual", NS))
    assert {a["ip"] for ss in endpoints["subsets"] for a in ss["addresses"]} == {
        ip for _, ip in v4}

    core.patch_namespaced_service("dual", NS, {"spec": {"ipFamilyPolicy": "SingleStack"}})
    downgraded = _plain(api, core.read_namespaced_service("dual", NS))["spec"]
    assert downgraded["ipFamilies"] == ["IPv4"] and len(downgraded["clusterIPs"]) == 1
    sim.wait_for(lambda: _by_type(_slices(api, "dual")) == {"IPv4": v4})


def test_dual_stack_ipv6_primary_service_and_require(
        make_sim: Callable[..., SimCluster],
        connect: Callable[[SimCluster], client.ApiClient]) -> None:
    sim = make_sim(nodes=2, stack="gpucluster", ip_family="dual")
    core = client.CoreV1Api(connect(sim))
    api = core.api_client
    selector = _plain(api, core.read_namespaced_service(DCGM, NS))["spec"]["selector"]
    six = _plain(api, core.create_namespaced_service(NS, _service(
        "six", selector, ipFamilyPolicy="RequireDualStack", ipFamilies=["IPv6"])))["spec"]
    assert six["ipFamilies"] == ["IPv6", "IPv4"]
    assert [_version(ip) for ip in six["clusterIPs"]] == [6, 4]
    sim.wait_for(lambda: set(_by_type(_slices(api, "six"))) == {"IPv4", "IPv6"})
    sim.wait_idle()
    endpoints = _plain(api, core.read_namespaced_endpoints("six", NS))
    assert {_version(a["ip"]) for ss in endpoints["subsets"] for a in ss["addresses"]} == {6}


def test_require_dual_stack_on_a_single_stack_cluster_is_invalid(
        make_sim: Callable[..., SimCluster],
        connect: Callable[[SimCluster], client.ApiClient]) -> None:
    sim = make_sim(nodes=1, stack="gpucluster")
    core = client.CoreV1Api(connect(sim))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _service("req", {"app": "x"},
                                                    ipFamilyPolicy="RequireDualStack"))
    assert _invalid(err) == [("spec.ipFamilyPolicy", 'Invalid value: "RequireDualStack": this '
                              "cluster is not configured for dual-stack services")]
    prefer = core.create_namespaced_service(NS, _service("prefer", {"app": "x"},
                                                         ipFamilyPolicy="PreferDualStack"))
    assert prefer.spec is not None and prefer.spec.ip_families == ["IPv4"]
    assert prefer.spec.cluster_ips is not None and len(prefer.spec.cluster_ips) == 1


def test_the_default_cluster_stays_ipv4_only(
        make_sim: Callable[..., SimCluster],
        connect: Callable[[SimCluster], client.ApiClient]) -> None:
    sim = make_sim(nodes=2, stack="gpucluster")
    assert sim.network.setting == "ipv4"
    api = connect(sim)
    node = _nodes(api)[0]
    assert node["spec"] == {"podCIDR": "10.128.0.0/24", "podCIDRs": ["10.128.0.0/24"]}
    svc = _plain(api, client.CoreV1Api(api).read_namespaced_service(DCGM, NS))["spec"]
    assert (svc["clusterIPs"], svc["ipFamilies"]) == (["10.96.0.10"], ["IPv4"])
    assert set(_by_type(_slices(api, DCGM))) == {"IPv4"}


def test_kubectl_prints_ipv6_slices_and_pods(make_sim: Callable[..., SimCluster],
                                             tmp_path: Path) -> None:
    sim = make_sim(nodes=2, stack="gpucluster", ip_family="dual")
    kubectl = kubectl_for(sim.kubeconfig, tmp_path)

    selector = sim.store.get(kinds.SERVICE, NS, DCGM)["spec"]["selector"]
    manifest = tmp_path / "both.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "Service", **_service(
        "both", selector, ipFamilyPolicy="PreferDualStack")}))
    kubectl("apply", "-f", str(manifest))
    sim.wait_for(lambda: len([s for s in sim.store.list(kinds.ENDPOINTSLICE, NS)[0]
                              if P.labels_of(s).get("kubernetes.io/service-name") == "both"
                              and s["addressType"] == "IPv6"]) == 1, timeout=30)
    lines = kubectl("get", "endpointslices", "-n", NS,
                    "-l", "kubernetes.io/service-name=both").splitlines()
    assert lines[0].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert sorted(line.split()[1] for line in lines[1:]) == ["IPv4", "IPv6"]
    wide = kubectl("get", "pods", "-n", NS, "-o", "wide").splitlines()
    assert all(_version(line.split()[5]) == 4 for line in wide[1:])  # the primary podIP
    svc = json.loads(kubectl("get", "service", "both", "-n", NS, "-o", "json"))
    assert svc["spec"]["ipFamilies"] == ["IPv4", "IPv6"]


def test_serve_ip_family_option() -> None:
    assert build(ServeOptions(nodes=1, ip_family="ipv6")).network.setting == "ipv6"
    with pytest.raises(ServeError, match="--ip-family must be one of ipv4, ipv6, dual"):
        ServeOptions(ip_family="ipv5").validate()
    assert main(["serve", "--ip-family", "ipv5"]) == 2
