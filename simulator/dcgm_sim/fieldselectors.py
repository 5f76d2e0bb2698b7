"""`fieldSelector` for list and watch: parse, check the field is one the real server indexes, match.

Parsed as apimachinery's `fields.ParseSelector` (`pkg/fields/selector.go`: terms split on
unescaped commas, each at the first `!=`, `==` or `=`, the value unescaped by `UnescapeValue`,
which refuses a bare `,` or `=` and unknown escapes; no trimming). Only the fields the real API
server supports per kind are accepted (`pkg/registry/*/strategy.go` `*ToSelectableFields`); any
other field is a 400, as on a real cluster. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.kinds import Kind

_COMMON = ("metadata.name", "metadata.namespace")
_EXTRA: dict[str, tuple[str, ...]] = {
    kinds.POD.key: (
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    ),
    kinds.NODE.key: ("spec.unschedulable",),
    kinds.NAMESPACE.key: ("status.phase",),
    kinds.SERVICE.key: ("spec.clusterIP", "spec.type"),
    kinds.EVENT.key: (
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
    ),
}
# events.k8s.io/v1's names of the same fields (`pkg/registry/core/event` serves both versions;
# the sim matches them on the stored core object: `eventsapi.core_selector`)
_EXTRA["events.events.k8s.io"] = (
    "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
    "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason",
    "reportingController", "source", "type",
)
_CUSTOM_GROUPS = ("nvidia.com", "monitoring.coreos.com")
_BOOL_FIELDS = ("spec.hostNetwork", "spec.unschedulable")  # unset reads as "false"


class FieldSelectorError(ValueError):
    """A selector the real server answers with 400 BadRequest."""


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    op: str  # "=" or "!="
    value: str

    def matches(self, obj: dict[str, Any]) -> bool:
        equal = field_value(obj, self.field) == self.value
        return equal if self.op == "=" else not equal


FieldSelector = tuple[FieldRequirement, ...]


def split_terms(text: str) -> list[str]:
    """`splitTerms`: split on commas not escaped by a backslash (the backslash is kept)."""
    if not text:
        return []
    out, start, escaped = [], 0, False
    for i, char in enumerate(text):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ",":
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def split_term(term: str) -> tuple[str, str, str] | None:
    """`splitTerm`: the first position where `!=`, `==` or `=` starts (tried in that order)
    splits the term; the field takes no escapes."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def unescape_value(value: str) -> str:
    """`UnescapeValue`: `\\\\`, `\\,` and `\\=` are the escapes; any other escape, a trailing
    backslash, or a bare `,` or `=` in the value is an error."""
    out, escaped = [], False
    for char in value:
        if escaped:
            if char not in "\\,=":
                raise FieldSelectorError(
                    f"invalid field selector: invalid escape sequence: \\{char}")
            out.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char in ",=":
            raise FieldSelectorError(
                f"invalid field selector: unescaped character in value: {ord(char)}")
        else:
            out.append(char)
    if escaped:
        raise FieldSelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def parse_selector(text: str | None) -> FieldSelector:
    """`fields.ParseSelector`: terms in sorted order, empty ones skipped; `==` is `=`."""
    reqs: list[FieldRequirement] = []
    for term in sorted(split_terms(text or "")):
        if not term:
            continue
        split = split_term(term)
        if split is None:
            raise FieldSelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = split
        reqs.append(FieldRequirement(field, "!=" if op == "!=" else "=", unescape_value(value)))
    return tuple(reqs)


def parse(text: str | None, kind: Kind) -> FieldSelector:
    """`fields.ParseSelector`, then the kind's field check; FieldSelectorError names the
    problem as the real server does."""
    reqs = parse_selector(text)
    allowed = _COMMON + _EXTRA.get(kind.key, ())
    for req in reqs:
        if req.field not in allowed:
            if kind.group in _CUSTOM_GROUPS:
                raise FieldSelectorError(
                    f'"{req.field}" is not a known field selector: only "metadata.name", '
                    '"metadata.namespace"'
                )
            raise FieldSelectorError(f"field label not supported: {req.field}")
    return tuple(reqs)


def field_value(obj: dict[str, Any], path: str) -> str:
    """The selectable value of a field as the server renders it ("" when unset)."""
    if path == "source":
        node: Any = (obj.get("source") or {}).get("component", "")
    else:
        node = obj
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return "false" if path in _BOOL_FIELDS else ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def matches(selector: FieldSelector, obj: dict[str, Any]) -> bool:
    return all(req.matches(obj) for req in selector)


def required_name(selector: FieldSelector) -> str | None:
    """A `metadata.name=x` requirement lets a list read one object instead of scanning."""
    for req in selector:
        if req.field == "metadata.name" and req.op == "=":
            return req.value
    return None
