"""Turn a request line into what it asks for: verb, group, resource, namespace, name, subresource.

Follows the real server's `RequestInfoFactory` (apiserver/pkg/endpoints/request), so the
request log and RBAC see the same attributes a real cluster's audit log and authorizer would.
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from dcgm_sim import kinds
from dcgm_sim.kinds import Kind

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "GET": "get", "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = {"status", "finalize"}
_TRUE = {"true", "1", "True", "TRUE"}

KINDS_BY_PATH: dict[tuple[str, str, str], Kind] = {
    (k.group, k.version, k.plural): k for k in kinds.ALL
}


@dataclass
class RequestInfo:
    """What a request addresses. `is_resource` is False for discovery and other plain paths."""

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    raw_query: str = ""
    is_resource: bool = False
    verb: str = ""
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    kind: Kind | None = None
    parts: tuple[str, ...] = ()

    @property
    def watch(self) -> bool:
        return self.verb == "watch"

    @property
    def mutating(self) -> bool:
        return self.verb in ("create", "update", "patch", "delete", "deletecollection")

    @property
    def dry_run(self) -> bool:
        return bool(self.query.get("dryRun"))

    def flag(self, name: str) -> bool:
        return self.query.get(name, "") in _TRUE


def parse(method: str, target: str) -> RequestInfo:
    """Parse `METHOD /apis/apps/v1/namespaces/ns/daemonsets/x?watch=1` (query values: last wins)."""
    split = urlsplit(target)
    path = split.path or "/"
    query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
    info = RequestInfo(method=method.upper(), path=path, query=query, raw_query=split.query)
    parts = tuple(unquote(p) for p in path.strip("/").split("/") if p)
    info.parts = parts
    if not parts or parts[0] not in ("api", "apis"):
        info.verb = method.lower()
        return info
    if parts[0] == "api":
        if len(parts) < 2:
            info.verb = "get"
            return info
        info.version, rest = parts[1], list(parts[2:])
    else:
        if len(parts) < 3:
            info.verb = "get"
            if len(parts) == 2:
                info.group = parts[1]
            return info
        info.group, info.version, rest = parts[1], parts[2], list(parts[3:])
    if not rest:
        info.verb = "get"  # /api/v1, /apis/g/v: discovery
        return info
    info.is_resource = True
    info.verb = _VERBS.get(info.method, info.method.lower())
    if rest[0] == "watch":
        info.verb = "watch"
        rest = rest[1:]
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        info.namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    if rest:
        info.resource = rest[0]
    if len(rest) > 1:
        info.name = rest[1]
    if len(rest) > 2:
        info.subresource = rest[2]
    if info.resource == "namespaces" and info.name:
        info.namespace = info.name
    if info.verb == "get" and not info.name:
        info.verb = "list"
    if info.verb == "list" and info.flag("watch"):
        info.verb = "watch"
    if info.verb == "get" and info.flag("watch"):
        info.verb = "watch"  # the deprecated single-object watch form
    if info.verb == "delete" and not info.name:
        info.verb = "deletecollection"
    info.kind = KINDS_BY_PATH.get((info.group, info.version, info.resource))
    return info


def authz_name(info: RequestInfo) -> str:
    """The name RBAC sees: for list/watch, a `metadata.name=` field selector names the object."""
    if info.name:
        return info.name
    if info.verb in ("list", "watch"):
        selector = info.query.get("fieldSelector", "")
        for term in selector.split(","):
            for op in ("==", "="):
                key, sep, value = term.partition(op)
                if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                    return value.strip()
    return ""
