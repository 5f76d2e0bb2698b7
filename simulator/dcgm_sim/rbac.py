"""The RBAC authorizer over the store: Roles, ClusterRoles and their bindings as they are now.

Each question is answered from the objects in the store at the moment it is asked, so a Role
or binding created, changed or deleted through the API takes effect with the next request, as
the API server's authorizer does from its informers. After kubernetes/kubernetes:

- `plugin/pkg/auth/authorizer/rbac/rbac.go` `RBACAuthorizer.Authorize` (the first rule that
  allows wins, with the reason `RBAC: allowed by <binding>`; no allowing rule is no opinion, a
  denial here) and `RuleAllows` (verbs, apiGroups, `resource/subresource`, resourceNames;
  `nonResourceURLs` with a trailing `*` for a non-resource request);
- `pkg/apis/rbac/v1/evaluation_helpers.go` `VerbMatches`, `APIGroupMatches`, `ResourceMatches`
  (`*`, exact, `*/<subresource>`), `ResourceNameMatches` (an empty list matches any name, a
  list never matches a request without one), `NonResourceURLMatches`;
- `pkg/registry/rbac/validation/rule.go` `VisitRulesFor` (every ClusterRoleBinding, then the
  RoleBindings of the request's namespace; a binding whose role is missing grants nothing),
  `GetRoleReferenceRules` (a RoleBinding's `Role` is looked up in its own namespace),
  `appliesTo`/`appliesToUser` (User by name, Group by membership, ServiceAccount by
  `system:serviceaccount:<ns>:<name>` with the binding's namespace as the default) and the
  describers that name the allowing binding.

`BOOTSTRAP` is what the API server's `rbac/bootstrap-roles` post-start hook writes
(`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go` `ClusterRoles`,
`ClusterRoleBindings`): `cluster-admin` bound to `system:masters`, discovery, basic-user and
public-info-viewer bound to `system:authenticated`. Unlike upstream they are built into the
authorizer, not written to the store (so a store holds only what was written to it, and its
watch window and resourceVersions are the tests'); a stored ClusterRole or ClusterRoleBinding
of the same name takes the built-in one's place. Aggregated ClusterRoles (`aggregationRule`)
are not aggregated: a ClusterRole's own `rules` are what it grants.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.jsoncopy import clone
from dcgm_sim.store import Resource, Store

Obj = dict[str, Any]
SA_PREFIX = "system:serviceaccount:"


def verb_matches(rule: Obj, verb: str) -> bool:
    verbs = rule.get("verbs") or ()
    return "*" in verbs or verb in verbs


def api_group_matches(rule: Obj, group: str) -> bool:
    groups = rule.get("apiGroups") or ()
    return "*" in groups or group in groups


def resource_matches(rule: Obj, combined: str, subresource: str) -> bool:
    for resource in rule.get("resources") or ():
        if resource in ("*", combined):
            return True
        if subresource and resource == f"*/{subresource}":
            return True
    return False


def resource_name_matches(rule: Obj, name: str) -> bool:
    names = rule.get("resourceNames") or ()
    return not names or name in names


def non_resource_url_matches(rule: Obj, path: str) -> bool:
    for url in rule.get("nonResourceURLs") or ():
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url.rstrip("*")):
            return True
    return False


def rule_allows(rule: Obj, *, verb: str, group: str = "", resource: str = "",
                subresource: str = "", name: str = "", path: str = "") -> bool:
    """`RuleAllows`: a resource request when `resource` is set, else one for `path`."""
    if resource:
        combined = f"{resource}/{subresource}" if subresource else resource
        return (verb_matches(rule, verb) and api_group_matches(rule, group)
                and resource_matches(rule, combined, subresource)
                and resource_name_matches(rule, name))
    return verb_matches(rule, verb) and non_resource_url_matches(rule, path)


def applies_to_user(user: str, groups: Iterable[str], subject: Obj, namespace: str) -> bool:
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "User":
        return bool(user == name)
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user == f"{SA_PREFIX}{sa_namespace}:{name}"
    return False


def describe_subject(subject: Obj, binding_namespace: str) -> str:
    """`describeSubject`, quirk included: a ServiceAccount is named `name/namespace`."""
    kind, name = subject.get("kind", ""), subject.get("name", "")
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _describe(binding: Obj, subject: Obj) -> str:
    meta, ref = binding.get("metadata") or {}, binding.get("roleRef") or {}
    if binding.get("kind") == "RoleBinding":
        namespace = meta.get("namespace", "")
        where = f'{meta.get("name", "")}/{namespace}'
    else:
        namespace, where = "", meta.get("name", "")
    return (f'{binding.get("kind")} "{where}" of {ref.get("kind", "")} "{ref.get("name", "")}" '
            f"to {describe_subject(subject, namespace)}")


class StoreAuthorizer:
    """`VisitRulesFor` + `RuleAllows` over the RBAC objects in one store, read per question."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _role_rules(self, ref: Obj, namespace: str) -> list[Obj] | None:
        """`GetRoleReferenceRules`; None for a missing role or an unknown kind."""
        name = ref.get("name", "")
        if ref.get("kind") == "Role":
            role = self.store.find(kinds.ROLE, namespace, name)
        elif ref.get("kind") == "ClusterRole":
            role = (self.store.find(kinds.CLUSTER_ROLE, None, name)
                    or _BUILT_IN.get(("ClusterRole", name)))
        else:
            return None
        return None if role is None else list(role.get("rules") or [])

    def _bindings(self, namespace: str) -> Iterable[tuple[Obj, str]]:
        cluster, _ = self.store.list(kinds.CLUSTER_ROLE_BINDING)
        stored = {b["metadata"]["name"] for b in cluster}
        yield from ((b, "") for (kind, name), b in _BUILT_IN.items()
                    if kind == "ClusterRoleBinding" and name not in stored)
        yield from ((b, "") for b in cluster)
        if namespace:
            local, _ = self.store.list(kinds.ROLE_BINDING, namespace)
            yield from ((b, namespace) for b in local)

    def reason_allowed(self, user: str, groups: tuple[str, ...], *, verb: str,
                       namespace: str = "", **attrs: str) -> str:
        """`RBAC: allowed by ...` for the first rule that allows the request, else ""."""
        for binding, binding_ns in self._bindings(namespace):
            subject = next((s for s in binding.get("subjects") or []
                            if applies_to_user(user, groups, s, binding_ns)), None)
            if subject is None:
                continue
            rules = self._role_rules(binding.get("roleRef") or {}, binding_ns)
            for rule in rules or ():
                if rule_allows(rule, verb=verb, **attrs):
                    return f"RBAC: allowed by {_describe(binding, subject)}"
        return ""


def _cluster_role(name: str, rules: list[Obj]) -> Obj:
    return {"apiVersion": kinds.CLUSTER_ROLE.api_version, "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "rules": rules}


def _cluster_binding(name: str, *groups: str) -> Obj:
    return {"apiVersion": kinds.CLUSTER_ROLE_BINDING.api_version,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                         "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
                         for g in groups]}


_DISCOVERY_URLS = ["/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi",
                   "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"]
BOOTSTRAP: tuple[Obj, ...] = (
    _cluster_role("cluster-admin", [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
        {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
    _cluster_role("system:discovery", [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}]),
    _cluster_role("system:basic-user", [
        {"apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
         "verbs": ["create"]}]),
    _cluster_role("system:public-info-viewer", [
        {"nonResourceURLs": ["/livez", "/readyz", "/healthz", "/version", "/version/"],
         "verbs": ["get"]}]),
    _cluster_binding("cluster-admin", "system:masters"),
    _cluster_binding("system:discovery", "system:authenticated"),
    _cluster_binding("system:basic-user", "system:authenticated"),
    _cluster_binding("system:public-info-viewer", "system:authenticated",
                     "system:unauthenticated"),
)


_BUILT_IN: dict[tuple[str, str], Obj] = {(d["kind"], d["metadata"]["name"]): d
                                         for d in BOOTSTRAP}


def _kind_of(doc: Obj) -> Resource | None:
    return {"Role": kinds.ROLE, "RoleBinding": kinds.ROLE_BINDING,
            "ClusterRole": kinds.CLUSTER_ROLE,
            "ClusterRoleBinding": kinds.CLUSTER_ROLE_BINDING}.get(str(doc.get("kind")))


def install(store: Store, docs: Iterable[Obj]) -> None:
    """Create or replace each RBAC object in `docs` (others are ignored), as `kubectl apply`
    leaves them: the authorizer reads them from the store at the next request."""
    for doc in docs:
        kind = _kind_of(doc)
        if kind is None:
            continue
        meta = doc.get("metadata") or {}
        namespace = meta.get("namespace") or ("default" if kind.namespaced else None)
        body = clone(doc)
        if kind.namespaced:
            body["metadata"]["namespace"] = namespace
        current = store.find(kind, namespace, meta.get("name", ""))
        if current is None:
            store.create(kind, body)
        else:
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            store.update(kind, body)
