"""Simulated API server admission of the LoadBalancer-only Service fields (source ranges, class,
node-port allocation) as upstream `ValidateService` checks them, through the official client."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.sim.conftest import NS, service


def _svc(body: dict[str, Any]) -> client.V1Service:
    """A plain-dict Service body: the official client sends a dict as it is."""
    return cast(client.V1Service, body)


def _causes(exc: ApiException) -> list[dict[str, Any]]:
    assert exc.status == 422 and exc.body is not None
    body = json.loads(exc.body)
    assert body["reason"] == "Invalid"
    return list(body["details"]["causes"])


def test_load_balancer_fields_are_stored_as_given(core: client.CoreV1Api) -> None:
    body = service("lb", type="LoadBalancer", loadBalancerClass="example.com/internal",
                   loadBalancerSourceRanges=["10.0.0.0/8", " 192.168.0.0/16"],
                   allocateLoadBalancerNodePorts=False)
    svc = core.create_namespaced_service(NS, _svc(body)).spec
    assert svc is not None
    assert svc.load_balancer_class == "example.com/internal"
    assert svc.load_balancer_source_ranges == ["10.0.0.0/8", " 192.168.0.0/16"]
    assert svc.allocate_load_balancer_node_ports is False


@pytest.mark.parametrize(("field", "value", "path"), [
    ("loadBalancerSourceRanges", ["10.0.0.0/8"], "spec.LoadBalancerSourceRanges"),
    ("loadBalancerClass", "example.com/internal", "spec.loadBalancerClass"),
    ("allocateLoadBalancerNodePorts", True, "spec.allocateLoadBalancerNodePorts"),
])
def test_load_balancer_only_fields_are_forbidden_on_other_types(
        core: client.CoreV1Api, field: str, value: Any, path: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(service("x", type="NodePort",
                                                        **{field: value})))
    causes = _causes(err.value)
    assert [(c["reason"], c["field"]) for c in causes] == [("FieldValueForbidden", path)]
    assert "may only be used when `type` is 'LoadBalancer'" in causes[0]["message"]


def test_source_ranges_must_be_cidrs(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(service(
            "lb", type="LoadBalancer", loadBalancerSourceRanges=["10.0.0.1"])))
    causes = _causes(err.value)
    assert causes[0]["field"] == "spec.LoadBalancerSourceRanges"
    assert "must be a list of IP ranges" in causes[0]["message"]


def test_load_balancer_class_may_not_change(core: client.CoreV1Api) -> None:
    core.create_namespaced_service(NS, _svc(service("lb", type="LoadBalancer",
                                                    loadBalancerClass="example.com/a")))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("lb", NS, {"spec": {"loadBalancerClass": "example.com/b"}})
    assert "may not change once set" in _causes(err.value)[0]["message"]
