"""Simulated API server admission: Service defaults, clusterIP/nodePort allocation, uniqueness and
immutability; DaemonSet defaults, selector rules; through the official client."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.sim.conftest import NS, Raw, daemonset, service


def _svc(body: dict[str, Any]) -> client.V1Service:
    """A plain-dict Service body: the official client sends a dict as it is."""
    return cast(client.V1Service, body)


def _ds(body: dict[str, Any]) -> client.V1DaemonSet:
    """A plain-dict DaemonSet body: the official client sends a dict as it is."""
    return cast(client.V1DaemonSet, body)


def _spec(svc: client.V1Service) -> client.V1ServiceSpec:
    assert svc.spec is not None
    return svc.spec


def _port(svc: client.V1Service, index: int = 0) -> client.V1ServicePort:
    ports = _spec(svc).ports
    assert ports is not None
    return ports[index]


def _ds_spec(ds: client.V1DaemonSet) -> client.V1DaemonSetSpec:
    assert ds.spec is not None
    return ds.spec


def _invalid(exc: ApiException) -> tuple[str, list[dict[str, Any]]]:
    assert exc.status == 422 and exc.body is not None
    body = json.loads(exc.body)
    assert body["reason"] == "Invalid"
    return str(body["message"]), list(body["details"]["causes"])


def test_service_defaults_and_cluster_ip(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service(NS, _svc(service("dcgm")))
    spec = _spec(svc)
    assert spec.type == "ClusterIP" and spec.session_affinity == "None"
    assert spec.internal_traffic_policy == "Cluster"
    assert spec.ip_families == ["IPv4"] and spec.ip_family_policy == "SingleStack"
    assert spec.cluster_ip and spec.cluster_ips == [spec.cluster_ip]
    assert spec.cluster_ip.startswith("10.")
    port = _port(svc)
    assert (port.protocol, port.target_port, port.node_port) == ("TCP", 9400, None)


def test_cluster_ips_are_unique(core: client.CoreV1Api) -> None:
    ips = {_spec(core.create_namespaced_service(NS, _svc(service(f"s{i}")))).cluster_ip
           for i in range(5)}
    assert len(ips) == 5


def test_changing_cluster_ip_is_422(core: client.CoreV1Api) -> None:
    core.create_namespaced_service(NS, _svc(service("dcgm")))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("dcgm", NS, {"spec": {"clusterIP": "10.96.100.100"}})
    message, causes = _invalid(err.value)
    assert "may not change once set" in message
    assert causes[0]["field"] == "spec.clusterIPs[0]"
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_service("dcgm", NS, {"spec": {"clusterIPs": ["10.96.100.100"]}})
    _invalid(err.value)


def test_put_without_cluster_ip_keeps_the_allocated_one(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_service(NS, _svc(service("dcgm")))
    body = service("dcgm")  # no clusterIP: what an operator that re-renders sends
    body["spec"]["selector"] = {"nvidia.com/gpu-operator.dcgm": "true"}
    updated = core.replace_namespaced_service("dcgm", NS, _svc(body))
    assert _spec(updated).cluster_ip == _spec(created).cluster_ip
    assert _spec(updated).selector == {"nvidia.com/gpu-operator.dcgm": "true"}


def test_explicit_cluster_ip_taken_or_out_of_range_is_422(core: client.CoreV1Api) -> None:
    first = core.create_namespaced_service(NS, _svc(service("a")))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(service("b", clusterIP=_spec(first).cluster_ip)))
    assert "provided IP is already allocated" in _invalid(err.value)[0]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(service("c", clusterIP="192.168.1.1")))
    assert "not in the valid range" in _invalid(err.value)[0]


def test_headless_service(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service(NS, _svc(service("h", clusterIP="None")))
    assert _spec(svc).cluster_ip == "None" and _spec(svc).cluster_ips == ["None"]


def test_node_ports_allocated_unique_and_kept(core: client.CoreV1Api) -> None:
    a = core.create_namespaced_service(NS, _svc(service("a", type="NodePort")))
    b = core.create_namespaced_service(NS, _svc(service("b", type="NodePort")))
    port_a, port_b = _port(a).node_port, _port(b).node_port
    assert port_a is not None
    assert 30000 <= port_a <= 32767 and port_a != port_b
    assert _spec(a).external_traffic_policy == "Cluster"
    body = service("a", type="NodePort")  # omits nodePort: kept, as patchAllocatedValues does
    assert _port(core.replace_namespaced_service("a", NS, _svc(body))).node_port == port_a
    clash = service("c", type="NodePort")
    clash["spec"]["ports"][0]["nodePort"] = port_a
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(clash))
    message, causes = _invalid(err.value)
    assert "provided port is already allocated" in message
    assert causes[0]["field"] == "spec.ports[0].nodePort"


def test_load_balancer_local_gets_health_check_node_port(core: client.CoreV1Api) -> None:
    svc = core.create_namespaced_service(
        NS, _svc(service("lb", type="LoadBalancer", externalTrafficPolicy="Local")))
    assert _spec(svc).health_check_node_port
    assert _spec(svc).health_check_node_port != _port(svc).node_port
    assert _spec(svc).allocate_load_balancer_node_ports is True


def test_node_port_on_cluster_ip_service_is_422(core: client.CoreV1Api) -> None:
    body = service("x")
    body["spec"]["ports"][0]["nodePort"] = 30080
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(body))
    assert "may not be used when `type` is 'ClusterIP'" in _invalid(err.value)[0]


def test_service_name_must_be_a_dns1035_label(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service(NS, _svc(service("9bad")))
    assert "DNS-1035 label" in _invalid(err.value)[0]


def test_daemonset_defaults(apps: client.AppsV1Api) -> None:
    ds = apps.create_namespaced_daemon_set(NS, _ds(daemonset("dcgm")))
    spec = _ds_spec(ds)
    assert spec.update_strategy is not None
    assert spec.update_strategy.type == "RollingUpdate"
    rolling = spec.update_strategy.rolling_update
    assert rolling is not None
    assert rolling.max_unavailable == 1
    assert rolling.max_surge == 0
    assert spec.revision_history_limit == 10
    pod_spec = spec.template.spec
    assert pod_spec is not None
    assert (pod_spec.restart_policy, pod_spec.dns_policy) == ("Always", "ClusterFirst")
    assert pod_spec.termination_grace_period_seconds == 30
    assert pod_spec.containers[0].image_pull_policy == "IfNotPresent"
    assert ds.status is not None
    assert ds.status.desired_number_scheduled == 0


def test_daemonset_on_delete_keeps_its_strategy(apps: client.AppsV1Api) -> None:
    body = daemonset("dcgm")
    body["spec"]["updateStrategy"] = {"type": "OnDelete"}
    ds = apps.create_namespaced_daemon_set(NS, _ds(body))
    strategy = _ds_spec(ds).update_strategy
    assert strategy is not None
    assert strategy.type == "OnDelete"
    assert strategy.rolling_update is None


def test_daemonset_selector_is_immutable(apps: client.AppsV1Api) -> None:
    apps.create_namespaced_daemon_set(NS, _ds(daemonset("dcgm")))
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
        apps.create_namespaced_daemon_set(NS, _ds(body))
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
        core.create_namespaced_service(NS, _svc(body))
    _, causes = _invalid(err.value)
    assert causes[0]["field"] == "metadata.ownerReferences[0].uid"


def test_a_gpucluster_of_another_name_is_refused_as_its_crd_rule_says(raw: Raw) -> None:
    """The CRD's x-kubernetes-validations rule (`self.metadata.name == 'gpu-cluster'`), dry
    run or not; the one name it admits is created."""
    def body(name: str) -> dict[str, Any]:
        return {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
                "metadata": {"name": name}, "spec": {}}

    for query in ("?dryRun=All", ""):
        code, doc, _ = raw("POST", f"/apis/nvidia.com/v1alpha1/gpuclusters{query}", body("gpus"))
        assert code == 422, doc
        assert doc["reason"] == "Invalid"
        assert doc["message"] == ('GPUCluster.nvidia.com "gpus" is invalid: <nil>: Invalid '
                                  'value: "object": GPUCluster is a singleton, metadata.name '
                                  "must be 'gpu-cluster'")
    code, doc, _ = raw("POST", "/apis/nvidia.com/v1alpha1/gpuclusters", body("gpu-cluster"))
    assert code == 201, doc
