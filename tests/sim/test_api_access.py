"""Simulated API server access control: bearer tokens, RBAC policies from YAML (Role/ClusterRole
scope, subresources, resourceNames), 403 Forbidden bodies, SelfSubjectAccessReview, 401."""

from __future__ import annotations

import json
from typing import Any, TypedDict, Unpack, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim.access import Attributes, policy_from_rbac
from dcgm_sim.server import ApiServer
from tests.sim.conftest import NS, Raw, daemonset, make_client

RBAC = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: migrator, namespace: gpu-operator}
rules:
- apiGroups: ["apps"]
  resources: ["daemonsets"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "update", "delete"]
  resourceNames: ["dcgm-migrate-state"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["create", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: migrator, namespace: gpu-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: migrator}
subjects:
- {kind: ServiceAccount, name: migrator, namespace: gpu-operator}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-reader}
rules:
- apiGroups: [""]
  resources: ["nodes", "pods/status"]
  verbs: ["get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: migrator-nodes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-reader}
subjects:
- {kind: ServiceAccount, name: migrator, namespace: gpu-operator}
"""
USER = "system:serviceaccount:gpu-operator:migrator"


@pytest.fixture
def limited(server: ApiServer) -> client.ApiClient:
    server.access.add_token("limited-token", RBAC)
    return make_client(server.url, "limited-token")


class _Attributes(TypedDict, total=False):
    """The V1ResourceAttributes fields these reviews ask about."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str


def _forbidden(exc: ApiException) -> dict[str, Any]:
    assert exc.status == 403 and exc.body is not None
    body = dict(json.loads(exc.body))
    assert body["reason"] == "Forbidden"
    return body


def test_policy_evaluation_follows_rbac() -> None:
    policy = policy_from_rbac(RBAC)
    assert policy.user == USER

    def allowed(verb: str, group: str, resource: str, ns: str = NS, name: str = "",
                sub: str = "") -> bool:
        return policy.decide(Attributes(USER, verb, group, resource, sub, ns, name)).allowed

    assert allowed("patch", "apps", "daemonsets", name="dcgm")
    assert not allowed("patch", "apps", "daemonsets", ns="default")  # Role: its namespace only
    assert not allowed("update", "apps", "daemonsets")
    assert allowed("get", "", "configmaps", name="dcgm-migrate-state")
    assert not allowed("get", "", "configmaps", name="other")
    assert allowed("list", "", "configmaps")  # from the rule without resourceNames
    assert allowed("get", "", "nodes", ns="")  # ClusterRoleBinding: cluster-wide
    assert allowed("get", "", "pods", ns=NS, sub="status")
    assert not allowed("get", "", "pods", ns=NS)  # pods/status does not grant pods


def test_resource_names_never_match_a_nameless_list() -> None:
    policy = policy_from_rbac("""
kind: ClusterRole
metadata: {name: one}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get, list],
         resourceNames: [only]}]
""", user="u")
    assert not policy.decide(Attributes("u", "list", "", "configmaps", "", NS)).allowed
    assert policy.decide(Attributes("u", "list", "", "configmaps", "", NS, "only")).allowed


def test_bindings_for_other_subjects_grant_nothing() -> None:
    policy = policy_from_rbac(RBAC, user="someone-else")
    assert not policy.decide(Attributes("someone-else", "get", "", "nodes")).allowed


def test_denied_request_is_403_with_the_real_message(limited: client.ApiClient) -> None:
    apps = client.AppsV1Api(limited)
    with pytest.raises(ApiException) as err:
        apps.delete_namespaced_daemon_set("dcgm", NS)
    body = _forbidden(err.value)
    assert body["message"] == (
        f'daemonsets.apps "dcgm" is forbidden: User "{USER}" cannot delete resource '
        '"daemonsets" in API group "apps" in the namespace "gpu-operator"')
    assert body["details"] == {"name": "dcgm", "group": "apps", "kind": "daemonsets"}
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(limited).list_namespaced_pod(NS)
    assert _forbidden(err.value)["message"] == (
        f'pods is forbidden: User "{USER}" cannot list resource "pods" in API group "" in '
        'the namespace "gpu-operator"')
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(limited).list_namespace()
    assert _forbidden(err.value)["message"].endswith("at the cluster scope")


def test_allowed_requests_go_through(limited: client.ApiClient, apps: client.AppsV1Api,
                                     server: ApiServer) -> None:
    # plain-dict bodies: the official client sends a dict as it is
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, daemonset("dcgm")))
    mine = client.AppsV1Api(limited)
    got = mine.read_namespaced_daemon_set("dcgm", NS)
    assert got.metadata is not None
    assert got.metadata.name == "dcgm"
    patched = mine.patch_namespaced_daemon_set("dcgm", NS,
                                               {"metadata": {"labels": {"x": "1"}}})
    assert patched.metadata is not None and patched.metadata.labels is not None
    assert patched.metadata.labels["x"] == "1"
    core = client.CoreV1Api(limited)
    core.create_namespaced_config_map(
        NS, cast(client.V1ConfigMap, {"metadata": {"name": "dcgm-migrate-state"}}))
    core.read_namespaced_config_map("dcgm-migrate-state", NS)
    assert core.list_node().items == []
    users = {r.user for r in server.log.since()}
    assert users == {USER, "sim-admin"}  # user names, never tokens


def test_self_subject_access_review(limited: client.ApiClient) -> None:
    authz = client.AuthorizationV1Api(limited)

    def review(**attrs: Unpack[_Attributes]) -> client.V1SubjectAccessReviewStatus:
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(**attrs)))
        status = authz.create_self_subject_access_review(body).status
        assert status is not None
        return status

    yes = review(verb="patch", group="apps", resource="daemonsets", namespace=NS)
    assert yes.allowed is True and yes.reason is not None
    assert "RBAC: allowed by RoleBinding" in yes.reason
    assert review(verb="delete", group="apps", resource="daemonsets",
                  namespace=NS).allowed is False
    assert review(verb="update", resource="configmaps", namespace=NS,
                  name="dcgm-migrate-state").allowed is True


def test_admin_token_may_do_everything(api: client.ApiClient) -> None:
    status = client.AuthorizationV1Api(api).create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(verb="delete", resource="nodes"))))
    assert status.status is not None
    assert status.status.allowed is True


def test_unknown_token_is_401(raw: Raw) -> None:
    code, body, _ = raw("GET", "/api/v1/namespaces", token="wrong")
    assert code == 401 and body["reason"] == "Unauthorized"


def test_missing_token_is_the_unsecured_user_unless_disabled(server: ApiServer,
                                                              raw: Raw) -> None:
    # kubectl sends no credentials over plain HTTP: served like the old insecure port.
    assert raw("GET", "/api/v1/namespaces", token="")[0] == 200
    assert server.log.since()[-1].user == "system:unsecured"
    server.access.anonymous = None
    code, body, _ = raw("GET", "/api/v1/namespaces", token="")
    assert code == 401 and body["reason"] == "Unauthorized"


def test_tokens_endpoint_adds_a_policy(raw: Raw, server: ApiServer) -> None:
    code, body, _ = raw("POST", "/sim/v1/tokens", {"token": "t2", "rbac": RBAC}, token="")
    assert code == 201 and body["user"] == USER
    code, _, _ = raw("GET", "/api/v1/nodes", token="t2")
    assert code == 200
    code, _, _ = raw("GET", "/api/v1/namespaces/default/configmaps", token="t2")
    assert code == 403
    code, _, _ = raw("POST", "/sim/v1/tokens", {"token": "t3"}, token="")
    assert code == 400


def test_discovery_is_open_to_every_authenticated_user(limited: client.ApiClient) -> None:
    versions = client.CoreApi(limited).get_api_versions()
    assert versions.versions == ["v1"]
