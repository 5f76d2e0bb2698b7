"""EndpointSlice validation in the simulated API server, as upstream `ValidateEndpointSlice`:
addresses of the slice's type, the 1000-endpoint cap, port names and protocols, the immutable
addressType, dry-run; 422 Invalid with the real field paths, through the official client."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.sim.conftest import NS

Obj = dict[str, Any]


@pytest.fixture
def discovery(api: client.ApiClient) -> client.DiscoveryV1Api:
    return client.DiscoveryV1Api(api)


def _slice(name: str = "web-abc", address_type: str = "IPv4", addresses: list[str] | None = None,
           ports: list[Obj] | None = None, endpoints: list[Obj] | None = None) -> Any:
    """A plain-dict EndpointSlice body: the official client sends a dict as it is."""
    if endpoints is None:
        endpoints = [{"addresses": [ip], "nodeName": "node-1"}
                     for ip in (addresses if addresses is not None else ["10.128.0.2"])]
    body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": NS,
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": address_type, "endpoints": endpoints,
            "ports": ports if ports is not None else [{"name": "metrics", "port": 9400}]}
    return cast(client.V1EndpointSlice, body)


def _causes(err: pytest.ExceptionInfo[ApiException]) -> tuple[str, list[Obj]]:
    exc = err.value
    assert exc.status == 422 and exc.body is not None
    body = json.loads(exc.body)
    assert body["reason"] == "Invalid"
    assert body["details"]["group"] == "discovery.k8s.io"
    assert body["details"]["kind"] == "EndpointSlice"
    return str(body["message"]), list(body["details"]["causes"])


def _create(discovery: client.DiscoveryV1Api, body: Any,
            dry_run: str | None = None) -> client.V1EndpointSlice:
    if dry_run:
        return discovery.create_namespaced_endpoint_slice(NS, body, dry_run=dry_run)
    return discovery.create_namespaced_endpoint_slice(NS, body)


def test_an_ipv6_address_in_an_ipv4_slice_is_invalid(discovery: client.DiscoveryV1Api) -> None:
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(addresses=["10.128.0.2", "fd00:10:244::2"]))
    message, causes = _causes(err)
    assert causes == [{"reason": "FieldValueInvalid", "field": "endpoints[1].addresses[0]",
                       "message": 'Invalid value: "fd00:10:244::2": must be a valid IPv4 '
                                  "address"}]
    assert message == ('EndpointSlice.discovery.k8s.io "web-abc" is invalid: '
                       'endpoints[1].addresses[0]: Invalid value: "fd00:10:244::2": must be a '
                       "valid IPv4 address")


def test_an_ipv4_address_in_an_ipv6_slice_is_invalid(discovery: client.DiscoveryV1Api) -> None:
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(address_type="IPv6", addresses=["10.128.0.2"]))
    _, causes = _causes(err)
    assert [(c["field"], c["message"]) for c in causes] == [
        ("endpoints[0].addresses[0]", 'Invalid value: "10.128.0.2": must be a valid IPv6 address')]


def test_special_and_malformed_addresses(discovery: client.DiscoveryV1Api) -> None:
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(addresses=["127.0.0.1", "169.254.1.1", "10.1"]))
    _, causes = _causes(err)
    assert [(c["field"], c["message"].split(": ", 2)[-1]) for c in causes] == [
        ("endpoints[0].addresses[0]", "may not be in the loopback range (127.0.0.0/8, ::1/128)"),
        ("endpoints[1].addresses[0]",
         "may not be in the link-local range (169.254.0.0/16, fe80::/10)"),
        ("endpoints[2].addresses[0]", "must be a valid IPv4 address"),
        ("endpoints[2].addresses[0]", "must be a valid IP address")]


def test_an_endpoint_needs_an_address_and_a_valid_node_name(
        discovery: client.DiscoveryV1Api) -> None:
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(endpoints=[{"addresses": []},
                                             {"addresses": ["10.0.0.3"], "nodeName": "Node_1",
                                              "hostname": "a.b"}]))
    _, causes = _causes(err)
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueRequired", "endpoints[0].addresses"),
        ("FieldValueInvalid", "endpoints[1].nodeName"),
        ("FieldValueInvalid", "endpoints[1].hostname")]
    assert causes[0]["message"] == "Required value: must contain at least 1 address"


def test_more_than_1000_endpoints_is_too_many(discovery: client.DiscoveryV1Api) -> None:
    endpoints = [{"addresses": [f"10.{128 + i // 250}.{i % 250}.2"]} for i in range(1001)]
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(endpoints=endpoints))
    _, causes = _causes(err)
    assert causes == [{"reason": "FieldValueTooMany", "field": "endpoints",
                       "message": "Too many: 1001: must have at most 1000 items"}]
    created = _create(discovery, _slice(endpoints=endpoints[:1000]))
    assert created.endpoints is not None and len(created.endpoints) == 1000


def test_port_names_and_protocols(discovery: client.DiscoveryV1Api) -> None:
    ports = [{"name": "Metrics_Port", "port": 1}, {"name": "dup", "port": 2},
             {"name": "dup", "port": 3}, {"name": "udp", "port": 4, "protocol": "ICMP"}]
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(ports=ports))
    _, causes = _causes(err)
    assert [(c["reason"], c["field"]) for c in causes] == [
        ("FieldValueInvalid", "ports[0].name"),
        ("FieldValueDuplicate", "ports[2].name"),
        ("FieldValueNotSupported", "ports[3].protocol")]
    assert "a lowercase RFC 1123 label must consist of" in causes[0]["message"]
    assert causes[2]["message"] == ('Unsupported value: "ICMP": supported values: "SCTP", '
                                    '"TCP", "UDP"')


def test_address_type_must_be_supported(discovery: client.DiscoveryV1Api) -> None:
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(address_type="IP"))
    _, causes = _causes(err)
    assert causes == [{"reason": "FieldValueNotSupported", "field": "addressType",
                       "message": 'Unsupported value: "IP": supported values: "FQDN", '
                                  '"IPv4", "IPv6"'}]


def test_valid_slices_are_accepted_and_defaulted(discovery: client.DiscoveryV1Api) -> None:
    v4 = _create(discovery, _slice(ports=[{"port": 9400}]))
    assert v4.address_type == "IPv4"
    assert v4.ports is not None and (v4.ports[0].name, v4.ports[0].protocol) == ("", "TCP")
    v6 = _create(discovery, _slice("web-v6", "IPv6", ["fd00:10:244::2", "fd00:10:244:1::2"]))
    assert v6.endpoints is not None
    assert [e.addresses for e in v6.endpoints] == [["fd00:10:244::2"], ["fd00:10:244:1::2"]]
    fqdn = _create(discovery, _slice("web-fqdn", "FQDN", ["dcgm.example.com"]))
    assert fqdn.address_type == "FQDN"


def test_address_type_is_immutable(discovery: client.DiscoveryV1Api) -> None:
    _create(discovery, _slice())
    with pytest.raises(ApiException) as err:
        discovery.patch_namespaced_endpoint_slice(
            "web-abc", NS, {"addressType": "IPv6", "endpoints": []})
    _, causes = _causes(err)
    assert causes == [{"reason": "FieldValueInvalid", "field": "addressType",
                       "message": 'Invalid value: "IPv6": field is immutable'}]


def test_dry_run_validates_and_stores_nothing(discovery: client.DiscoveryV1Api) -> None:
    with pytest.raises(ApiException) as err:
        _create(discovery, _slice(addresses=["fd00::1"]), dry_run="All")
    _, causes = _causes(err)
    assert [c["field"] for c in causes] == ["endpoints[0].addresses[0]"]
    ok = _create(discovery, _slice(), dry_run="All")
    assert ok.metadata is not None and ok.metadata.name == "web-abc"
    assert discovery.list_namespaced_endpoint_slice(NS).items == []
