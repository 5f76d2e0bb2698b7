"""RBAC read from the cluster at every request (dcgm_sim/rbac.py, after kubernetes'
plugin/pkg/auth/authorizer/rbac/rbac.go and pkg/registry/rbac/validation/rule.go): a binding
created, changed or deleted through the API decides the next request; subjects by User, Group
(`system:serviceaccounts[:<ns>]`, `system:authenticated`) and ServiceAccount; rules by verb,
group, resource (`*`, `pods/log`, `*/status`), resourceNames and nonResourceURLs; the reason
names the binding as upstream's describers do."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim.cluster import SimCluster
from dcgm_sim.rbac import rule_allows
from dcgm_sim.server import ApiServer
from tests.sim.conftest import NS, make_client

SA = f"system:serviceaccount:{NS}:reader"
RBAC_API = "rbac.authorization.k8s.io"


def _role(name: str, rules: list[dict[str, Any]]) -> Any:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": NS}, "rules": rules}


def _binding(name: str, role: str, subjects: list[dict[str, str]],
             role_kind: str = "Role") -> Any:
    return {"apiVersion": f"{RBAC_API}/v1", "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": NS},
            "roleRef": {"apiGroup": RBAC_API, "kind": role_kind, "name": role},
            "subjects": subjects}


# (rule, request attributes, allowed): RuleAllows as pkg/apis/rbac/v1/evaluation_helpers.go
# decides each part (VerbMatches, APIGroupMatches, ResourceMatches, ResourceNameMatches,
# NonResourceURLMatches).
PODS = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
RULES: list[tuple[dict[str, Any], dict[str, str], bool]] = [
    (PODS, {"verb": "get", "resource": "pods"}, True),
    (PODS, {"verb": "list", "resource": "pods"}, False),
    (PODS, {"verb": "get", "resource": "pods", "group": "apps"}, False),
    (PODS, {"verb": "get", "resource": "pods", "subresource": "log"}, False),
    ({**PODS, "resources": ["pods/log"]}, {"verb": "get", "resource": "pods",
                                           "subresource": "log"}, True),
    ({**PODS, "resources": ["pods/log"]}, {"verb": "get", "resource": "pods"}, False),
    ({**PODS, "resources": ["*/status"]}, {"verb": "get", "resource": "nodes",
                                           "subresource": "status"}, True),
    ({**PODS, "resources": ["*/status"]}, {"verb": "get", "resource": "nodes"}, False),
    ({**PODS, "resources": ["*"]}, {"verb": "get", "resource": "pods",
                                    "subresource": "log"}, True),
    ({**PODS, "verbs": ["*"]}, {"verb": "deletecollection", "resource": "pods"}, True),
    ({**PODS, "apiGroups": ["*"]}, {"verb": "get", "resource": "pods", "group": "x.io"}, True),
    ({**PODS, "resourceNames": ["a"]}, {"verb": "get", "resource": "pods", "name": "a"}, True),
    ({**PODS, "resourceNames": ["a"]}, {"verb": "get", "resource": "pods", "name": "b"}, False),
    ({**PODS, "resourceNames": ["a"]}, {"verb": "get", "resource": "pods"}, False),
    ({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, {"verb": "get", "path": "/healthz"},
     True),
    ({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}, {"verb": "get", "path": "/apis/x/v1"},
     True),
    ({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}, {"verb": "get", "path": "/api"},
     False),
    ({"nonResourceURLs": ["*"], "verbs": ["get"]}, {"verb": "post", "path": "/x"}, False),
    (PODS, {"verb": "get", "path": "/api"}, False),  # a resource rule grants no URL
]


@pytest.mark.parametrize(("rule", "attrs", "allowed"), RULES)
def test_rule_allows_as_upstream(rule: dict[str, Any], attrs: dict[str, str],
                                 allowed: bool) -> None:
    verb = attrs.pop("verb")
    assert rule_allows(rule, verb=verb, **attrs) is allowed


def _review(server: ApiServer, user: str, groups: list[str], **attrs: str) -> Any:
    resource = client.V1ResourceAttributes(**cast(dict[str, Any], attrs))
    body = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=groups, resource_attributes=resource))
    status = client.AuthorizationV1Api(make_client(server.url)) \
        .create_subject_access_review(body).status
    return status


def _sa_may(server: ApiServer, verb: str, resource: str, name: str = "") -> bool:
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]
    attrs = {"verb": verb, "resource": resource, "namespace": NS}
    if name:
        attrs["name"] = name
    return bool(_review(server, SA, groups, **attrs).allowed)


def test_objects_written_through_the_api_decide_at_once(server: ApiServer) -> None:
    rbac = client.RbacAuthorizationV1Api(make_client(server.url))
    assert not _sa_may(server, "get", "pods")
    rbac.create_namespaced_role(NS, _role("reader", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]))
    assert not _sa_may(server, "get", "pods")  # a Role alone grants nothing
    rbac.create_namespaced_role_binding(NS, _binding(
        "reader", "reader", [{"kind": "ServiceAccount", "name": "reader"}]))
    status = _review(server, SA, [], verb="get", resource="pods", namespace=NS)
    assert status.allowed is True
    # describeSubject: a ServiceAccount is "name/namespace", a RoleBinding "name/namespace"
    assert status.reason == (f'RBAC: allowed by RoleBinding "reader/{NS}" of Role "reader" to '
                             f'ServiceAccount "reader/{NS}"')
    assert not _sa_may(server, "get", "pods/other-namespace") and not _review(
        server, SA, [], verb="get", resource="pods", namespace="default").allowed
    # the Role changed: the next question sees it
    rbac.patch_namespaced_role("reader", NS, [{"op": "replace", "path": "/rules/0/verbs",
                                               "value": ["list"]}])
    assert not _sa_may(server, "get", "pods") and _sa_may(server, "list", "pods")
    # the Role deleted: its binding grants nothing (GetRoleReferenceRules fails)
    rbac.delete_namespaced_role("reader", NS)
    assert not _sa_may(server, "list", "pods")


def test_subjects_by_group_user_and_service_account(server: ApiServer) -> None:
    rbac = client.RbacAuthorizationV1Api(make_client(server.url))
    rbac.create_cluster_role(client.V1ClusterRole(metadata=client.V1ObjectMeta(name="logs"),
                                                  rules=[client.V1PolicyRule(
                                                      api_groups=[""], resources=["pods/log"],
                                                      verbs=["get"])]))
    rbac.create_namespaced_role_binding(NS, _binding(
        "all-accounts-here", "logs", [{"kind": "Group", "name": f"system:serviceaccounts:{NS}",
                                       "apiGroup": RBAC_API}], role_kind="ClusterRole"))
    log = {"verb": "get", "resource": "pods", "subresource": "log", "namespace": NS}
    sa_groups = ["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                 "system:authenticated"]
    assert _review(server, SA, sa_groups, **log).allowed is True
    other_ns = ["system:serviceaccounts", "system:serviceaccounts:default",
                "system:authenticated"]
    assert _review(server, "system:serviceaccount:default:x", other_ns, **log).allowed is False
    assert _review(server, "alice", ["system:authenticated"], **log).allowed is False
    # a ClusterRoleBinding to a User: everywhere, and only that user
    rbac.create_cluster_role_binding(cast(client.V1ClusterRoleBinding, {
        "apiVersion": f"{RBAC_API}/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "alice-logs"},
        "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": "logs"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": RBAC_API}]}))
    status = _review(server, "alice", [], **{**log, "namespace": "default"})
    assert status.allowed is True
    assert status.reason == ('RBAC: allowed by ClusterRoleBinding "alice-logs" of ClusterRole '
                             '"logs" to User "alice"')
    assert _review(server, "bob", [], **log).allowed is False
    # a ServiceAccount subject of a ClusterRoleBinding needs its namespace (appliesToUser)
    rbac.create_cluster_role_binding(cast(client.V1ClusterRoleBinding, {
        "apiVersion": f"{RBAC_API}/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "no-namespace"},
        "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": "logs"},
        "subjects": [{"kind": "ServiceAccount", "name": "x"}]}))
    assert _review(server, "system:serviceaccount:default:x", [], **{
        **log, "namespace": "default"}).allowed is False


def test_a_token_of_an_identity_follows_the_store(server: ApiServer) -> None:
    """A token (as a pod's ServiceAccount gets) is refused, then allowed once its binding is
    written through the API, then refused again once the binding is deleted."""
    token = server.access.issue_token(SA)
    core = client.CoreV1Api(make_client(server.url, token))
    with pytest.raises(ApiException) as refused:
        core.list_namespaced_pod(NS)
    assert refused.value.status == 403
    rbac = client.RbacAuthorizationV1Api(make_client(server.url))
    rbac.create_namespaced_role(NS, _role("reader", [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]))
    rbac.create_namespaced_role_binding(NS, _binding(
        "reader", "reader", [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]))
    assert core.list_namespaced_pod(NS).items == []
    # discovery is granted by the built-in system:discovery binding, not by the Role
    assert client.CoreApi(make_client(server.url, token)).get_api_versions().versions == ["v1"]
    rbac.delete_namespaced_role_binding("reader", NS)
    with pytest.raises(ApiException) as again:
        core.list_namespaced_pod(NS)
    assert again.value.status == 403


def test_the_bootstrap_roles_are_built_in_and_a_stored_one_replaces_them(
        server: ApiServer) -> None:
    """`system:masters` is the admin; `system:basic-user` lets any authenticated user ask
    SelfSubjectAccessReviews; a stored binding of the same name takes the built-in's place."""
    authenticated = ["system:authenticated"]
    ssar = {"verb": "create", "group": "authorization.k8s.io",
            "resource": "selfsubjectaccessreviews"}
    assert _review(server, "bob", authenticated, **ssar).reason == (
        'RBAC: allowed by ClusterRoleBinding "system:basic-user" of ClusterRole '
        '"system:basic-user" to Group "system:authenticated"')
    assert _review(server, "bob", [], **ssar).allowed is False
    rbac = client.RbacAuthorizationV1Api(make_client(server.url))
    assert rbac.list_cluster_role_binding().items == []  # built in, not stored
    rbac.create_cluster_role_binding(cast(client.V1ClusterRoleBinding, {
        "apiVersion": f"{RBAC_API}/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:basic-user"},
        "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": "system:basic-user"},
        "subjects": [{"kind": "User", "name": "carol", "apiGroup": RBAC_API}]}))
    assert _review(server, "bob", authenticated, **ssar).allowed is False
    assert _review(server, "carol", [], **ssar).allowed is True


def test_load_rbac_creates_stored_objects(make_sim: Callable[..., SimCluster]) -> None:
    """`sim serve --rbac` / `SimCluster.load_rbac`: the objects land in the store, where
    `kubectl get` finds them and a later delete takes their grant away."""
    sim = make_sim(nodes=0, stack="none", tls=False)
    docs = [_role("reader", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]),
            _binding("reader", "reader", [{"kind": "ServiceAccount", "name": "reader"}])]

    assert sim.load_rbac(yaml.safe_dump_all(copy.deepcopy(docs))) == [SA]
    assert _sa_may(sim.server, "list", "pods")
    rbac = client.RbacAuthorizationV1Api(make_client(sim.url))
    assert [b.metadata.name for b in rbac.list_namespaced_role_binding(NS).items
            if b.metadata] == ["reader"]
    rbac.delete_namespaced_role_binding("reader", NS)
    assert not _sa_may(sim.server, "list", "pods")
