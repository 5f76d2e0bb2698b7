"""Kubernetes label selectors as k8s.io/apimachinery has them (`pkg/labels/selector.go`,
`LabelSelectorAsSelector`, `pkg/util/validation`): parse, build from objects, match label sets.
The simulator has its own copy; tests/peers check this one against the upstream tables."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Labels = Mapping[str, str]


class SelectorError(ValueError):
    """A selector string or object that Kubernetes would reject."""


_NAME_MAX = 63
_SUBDOMAIN_MAX = 253
_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def validate_key(key: str) -> None:
    """`[prefix/]name` (validation.IsQualifiedName); the prefix a DNS subdomain."""
    parts = key.split("/")
    if len(parts) > 2:
        raise SelectorError(f"invalid label key {key!r}: at most one '/' (prefix/name)")
    if len(parts) == 2:
        if not parts[0]:
            raise SelectorError(f"invalid label key {key!r}: the prefix before '/' is empty")
        if len(parts[0]) > _SUBDOMAIN_MAX or not _SUBDOMAIN_RE.fullmatch(parts[0]):
            raise SelectorError(f"invalid label key {key!r}: the prefix must be a lowercase "
                                f"DNS subdomain of at most {_SUBDOMAIN_MAX} characters")
    if not parts[-1]:
        raise SelectorError(f"invalid label key {key!r}: the name part is empty")
    if len(parts[-1]) > _NAME_MAX or not _NAME_RE.fullmatch(parts[-1]):
        raise SelectorError(f"invalid label key {key!r}: the name must be at most {_NAME_MAX} "
                            "alphanumerics, '-', '_' or '.', starting and ending with an "
                            "alphanumeric")


_OPS = ("=", "!=", "in", "notin", "exists", "!exists", "gt", "lt")


@dataclass(frozen=True)
class Requirement:
    """One clause `key op values` (op one of `_OPS`); built validated by `requirement()`."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Labels) -> bool:
        present = self.key in labels
        if self.op in ("exists", "!exists"):
            return present == (self.op == "exists")
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):  # they match objects without the key
            return not present or labels[self.key] not in self.values
        if self.op in ("gt", "lt"):
            have, want = _integer(labels.get(self.key)), _integer(next(iter(self.values)))
            if have is None or want is None:
                return False
            return have > want if self.op == "gt" else have < want
        raise SelectorError(f"unknown operator {self.op!r}")


def _integer(text: str | None) -> int | None:
    """strconv.ParseInt(text, 10, 64): an optional sign and decimal digits."""
    if text is None or not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def requirement(key: str, op: str, values: frozenset[str] = frozenset()) -> Requirement:
    """A validated Requirement (`labels.NewRequirement`)."""
    validate_key(key)
    if op in ("=", "!="):
        if len(values) != 1:
            raise SelectorError(f"{key}{op}: exact match needs exactly one value")
    elif op in ("in", "notin"):
        if not values:
            raise SelectorError(f"{key} {op}: the set of values cannot be empty")
    elif op in ("exists", "!exists"):
        if values:
            raise SelectorError(f"{key}: exists and does-not-exist take no values")
    elif op in ("gt", "lt"):
        if len(values) != 1 or _integer(next(iter(values))) is None:
            raise SelectorError(f"{key} {op}: needs exactly one integer value")
    else:
        raise SelectorError(f"unknown operator {op!r}: one of {', '.join(_OPS)}")
    for v in values:  # empty, or a valid name
        if len(v) > _NAME_MAX or (v and not _NAME_RE.fullmatch(v)):
            raise SelectorError(f"invalid value {v!r} for label {key!r}: at most {_NAME_MAX} "
                                "alphanumerics, '-', '_' or '.', starting and ending with an "
                                "alphanumeric (or empty)")
    return Requirement(key, op, values)


@dataclass(frozen=True)
class Selector:
    """A conjunction of requirements: none matches everything, unless `nothing` (`labels.Nothing`:
    a nil LabelSelector, a selector-less Service)."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Labels | None) -> bool:
        return not self.nothing and all(r.matches(labels or {}) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """True when it does not restrict anything (`Selector.Empty`)."""
        return not self.requirements and not self.nothing


NOTHING = Selector(nothing=True)

# labels.Parse's lexer: two-character operators first; whitespace separates tokens.
_TOKEN = re.compile(r"==|!=|[=!(),<>]|[^=!(),<> \t\r\n]+")
_SYMBOLS = ("==", "!=", "=", "!", "(", ")", ",", ">", "<")
_KEYWORDS = ("in", "notin")


class _Parser:
    """The recursive descent of `labels.Parse`."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0
        self.tokens = [(t if t in _SYMBOLS else "id", t) for t in _TOKEN.findall(text)]
        self.tokens.append(("end", ""))

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def _take(self) -> tuple[str, str]:
        self.pos += 1
        return self.tokens[self.pos - 1]

    def _fail(self, found: str, expected: str) -> SelectorError:
        return SelectorError(f"cannot parse selector {self.text!r}: found "
                             f"{found or 'end of string'!r}, expected {expected}")

    def parse(self) -> Selector:
        reqs: list[Requirement] = []
        if self._peek()[0] == "end":
            return Selector()
        while True:
            kind, lit = self._peek()
            if kind not in ("id", "!"):
                raise self._fail(lit, "a key after ','" if reqs else "'!', a key or the end")
            reqs.append(self._requirement())
            kind, lit = self._take()
            if kind == "end":
                return _by_key(reqs)
            if kind != ",":
                raise self._fail(lit, "',' or the end")

    def _requirement(self) -> Requirement:
        negated = self._peek()[0] == "!"
        if negated:
            self._take()
        kind, key = self._take()
        if kind != "id":
            raise self._fail(key, "a key")
        validate_key(key)
        if self._peek()[0] in ("end", ","):
            return requirement(key, "!exists" if negated else "exists")
        if negated:
            raise self._fail(self._peek()[1], "',' or the end after '!key'")
        kind, lit = self._take()
        if lit in _KEYWORDS:  # an operator here, a plain id anywhere else (`x in (in)`)
            return requirement(key, lit, self._value_set())
        ops = {"=": "=", "==": "=", "!=": "!=", ">": "gt", "<": "lt"}
        if kind not in ops:
            raise self._fail(lit, "in, notin, =, ==, !=, > or <")
        return requirement(key, ops[kind], frozenset({self._exact_value()}))

    def _exact_value(self) -> str:
        kind, lit = self._peek()
        if kind in ("end", ","):
            return ""  # `key=` selects the empty value
        self._take()
        if kind != "id":
            raise self._fail(lit, "a value")
        return lit

    def _value_set(self) -> frozenset[str]:
        """`(a,b)`; an empty entry is the empty value: `()`, `(a,)`, `(,a)`, `(a,,b)`."""
        kind, lit = self._take()
        if kind != "(":
            raise self._fail(lit, "'('")
        values: set[str] = set()
        expect_value = True
        while True:
            kind, lit = self._take()
            if kind in (")", ","):
                if expect_value:
                    values.add("")
                if kind == ")":
                    return frozenset(values)
                expect_value = True
            elif kind == "id" and expect_value:
                values.add(lit)
                expect_value = False
            else:
                raise self._fail(lit, "',' or ')'" if not expect_value else "a value, ',' or ')'")


def _by_key(reqs: list[Requirement]) -> Selector:
    """Requirements in key order, as `labels.Parse` leaves them: any written order is equal."""
    return Selector(tuple(sorted(reqs, key=lambda r: r.key)))


def parse(text: str | None) -> Selector:
    """`labels.Parse`: `a=b,c!=d,e in (f,g),h notin (i),j,!k,l>3`; SelectorError where Kubernetes
    would reject it."""
    return _Parser(text or "").parse()


def from_labels(match_labels: Labels | None) -> Selector:
    """`labels.SelectorFromSet`: every key must equal its value; no keys match everything."""
    return Selector(tuple(Requirement(k, "=", frozenset({v}))
                          for k, v in sorted((match_labels or {}).items())))


def for_service(selector: Labels | None) -> Selector:
    """The pods a Service's `spec.selector` gives endpoints: none without a selector."""
    return from_labels(selector) if selector else NOTHING


_LABEL_SELECTOR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def from_label_selector(obj: Mapping[str, Any] | None) -> Selector:
    """`metav1.LabelSelectorAsSelector`, validated: None matches nothing, `{}` everything."""
    if obj is None:
        return NOTHING
    reqs = [requirement(k, "=", frozenset({v}))
            for k, v in sorted((obj.get("matchLabels") or {}).items())]
    for expr in obj.get("matchExpressions") or []:
        op = _LABEL_SELECTOR_OPS.get(expr.get("operator", ""))
        if op is None:
            raise SelectorError(f"{expr.get('operator')!r} is not a valid label selector "
                                "operator: In, NotIn, Exists or DoesNotExist")
        reqs.append(requirement(str(expr.get("key", "")), op,
                                frozenset(expr.get("values") or [])))
    return _by_key(reqs)


def lenient(obj: Mapping[str, Any] | None) -> Selector:
    """`from_label_selector`, or nothing where Kubernetes would reject it (skipped, as upstream)."""
    try:
        return from_label_selector(obj)
    except SelectorError:
        return NOTHING
