"""Simulated API server faults (error rate with 429 Retry-After, fail-the-Nth-write, disabled API
groups, latency setting) and the request log, in process and through `/sim/v1`."""

from __future__ import annotations

from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim import writes
from dcgm_sim.faults import Faults, FaultsError
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Raw


def _cm(body: dict[str, Any]) -> client.V1ConfigMap:
    """A plain-dict ConfigMap body: the official client sends a dict as it is."""
    return cast(client.V1ConfigMap, body)


def test_error_rate_injects_the_chosen_codes(server: ApiServer, raw: Raw) -> None:
    server.faults.update(error_rate=1.0, error_codes=[429], retry_after_seconds=7)
    code, body, headers = raw("GET", "/api/v1/namespaces")
    assert code == 429
    assert headers["Retry-After"] == "7"
    assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 7
    server.faults.update(error_codes=[503])
    assert raw("GET", "/api/v1/namespaces")[0] == 503
    server.faults.update(error_codes=[500])
    code, body, _ = raw("GET", "/api/v1/namespaces")
    assert code == 500 and body["reason"] == "InternalError"
    server.faults.reset()
    assert raw("GET", "/api/v1/namespaces")[0] == 200


def test_error_rate_is_seeded_and_partial() -> None:
    def run() -> list[int | None]:
        f = Faults(error_rate=0.5, seed=42)
        return [f.pick_error(counts_as_write=False) for _ in range(200)]

    first = run()
    assert first == run()  # same seed, same requests: same failures
    failures = sum(1 for c in first if c is not None)
    assert 50 < failures < 150
    assert {c for c in first if c is not None} <= {500, 503, 429}


def test_fail_nth_write_fails_once(store: Store, server: ApiServer,
                                   core: client.CoreV1Api) -> None:
    server.faults.update(fail_nth_write=2)
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "one"}}))
    core.list_namespaced_config_map(NS)  # reads do not count
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "dry"}}), dry_run="All")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "two"}}))
    assert err.value.status == 500
    assert store.find(kinds.CONFIGMAP, NS, "two") is None  # the failed write did nothing
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "two"}}))
    assert server.faults.snapshot()["fail_nth_write"] is None


def test_disabled_group_is_absent_and_404(store: Store, server: ApiServer, raw: Raw) -> None:
    writes.create(store, kinds.CRD, {"metadata": {"name": "servicemonitors.monitoring.coreos.com"},
                                     "spec": {"group": "monitoring.coreos.com"}})
    code, body, _ = raw("PUT", "/sim/v1/faults", {"disabled_groups": ["monitoring.coreos.com"]})
    assert code == 200 and body["disabled_groups"] == ["monitoring.coreos.com"]
    groups = [g["name"] for g in raw("GET", "/apis")[1]["groups"]]
    assert "monitoring.coreos.com" not in groups and "apps" in groups
    code, body, _ = raw("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors")
    assert code == 404 and body["reason"] == "NotFound"
    assert raw("GET", "/apis/monitoring.coreos.com/v1")[0] == 404
    crds = raw("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")[1]["items"]
    assert crds == []
    raw("DELETE", "/sim/v1/faults")
    assert raw("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{NS}/servicemonitors")[0] == 200


def test_faults_endpoint_validates(raw: Raw) -> None:
    assert raw("PUT", "/sim/v1/faults", {"error_rate": 2})[0] == 400
    assert raw("PUT", "/sim/v1/faults", {"error_codes": [404]})[0] == 400
    assert raw("PUT", "/sim/v1/faults", {"bogus": 1})[0] == 400
    code, body, _ = raw("PUT", "/sim/v1/faults", {"latency_ms": 5, "fail_nth_write": 3})
    assert code == 200 and (body["latency_ms"], body["fail_nth_write"]) == (5.0, 3)
    with pytest.raises(FaultsError):
        Faults(error_codes=[418])


def test_sim_endpoints_are_never_faulted_checked_or_logged(server: ApiServer, raw: Raw) -> None:
    server.faults.update(error_rate=1.0)
    assert raw("GET", "/sim/v1/faults", token="")[0] == 200
    assert raw("GET", "/sim/v1/requests", token="nobody")[0] == 200
    assert raw("PUT", "/sim/v1/faults", {"error_rate": 0})[0] == 200
    assert server.log.since() == []


def test_request_log_records_requests(server: ApiServer, core: client.CoreV1Api) -> None:
    start = server.log.last_seq
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    core.patch_namespaced_config_map("cm", NS, {"data": {"a": "1"}}, dry_run="All")
    core.read_namespaced_config_map("cm", NS)
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("nope", NS)
    core.list_namespaced_config_map(NS, label_selector="a=b")
    records = server.log.since(start)
    assert [(r.method, r.verb, r.resource, r.name, r.code) for r in records] == [
        ("POST", "create", "configmaps", "", 201),
        ("PATCH", "patch", "configmaps", "cm", 200),
        ("GET", "get", "configmaps", "cm", 200),
        ("GET", "get", "configmaps", "nope", 404),
        ("GET", "list", "configmaps", "", 200),
    ]
    assert [r.dry_run for r in records] == [False, True, False, False, False]
    assert all(r.namespace == NS and r.group == "" and r.user == "sim-admin" for r in records)
    assert all(r.bytes_sent > 0 for r in records)
    assert "labelSelector=a%3Db" in records[-1].query
    assert [r.verb for r in server.log.writes(since=start)] == ["create"]


def test_request_log_over_http(server: ApiServer, core: client.CoreV1Api, raw: Raw) -> None:
    core.create_namespaced_config_map(NS, _cm({"metadata": {"name": "cm"}}))
    mark = server.log.last_seq
    core.delete_namespaced_config_map("cm", NS)
    code, body, _ = raw("GET", f"/sim/v1/requests?since={mark}")
    assert code == 200
    assert [(r["verb"], r["resource"], r["name"], r["code"]) for r in body] == [
        ("delete", "configmaps", "cm", 200)]
    assert set(body[0]) >= {"seq", "method", "path", "verb", "group", "resource",
                            "subresource", "namespace", "name", "code", "dry_run",
                            "bytes_sent", "user"}
    assert raw("DELETE", "/sim/v1/requests")[0] == 200
    assert raw("GET", "/sim/v1/requests")[1] == []
    assert server.log.last_seq == mark + 1  # sequence numbers keep increasing


def test_status_subresource_and_watch_are_logged(server: ApiServer, raw: Raw) -> None:
    raw("GET", "/apis/apps/v1/namespaces/gpu-operator/daemonsets/x/status")
    raw("GET", "/api/v1/namespaces?watch=1&timeoutSeconds=1&resourceVersion=1")
    recs = server.log.since()
    assert (recs[0].verb, recs[0].subresource, recs[0].code) == ("get", "status", 404)
    assert (recs[1].verb, recs[1].resource, recs[1].open) == ("watch", "namespaces", False)
    assert recs[1].bytes_sent > 0  # the two namespaces created after resourceVersion 1


def test_faults_settable_through_the_constructor(store: Store) -> None:
    with ApiServer(store, faults=Faults(disabled_groups=["nvidia.com"])) as server:
        groups = Raw(server.url)("GET", "/apis")[1]["groups"]
        assert "nvidia.com" not in [g["name"] for g in groups]
        assert Raw(server.url)("GET", "/apis/nvidia.com/v1/clusterpolicies")[0] == 404
