"""core/v1 Endpoints and monitoring.coreos.com/v1 PodMonitors served by the simulated API
server: discovery, CRUD, list (selectors, limit/continue), watch, the Endpoints Table and RBAC,
through the official client, raw HTTP and kubectl (`kubectl get endpoints` on a SimCluster)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client import ApiException

from dcgm_sim import writes
from dcgm_sim.cluster import SimCluster
from dcgm_sim.kinds import ENDPOINTS
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.helpers.kubectl import kubectl_for
from tests.sim.conftest import NS, Raw, make_client

Obj = dict[str, Any]
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
PMON = ("monitoring.coreos.com", "v1")
WATCH: Any = watch  # the client's watch module is untyped


def _plain(api: Any, model: Any) -> Any:
    """A client model as the JSON dict it came from."""
    return api.sanitize_for_serialization(model)


def _names(core: client.CoreV1Api, items: Any) -> list[str]:
    return [str(o["metadata"]["name"]) for o in _plain(core.api_client, items)["items"]]


def _message(err: pytest.ExceptionInfo[ApiException]) -> str:
    return str(json.loads(err.value.body or "{}").get("message"))


def _endpoints(name: str, ips: list[str], labels: dict[str, str] | None = None) -> Any:
    return {"metadata": {"name": name, "labels": labels or {"app": name}}, "subsets": [
        {"addresses": [{"ip": ip} for ip in ips], "ports": [{"name": "m", "port": 9400}]}]}


def test_discovery_lists_endpoints_as_upstream(raw: Raw) -> None:
    _, body, _ = raw("GET", "/api/v1")
    resources = {r["name"]: r for r in body["resources"]}
    assert resources["endpoints"] == {
        "name": "endpoints", "singularName": "endpoints", "namespaced": True,
        "kind": "Endpoints", "shortNames": ["ep"], "verbs": [
            "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]}
    assert "endpoints/status" not in resources
    code, body, _ = raw("GET", "/api/v1/endpoints")
    assert code == 200 and body["kind"] == "EndpointsList" and body["items"] == []


def test_endpoints_crud(core: client.CoreV1Api) -> None:
    api = core.api_client
    created = _plain(api, core.create_namespaced_endpoints(NS, _endpoints("web", ["10.0.0.1"])))
    assert created["metadata"]["uid"] and created["subsets"][0]["ports"][0]["protocol"] == "TCP"
    got = _plain(api, core.read_namespaced_endpoints("web", NS))
    got["subsets"][0]["addresses"].append({"ip": "10.0.0.2"})
    replaced = _plain(api, core.replace_namespaced_endpoints("web", NS, got))
    assert [a["ip"] for a in replaced["subsets"][0]["addresses"]] == ["10.0.0.1", "10.0.0.2"]
    label: Any = {"metadata": {"labels": {"x": "y"}}}
    patched = _plain(api, core.patch_namespaced_endpoints("web", NS, label))
    assert patched["metadata"]["labels"] == {"app": "web", "x": "y"}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_endpoints(NS, _endpoints("web", ["10.0.0.9"]))
    assert err.value.status == 409
    core.delete_namespaced_endpoints("web", NS)
    with pytest.raises(ApiException) as err:
        core.read_namespaced_endpoints("web", NS)
    assert err.value.status == 404
    assert _message(err) == 'endpoints "web" not found'


def test_endpoints_list_selectors_and_pages(core: client.CoreV1Api) -> None:
    for i in range(5):
        core.create_namespaced_endpoints(NS, _endpoints(f"ep{i}", [f"10.0.0.{i}"],
                                                        {"app": "a" if i % 2 else "b"}))
    core.create_namespaced_endpoints("default", _endpoints("other", ["10.0.1.1"]))
    assert _names(core, core.list_namespaced_endpoints(NS, label_selector="app=a")) == [
        "ep1", "ep3"]
    assert _names(core, core.list_namespaced_endpoints(
        NS, field_selector="metadata.name=ep4")) == ["ep4"]
    first = _plain(core.api_client, core.list_namespaced_endpoints(NS, limit=2))
    assert [e["metadata"]["name"] for e in first["items"]] == ["ep0", "ep1"]
    assert first["metadata"]["remainingItemCount"] == 3
    rest = core.list_namespaced_endpoints(NS, limit=10, _continue=first["metadata"]["continue"])
    assert _names(core, rest) == ["ep2", "ep3", "ep4"]
    assert len(_names(core, core.list_endpoints_for_all_namespaces())) == 6
    core.delete_collection_namespaced_endpoints(NS, label_selector="app=b")
    assert _names(core, core.list_namespaced_endpoints(NS)) == ["ep1", "ep3"]


def test_endpoints_watch(core: client.CoreV1Api) -> None:
    core.create_namespaced_endpoints(NS, _endpoints("web", ["10.0.0.1"]))
    seen: list[tuple[str, list[str]]] = []
    moved: Any = {"subsets": [{"addresses": [{"ip": "10.0.0.2"}], "ports": [{"port": 1}]}]}
    w = WATCH.Watch()
    for event in w.stream(core.list_namespaced_endpoints, NS, timeout_seconds=10):
        ep = _plain(core.api_client, event["object"])
        seen.append((event["type"], [a["ip"] for s in ep.get("subsets") or []
                                     for a in s["addresses"]]))
        if len(seen) == 1:
            core.patch_namespaced_endpoints("web", NS, moved)
        elif len(seen) == 2:
            core.delete_namespaced_endpoints("web", NS)
        else:
            w.stop()
    assert seen == [("ADDED", ["10.0.0.1"]), ("MODIFIED", ["10.0.0.2"]),
                    ("DELETED", ["10.0.0.2"])]


def test_endpoints_table(store: Store, raw: Raw) -> None:
    writes.create(store, ENDPOINTS, _endpoints("web", [f"10.0.0.{i}" for i in range(5)]),
                  namespace=NS)
    writes.create(store, ENDPOINTS, {"metadata": {"name": "empty"}}, namespace=NS)
    writes.create(store, ENDPOINTS, {"metadata": {"name": "headless"}, "subsets": [
        {"addresses": [{"ip": "fd00::1"}]}]}, namespace=NS)
    code, body, _ = _get_table(raw, f"/api/v1/namespaces/{NS}/endpoints")
    assert code == 200
    assert [c["name"] for c in body["columnDefinitions"]] == ["Name", "Endpoints", "Age"]
    cells = {r["cells"][0]: r["cells"][1] for r in body["rows"]}
    assert cells == {"web": "10.0.0.0:9400,10.0.0.1:9400,10.0.0.2:9400 + 2 more...",
                     "empty": "<none>", "headless": "fd00::1"}


def _get_table(raw: Raw, path: str) -> tuple[int, Any, dict[str, str]]:
    req = urllib.request.Request(raw.url + path, headers={
        "Accept": TABLE, "Authorization": f"Bearer {raw.token}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status, json.loads(resp.read()), dict(resp.headers)


def test_endpoints_under_rbac(server: ApiServer, core: client.CoreV1Api) -> None:
    core.create_namespaced_endpoints(NS, _endpoints("web", ["10.0.0.1"]))
    server.access.add_token("ep-reader", f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: ep-reader, namespace: {NS}}}
rules:
- {{apiGroups: [""], resources: [endpoints], verbs: [get, list, watch]}}
""")
    with make_client(server.url, "ep-reader") as api:
        limited = client.CoreV1Api(api)
        assert _names(limited, limited.list_namespaced_endpoints(NS)) == ["web"]
        with pytest.raises(ApiException) as err:
            limited.delete_namespaced_endpoints("web", NS)
        assert err.value.status == 403
        assert 'cannot delete resource "endpoints" in API group ""' in _message(err)


def test_kubectl_get_endpoints(make_sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    sim = make_sim(nodes=3, stack="gpucluster")
    kubectl = kubectl_for(sim.kubeconfig, tmp_path)

    lines = kubectl("get", "endpoints", "-n", NS).splitlines()
    assert lines[0].split() == ["NAME", "ENDPOINTS", "AGE"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:]}
    pods = {p["status"]["podIP"] for p in sim.store.list(kinds.POD, NS)[0]
            if p["metadata"]["labels"]["app"] == "nvidia-dcgm-dra"}
    assert set(rows) == {"nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"}
    assert {cell.rpartition(":")[0] for cell in rows["nvidia-dcgm-dra"].split(",")} == pods
    doc = json.loads(kubectl("get", "ep", "nvidia-dcgm-dra", "-n", NS, "-o", "json"))
    assert doc["kind"] == "Endpoints" and len(doc["subsets"][0]["addresses"]) == 3


# ---- PodMonitors ------------------------------------------------------------------------------


def _pod_monitor(name: str) -> Obj:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": {"name": name, "labels": {"release": "prom"}},
            "spec": {"selector": {"matchLabels": {"app": "nvidia-dcgm-exporter"}},
                     "podMetricsEndpoints": [{"port": "gpu-metrics", "path": "/metrics"}]}}


def test_pod_monitor_crud(api: client.ApiClient) -> None:
    custom: Any = client.CustomObjectsApi(api)  # answers plain dicts
    custom.create_namespaced_custom_object(*PMON, NS, "podmonitors", _pod_monitor("dcgm"))
    got = custom.get_namespaced_custom_object(*PMON, NS, "podmonitors", "dcgm")
    assert got["kind"] == "PodMonitor" and got["metadata"]["uid"]
    assert got["spec"]["podMetricsEndpoints"] == [{"port": "gpu-metrics", "path": "/metrics"}]
    listed = custom.list_namespaced_custom_object(*PMON, NS, "podmonitors",
                                                  label_selector="release=prom")
    assert listed["kind"] == "PodMonitorList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["dcgm"]
    patched = custom.patch_namespaced_custom_object(
        *PMON, NS, "podmonitors", "dcgm", {"spec": {"jobLabel": "app"}})
    assert patched["spec"]["jobLabel"] == "app"
    assert patched["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
    custom.delete_namespaced_custom_object(*PMON, NS, "podmonitors", "dcgm")
    with pytest.raises(ApiException) as err:
        custom.get_namespaced_custom_object(*PMON, NS, "podmonitors", "dcgm")
    assert err.value.status == 404


def test_pod_monitor_discovery_and_watch(api: client.ApiClient, raw: Raw) -> None:
    _, body, _ = raw("GET", "/apis/monitoring.coreos.com/v1")
    resources = {r["name"]: r for r in body["resources"]}
    assert resources["podmonitors"]["kind"] == "PodMonitor"
    assert resources["podmonitors"]["shortNames"] == ["pmon"]
    assert resources["podmonitors"]["namespaced"] is True
    assert set(resources) == {"servicemonitors", "podmonitors", "prometheuses",
                              "prometheuses/status", "prometheusrules"}  # docs/prometheusrule.yaml
    custom: Any = client.CustomObjectsApi(api)  # answers plain dicts
    custom.create_namespaced_custom_object(*PMON, NS, "podmonitors", _pod_monitor("a"))
    seen: list[tuple[str, str]] = []
    w = WATCH.Watch()
    for event in w.stream(custom.list_namespaced_custom_object, *PMON, NS, "podmonitors",
                          timeout_seconds=10):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 1:
            custom.delete_namespaced_custom_object(*PMON, NS, "podmonitors", "a")
        else:
            w.stop()
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


def test_pod_monitors_go_with_their_group(raw: Raw) -> None:
    path = f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/podmonitors"
    raw("PUT", "/sim/v1/faults", {"disabled_groups": ["monitoring.coreos.com"]})
    assert raw("GET", path)[0] == 404
    raw("DELETE", "/sim/v1/faults")
    assert raw("GET", path)[0] == 200
