"""Kubernetes label selectors: parse the string form, match label sets.

Shared by the simulated API server (list/watch `labelSelector`) and the tool (which pods a
Service selector picks), so both read selectors exactly the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Labels = Mapping[str, str]


class SelectorError(ValueError):
    """A selector string or object that Kubernetes would reject."""


@dataclass(frozen=True)
class Requirement:
    """One clause: `key op values` with op in =, !=, in, notin, exists, !exists."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Labels) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        raise SelectorError(f"unknown operator {self.op!r}")


@dataclass(frozen=True)
class Selector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Labels | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


_SET_RE = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s!=,()]*)\s*$")


def _split_clauses(text: str) -> list[str]:
    """Split on commas that are not inside a parenthesised value set."""
    clauses: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            clauses.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unbalanced parentheses in selector {text!r}")
    clauses.append("".join(current))
    return clauses


def parse(text: str | None) -> Selector:
    """Parse `a=b,c!=d,e in (f,g),!h,i` into a Selector; raise SelectorError when malformed."""
    if not text or not text.strip():
        return Selector()
    requirements: list[Requirement] = []
    for clause in _split_clauses(text):
        if not clause.strip():
            raise SelectorError(f"empty clause in selector {text!r}")
        eq = _EQ_RE.match(clause)
        if eq:
            key, op, value = eq.groups()
            requirements.append(Requirement(key, "=" if op == "==" else op, frozenset({value})))
            continue
        st = _SET_RE.match(clause)
        if not st:
            raise SelectorError(f"cannot parse selector clause {clause.strip()!r}")
        negated, key, op, values = st.groups()
        if op:
            if negated:
                raise SelectorError(f"cannot negate a set clause {clause.strip()!r}")
            vals = frozenset(v.strip() for v in values.split(",") if v.strip())
            requirements.append(Requirement(key, op, vals))
        else:
            requirements.append(Requirement(key, "!exists" if negated else "exists"))
    return Selector(tuple(requirements))


def from_labels(match_labels: Labels | None) -> Selector:
    """A Service-style selector (a plain map): every key must equal its value."""
    return Selector(
        tuple(Requirement(k, "=", frozenset({v})) for k, v in sorted((match_labels or {}).items()))
    )


_LABEL_SELECTOR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def from_label_selector(obj: Mapping[str, Any] | None) -> Selector:
    """A metav1.LabelSelector (`matchLabels` + `matchExpressions`), as DaemonSets use."""
    obj = obj or {}
    reqs = list(from_labels(obj.get("matchLabels")).requirements)
    for expr in obj.get("matchExpressions") or []:
        op = _LABEL_SELECTOR_OPS.get(expr.get("operator", ""))
        if op is None:
            raise SelectorError(f"unknown matchExpressions operator {expr.get('operator')!r}")
        reqs.append(Requirement(expr["key"], op, frozenset(expr.get("values") or [])))
    return Selector(tuple(reqs))
