"""Simulated API server admission: Service defaults, clusterIP/nodePort allocation, uniqueness and
immutability; DaemonSet defaults, selector rules; through the official client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.sim.conftest import NS, Raw, daemonset, service


def _invalid(exc: ApiException) -> tuple[str, list[dict[str, Any]]]:
    assert exc.status == 422
    body = json.loads(exc.body)
    assert body["reason"] == "Invalid"
    return str(body["message"]), list(body["details"]["causes"])


def test_service_defaults_and_cluster_ip(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service(NS, service("dcgm"))
    spec = svc.spec
    assert spec.type == "ClusterIP" and spec.session_affinity == "None"
    assert spec.internal_traffic_policy == "Cluster"
    assert spec.ip_families == ["IPv4"] and spec.ip_family_policy == "SingleStack"
    assert spec.cluster_ip and spec.cluster_ips == [spec.cluster_ip]
    assert spec.cluster_ip.startswith("10.")
    port = spec.ports[0]
    assert (port.protocol, port.target_port, port.node_port) == ("TCP", 9400, None)


def test_cluster_ips_are_unique(core: client.CoreV1Api) -> None:
    ips = {core.create_namespaced_service(NS, service(f"s{i}")).spec.cluster_ip
           for i in range(5)}
    assert len(ips) == 5


def test_changing_cluster_ip_is_422(core: client.CoreV1Api) -> None:
    core.create_namespaced_service(NS, service("dcgm"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("dcgm", NS, {"spec": {"clusterIP": "10.96.100.100"}})
    message, causes = _invalid(err.value)
    assert "may not change once set" in message
    assert causes[0]["field"] == "spec.clusterIPs[0]"
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("dcgm", NS, {"spec": {"clusterIPs": ["10.96.100.100"]}})
    _invalid(err.value)


def test_put_without_cluster_ip_keeps_the_allocated_one(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_service(NS, service("dcgm"))
    body = service("dcgm")  # no clusterIP: what an operator that re-renders sends
    body["spec"]["selector"] = {"nvidia.com/gpu-operator.dcgm": "true"}
    updated = core.replace_namespaced_service("dcgm", NS, body)
    assert updated.spec.cluster_ip == created.spec.cluster_ip
    assert updated.spec.selector == {"nvidia.com/gpu-operator.dcgm": "true"}


def test_explicit_cluster_ip_taken_or_out_of_range_is_422(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_service(NS, service("a"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, service("b", clusterIP=first.spec.cluster_ip))
    assert "provided IP is already allocated" in _invalid(err.value)[0]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, service("c", clusterIP="192.168.1.1"))
    assert "not in the valid range" in _invalid(err.value)[0]


def test_headless_service(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service(NS, service("h", clusterIP="None"))
    assert svc.spec.cluster_ip == "None" and svc.spec.cluster_ips == ["None"]


def test_node_ports_allocated_unique_and_kept(core: client.CoreV1Api) -> None:
    a = core.create_namespaced_service(NS, service("a", type="NodePort"))
    b = core.create_namespaced_service(NS, service("b", type="NodePort"))
    port_a, port_b = a.spec.ports[0].node_port, b.spec.ports[0].node_port
    assert 30000 <= port_a <= 32767 and port_a != port_b
    assert a.spec.external_traffic_policy == "Cluster"
    body = service("a", type="NodePort")  # omits nodePort: kept, as patchAllocatedValues does
    assert core.replace_namespaced_service("a", NS, body).spec.ports[0].node_port == port_a
    clash = service("c", type="NodePort")
    clash["spec"]["ports"][0]["nodePort"] = port_a
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, clash)
    message, causes = _invalid(err.value)
    assert "provided port is already allocated" in message
    assert causes[0]["field"] == "spec.ports[0].nodePort"


def test_load_balancer_local_gets_health_check_node_port(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service(
        NS, service("lb", type="LoadBalancer", externalTrafficPolicy="Local"))
    assert svc.spec.health_check_node_port
    assert svc.spec.health_check_node_port != svc.spec.ports[0].node_port
    assert svc.spec.allocate_load_balancer_node_ports is True


def test_node_port_on_cluster_ip_service_is_422(core: client.CoreV1Api) -> None:
    body = service("x")
    body["spec"]["ports"][0]["nodePort"] = 30080
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, body)
    assert "may not be used when `type` is 'ClusterIP'" in _invalid(err.value)[0]


def test_service_name_must_be_a_dns1035_label(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, service("9bad"))
    assert "DNS-1035 label" in _invalid(err.value)[0]


def test_daemonset_defaults(apps: client.AppsV1Api) -> None:
    ds = apps.create_namespaced_daemon_set(NS, daemonset("dcgm"))
    assert ds.spec.update_strategy.type == "RollingUpdate"
    assert ds.spec.update_strategy.rolling_update.max_unavailable == 1
    assert ds.spec.update_strategy.rolling_update.max_surge == 0
    assert ds.spec.revision_history_limit == 10
    pod_spec = ds.spec.template.spec
    assert (pod_spec.restart_policy, pod_spec.dns_policy) == ("Always", "ClusterFirst")
    assert pod_spec.termination_grace_period_seconds == 30
    assert pod_spec.containers[0].image_pull_policy == "IfNotPresent"
    assert ds.status.desired_number_scheduled == 0


def test_daemonset_on_delete_keeps_its_strategy(apps: client.AppsV1Api) -> None:
    body = daemonset("dcgm")
    body["spec"]["updateStrategy"] = {"type": "OnDelete"}
    ds = apps.create_namespaced_daemon_set(NS, body)
    assert ds.spec.update_strategy.type == "OnDelete"
    assert ds.spec.update_strategy.rolling_update is None


def test_daemonset_selector_is_immutable(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_daemon_set(NS, daemonset("dcgm"))
    with pytest.raises(ApiException) as err:
        apps.patch_namespaced_daemon_set("dcgm", NS, {"spec": {
            "selector": {"matchLabels": {"nvidia.com/gpu-operator.dcgm": "true"}},
            "template": {"metadata": {"labels": {"nvidia.com/gpu-operator.dcgm": "true"}}}}})
    message, causes = _invalid(err.value)
    assert "field is immutable" in message
    assert causes[0]["field"] == "spec.selector"


def test_daemonset_selector_must_match_template(apps: client.AppsV1Api) -> None:
    body = daemonset("dcgm")
    body["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(ApiException) as err:
        apps.create_namespaced_daemon_set(NS, body)
    message, causes = _invalid(err.value)
    assert "`selector` does not match template `labels`" in message
    assert causes[0]["field"] == "spec.template.metadata.labels"


def test_daemonset_requires_a_selector(raw: Raw) -> None:
    body = daemonset("dcgm")  # the official client refuses this one itself: send it raw
    del body["spec"]["selector"]
    code, status, _ = raw("POST", f"/apis/apps/v1/namespaces/{NS}/daemonsets", body)
    assert code == 422
    assert "spec.selector: Required value" in status["message"]


def test_invalid_owner_reference_is_422(core: client.CoreV1Api) -> None:
    body = service("alias")
    body["metadata"]["ownerReferences"] = [{"apiVersion": "nvidia.com/v1alpha1",
                                            "kind": "GPUCluster", "name": "g", "uid": ""}]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, body)
    _, causes = _invalid(err.value)
    assert causes[0]["field"] == "metadata.ownerReferences[0].uid"
