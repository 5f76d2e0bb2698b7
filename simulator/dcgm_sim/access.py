"""Bearer tokens and RBAC: who is calling, and may they do this?

A token names a `Policy`: a user, its groups, and how the request is authorised. As on a real
API server, the privileged group `system:masters` may do anything (the privileged-group
authorizer runs before RBAC), and everyone else is judged by the Roles, ClusterRoles and
bindings in the store at that request (`rbac.StoreAuthorizer`, attached by the `ApiServer`):
a binding created, changed or deleted through the API counts at once. `issue_token` (the
tokens of `SimCluster.kubeconfig_for` and of the pods' ServiceAccounts) and impersonated users
(`impersonation`) are judged by the store alone.

Convenience of the sim (not Kubernetes): `add_token` gives a token rules of its own, parsed
from RBAC YAML and never stored (like a static token file plus a webhook authorizer), on top
of what the store grants its user; YAML with roles but no bindings binds every ClusterRole
cluster-wide and every Role in its namespace to that token's user. The rules follow the same
`RuleAllows` (`rbac.rule_allows`): a Role's rules apply in its binding's namespace,
`resources` entries may name `resource/subresource`, `resourceNames` only match requests that
carry a name (so `list` and `create` cannot be restricted by name, while a `metadata.name=`
field selector names a list or watch).

Requests without credentials: kubectl never sends a token over plain HTTP (client-go only
attaches credentials to TLS connections), so by default such a request is served as
`system:unsecured` with full access, as the API server's old insecure port did. A wrong token is
still 401. Set `AccessControl(allow_unauthenticated=False)` (or `.anonymous = None`) to make a
missing token 401 too; a policy registered for the token "" takes precedence.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from dcgm_sim.rbac import StoreAuthorizer, rule_allows

ADMIN_TOKEN = "sim-admin-token"
ADMIN_USER = "sim-admin"
UNSECURED_USER = "system:unsecured"


@dataclass(frozen=True)
class Attributes:
    """One authorization question, as the real authorizer receives it."""

    user: str
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # a non-resource request (no `resource`): its URL path

    def rule_attributes(self) -> dict[str, str]:
        """What `rbac.rule_allows` reads, beside the verb."""
        if self.resource:
            return {"group": self.group, "resource": self.resource,
                    "subresource": self.subresource, "name": self.name}
        return {"path": self.path}


@dataclass(frozen=True)
class Rule:
    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    def allows(self, a: Attributes) -> bool:
        rule = {"apiGroups": self.api_groups, "resources": self.resources, "verbs": self.verbs,
                "resourceNames": self.resource_names, "nonResourceURLs": self.non_resource_urls}
        return rule_allows(rule, verb=a.verb, **a.rule_attributes())


@dataclass(frozen=True)
class Grant:
    """Rules in force in one namespace ("" = every namespace and cluster scope)."""

    rule: Rule
    namespace: str
    source: str  # e.g. 'ClusterRoleBinding "x" of ClusterRole "y" to User "u"'


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class Policy:
    """Who a token (or an impersonation) is, and what decides for it: `system:masters`, the
    token's own rules (`grants`, a sim convenience), then the store's RBAC (`rbac`)."""

    user: str
    groups: tuple[str, ...] = ("system:authenticated",)
    grants: tuple[Grant, ...] = ()
    superuser: bool = False
    rbac: StoreAuthorizer | None = field(default=None, compare=False, repr=False)

    def decide(self, a: Attributes) -> Decision:
        if self.superuser:
            return Decision(True, f'allowed: user "{self.user}" is in group "system:masters"')
        for grant in self.grants:
            if grant.namespace and grant.namespace != a.namespace:
                continue
            if grant.rule.allows(a):
                return Decision(True, f"RBAC: allowed by {grant.source}")
        if self.rbac is not None:
            reason = self.rbac.reason_allowed(self.user, self.groups, verb=a.verb,
                                              namespace=a.namespace, **a.rule_attributes())
            if reason:
                return Decision(True, reason)
        return Decision(False, "")


def admin_policy(user: str = ADMIN_USER) -> Policy:
    return Policy(user, ("system:masters", "system:authenticated"), superuser=True)


def _rules(doc: dict[str, Any]) -> list[Rule]:
    out = []
    for r in doc.get("rules") or []:
        out.append(Rule(
            tuple(r.get("apiGroups") or ()), tuple(r.get("resources") or ()),
            tuple(r.get("verbs") or ()), tuple(r.get("resourceNames") or ()),
            tuple(r.get("nonResourceURLs") or ()),
        ))
    return out


def _subject_name(subject: dict[str, Any], binding_ns: str) -> tuple[str, str]:
    kind = subject.get("kind", "")
    name = subject.get("name", "")
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return "user", f"system:serviceaccount:{ns}:{name}"
    return ("group", name) if kind == "Group" else ("user", name)


def _describe_subject(subject: dict[str, Any]) -> str:
    kind = subject.get("kind", "User")
    if kind == "ServiceAccount":
        return f'ServiceAccount "{subject.get("namespace", "")}/{subject.get("name", "")}"'
    return f'{kind} "{subject.get("name", "")}"'


def _groups_for(user: str) -> tuple[str, ...]:
    groups = ["system:authenticated"]
    if user.startswith("system:serviceaccount:"):
        ns = user.split(":")[2]
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{ns}"]
    return tuple(groups)


def rbac_documents(rbac_yaml: str) -> list[dict[str, Any]]:
    """The RBAC objects in YAML (one or more documents, or `kind: List`)."""
    docs: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(rbac_yaml):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            docs.extend(d for d in doc.get("items") or [] if isinstance(d, dict))
        elif isinstance(doc, dict):
            docs.append(doc)
    return docs


def _bindings(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") in ("RoleBinding", "ClusterRoleBinding")]


def subjects(docs: list[dict[str, Any]]) -> list[str]:
    """The user names the bindings grant to (ServiceAccounts as
    `system:serviceaccount:<ns>:<name>`), in order, without groups."""
    out: list[str] = []
    for b in _bindings(docs):
        ns = (b.get("metadata") or {}).get("namespace", "") if b["kind"] == "RoleBinding" else ""
        for s in b.get("subjects") or []:
            kind, name = _subject_name(s, ns)
            if kind == "user" and name not in out:
                out.append(name)
    return out


def policy_from_rbac(rbac_yaml: str, user: str | None = None) -> Policy:
    """Build a policy from RBAC YAML (one or more documents, or `kind: List`).

    The user is `user` when given, else the first subject of the first binding
    (`system:serviceaccount:<ns>:<name>` for a ServiceAccount), else "sim-user".
    """
    docs = rbac_documents(rbac_yaml)
    roles = {(d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in docs if d.get("kind") == "Role"}
    cluster_roles = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ClusterRole"}
    bindings = _bindings(docs)
    if user is None:
        first = next((s for b in bindings for s in b.get("subjects") or []), None)
        binding_ns = bindings[0]["metadata"].get("namespace", "") if bindings else ""
        user = _subject_name(first, binding_ns)[1] if first else "sim-user"
    groups = _groups_for(user)
    if not bindings:
        grants: list[Grant] = []
        for name, doc in cluster_roles.items():
            grants += [Grant(r, "", f'ClusterRole "{name}" (unbound, sim)') for r in _rules(doc)]
        for (ns, name), doc in roles.items():
            grants += [Grant(r, ns, f'Role "{name}" (unbound, sim)') for r in _rules(doc)]
        return Policy(user, groups, tuple(grants))
    return Policy(user, groups, _granted(docs, user, groups))


def _granted(docs: list[dict[str, Any]], user: str, groups: tuple[str, ...]) -> tuple[Grant, ...]:
    roles = {(d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in docs if d.get("kind") == "Role"}
    cluster_roles = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ClusterRole"}
    grants: list[Grant] = []
    for b in _bindings(docs):
        meta = b.get("metadata") or {}
        ns = meta.get("namespace", "") if b["kind"] == "RoleBinding" else ""
        matched = [s for s in b.get("subjects") or []
                   if _subject_name(s, ns)[1] == user
                   or (_subject_name(s, ns)[0] == "group" and s.get("name") in groups)]
        if not matched:
            continue
        ref = b.get("roleRef") or {}
        role_doc = (roles.get((ns, ref.get("name", ""))) if ref.get("kind") == "Role"
                    else cluster_roles.get(ref.get("name", "")))
        if role_doc is None:
            continue
        where = f'"{ns}/{meta.get("name", "")}"' if ns else f'"{meta.get("name", "")}"'
        source = (f'{b["kind"]} {where} of {ref.get("kind")} "{ref.get("name")}" '
                  f"to {_describe_subject(matched[0])}")
        grants += [Grant(r, ns, source) for r in _rules(role_doc)]
    return tuple(grants)


class AccessControl:
    """Token → policy table (thread-safe). ADMIN_TOKEN is always present and allows everything.

    `attach(authorizer)` (done by the `ApiServer` for its store) makes every policy but the
    superusers' ask the store's RBAC; unattached, only a token's own rules count."""

    def __init__(self, tokens: Iterable[tuple[str, Policy]] = (), *,
                 allow_unauthenticated: bool = True) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[str, Policy] = {ADMIN_TOKEN: admin_policy()}
        for token, policy in tokens:
            self._tokens[token] = policy
        self.anonymous: Policy | None = (
            admin_policy(UNSECURED_USER) if allow_unauthenticated else None)
        self._identities: dict[str, tuple[str, tuple[str, ...] | None]] = {}
        self._rbac: StoreAuthorizer | None = None

    def attach(self, authorizer: StoreAuthorizer) -> None:
        """Judge by the RBAC objects of `authorizer`'s store from now on."""
        with self._lock:
            self._rbac = authorizer

    def issue_token(self, user: str, groups: tuple[str, ...] | None = None) -> str:
        """A new bearer token for `user` (like a ServiceAccount's token): its rights are what
        the store's RBAC grants the user at each request."""
        token = f"sim-{secrets.token_urlsafe(18)}"
        with self._lock:
            self._identities[token] = (user, groups)
        return token

    def policy_of(self, user: str, groups: tuple[str, ...] | None = None) -> Policy:
        """`user`'s rights: `system:masters` may do anything; else the store's RBAC, plus the
        rules of any token registered for that user with `add_token` (so impersonating it
        sees the same as using its token). `groups` default to the authenticator's."""
        groups = _groups_for(user) if groups is None else groups
        if "system:masters" in groups:
            return Policy(user, groups, superuser=True)
        with self._lock:
            extra = tuple(g for p in self._tokens.values()
                          if p.user == user and not p.superuser for g in p.grants)
            authorizer = self._rbac
        return Policy(user, groups, extra, rbac=authorizer)

    def add_token(self, token: str, rbac_yaml_text: str, user: str | None = None) -> Policy:
        """Register `token` with the rules granted by the RBAC YAML; returns its policy."""
        policy = policy_from_rbac(rbac_yaml_text, user)
        self.add_policy(token, policy)
        return policy

    def add_policy(self, token: str, policy: Policy) -> None:
        with self._lock:
            self._tokens[token] = policy

    def remove_token(self, token: str) -> None:
        with self._lock:
            self._tokens.pop(token, None)

    def policy_for(self, token: str) -> Policy | None:
        """The policy of a bearer token ("" = none sent); None means 401 Unauthorized."""
        with self._lock:
            policy = self._tokens.get(token)
            identity = self._identities.get(token)
            authorizer = self._rbac
        if policy is None and identity is not None:
            return self.policy_of(*identity)
        if policy is None and not token:
            policy = self.anonymous
        if policy is None or policy.superuser or policy.rbac is not None:
            return policy
        return replace(policy, rbac=authorizer)


def forbidden_reason(a: Attributes) -> str:
    """The authorizer's sentence, as the real server puts it in a 403 message
    (apiserver/pkg/endpoints/handlers/responsewriters/errors.go `forbiddenMessage`)."""
    if not a.resource:
        return f'User "{a.user}" cannot {a.verb} path "{a.path}"'
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = (f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope")
    return (f'User "{a.user}" cannot {a.verb} resource "{resource}" in API group "{a.group}" '
            f"{where}")
