"""Simulated API server discovery: /version, /api, /api/v1, /apis, group and group-version
documents (status subresources, verbs, short names), unknown paths, routing of request paths,
and the age format of kubectl tables."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from dcgm_sim import kinds as simkinds
from dcgm_sim import routing
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from dcgm_sim.tables import human_age
from tests.sim.conftest import Raw, make_client


def test_version(api: client.ApiClient) -> None:
    info = client.VersionApi(api).get_code()
    assert (info.major, info.minor) == ("1", "32")
    assert info.git_version.startswith("v1.32")


def test_core_discovery(raw: Raw, server: object) -> None:
    code, body, headers = raw("GET", "/api")
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert body["kind"] == "APIVersions" and body["versions"] == ["v1"]
    code, body, _ = raw("GET", "/api/v1")
    resources = {r["name"]: r for r in body["resources"]}
    assert body["groupVersion"] == "v1"
    assert set(resources) >= {"pods", "pods/status", "services", "services/status", "nodes",
                              "namespaces", "configmaps", "events"}
    assert "configmaps/status" not in resources
    pods = resources["pods"]
    assert pods["namespaced"] is True and pods["kind"] == "Pod"
    assert pods["singularName"] == "pod" and pods["shortNames"] == ["po"]
    assert set(pods["verbs"]) == {"create", "delete", "deletecollection", "get", "list",
                                  "patch", "update", "watch"}
    assert resources["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert resources["nodes"]["namespaced"] is False


def test_group_discovery(api: client.ApiClient, raw: Raw) -> None:
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert set(groups) == {k.group for k in simkinds.ALL if k.group}
    nvidia = groups["nvidia.com"]
    assert [v.version for v in nvidia.versions] == ["v1", "v1alpha1"]
    assert nvidia.preferred_version is not None  # the group names a preferred version
    assert nvidia.preferred_version.group_version == "nvidia.com/v1"
    code, body, _ = raw("GET", "/apis/apps")
    assert code == 200 and body["kind"] == "APIGroup" and body["name"] == "apps"
    code, body, _ = raw("GET", "/apis/apps/v1")
    assert {r["name"] for r in body["resources"]} == {
        "daemonsets", "daemonsets/status", "controllerrevisions", "deployments",
        "deployments/status", "replicasets", "replicasets/status"}
    code, body, _ = raw("GET", "/apis/authorization.k8s.io/v1")
    assert body["resources"][0]["verbs"] == ["create"]
    code, body, _ = raw("GET", "/apis/nvidia.com/v1alpha1")
    assert [r["name"] for r in body["resources"]] == ["gpuclusters", "gpuclusters/status"]


def test_unknown_paths_are_404_status(raw: Raw) -> None:
    for path in ("/apis/policy/v1", "/apis/apps/v2/daemonsets", "/api/v1/secrets",
                 "/openapi/v3/apis/policy/v1", "/nothing"):
        code, body, _ = raw("GET", path)
        assert code == 404, path
        assert body["reason"] == "NotFound"


def test_cluster_scoped_kind_under_a_namespace_is_404(raw: Raw) -> None:
    assert raw("GET", "/api/v1/namespaces/default/nodes")[0] == 404


def test_health_endpoints(raw: Raw) -> None:
    for path in ("/healthz", "/readyz", "/livez"):
        code, body, _ = raw("GET", path)
        assert (code, body) == (200, "ok")


def test_routing_matches_the_real_request_info() -> None:
    info = routing.parse("GET", "/apis/apps/v1/namespaces/ns/daemonsets/x/status")
    assert (info.verb, info.group, info.resource, info.namespace, info.name,
            info.subresource) == ("get", "apps", "daemonsets", "ns", "x", "status")
    info = routing.parse("GET", "/api/v1/namespaces/foo")
    assert (info.resource, info.name, info.namespace) == ("namespaces", "foo", "foo")
    info = routing.parse("GET", "/api/v1/namespaces/foo/status")
    assert (info.resource, info.name, info.subresource) == ("namespaces", "foo", "status")
    assert routing.parse("GET", "/api/v1/pods?watch=true").verb == "watch"
    assert routing.parse("GET", "/api/v1/watch/namespaces/ns/pods").verb == "watch"
    assert routing.parse("DELETE", "/api/v1/namespaces/ns/pods").verb == "deletecollection"
    listed = routing.parse("GET", "/api/v1/namespaces/ns/pods?fieldSelector=metadata.name%3Dp")
    assert (listed.verb, routing.authz_name(listed)) == ("list", "p")
    assert not routing.parse("GET", "/apis/apps/v1").is_resource


def test_human_age() -> None:
    now = datetime(2025, 1, 10, 12, 0, 0, tzinfo=UTC)
    assert human_age("2025-01-10T11:59:15Z", now) == "45s"
    assert human_age("2025-01-10T11:55:30Z", now) == "4m30s"
    assert human_age("2025-01-10T11:00:00Z", now) == "60m"
    assert human_age("2025-01-10T07:30:00Z", now) == "4h30m"
    assert human_age("2025-01-07T09:00:00Z", now) == "3d3h"


@pytest.mark.parametrize("release", ["v1.32", "v1.34"])
def test_the_api_servers_release_decides_a_templates_null_creation_timestamp(
        store: Store, release: str) -> None:
    """Up to v1.33 the API server writes a pod template's zero creationTimestamp as `null`;
    v1.34 omits it (kubernetes/kubernetes#130989), in reads and in a write's answer alike,
    while the stored object (what the sim's v1.32 controllers read) keeps it."""
    server = ApiServer(store, release=release)
    server.start()
    try:
        with make_client(server.url) as api:
            assert client.VersionApi(api).get_code().git_version.startswith(release)
        raw = Raw(server.url)  # plain HTTP: the client's models hide a null from an absent field
        code, created, _ = raw("POST", "/apis/apps/v1/namespaces/default/daemonsets", {
            "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
        assert code == 201, created
        read = raw("GET", "/apis/apps/v1/namespaces/default/daemonsets/d")[1]
    finally:
        server.stop()
    for served in (created, read):
        meta = served["spec"]["template"]["metadata"]
        assert ("creationTimestamp" in meta) is (release == "v1.32"), meta
    stored = store.get(simkinds.DAEMONSET, "default", "d")
    assert stored["spec"]["template"]["metadata"]["creationTimestamp"] is None
