"""Label selectors as kube-apiserver evaluates them: the string form, LabelSelector objects, sets.

The sim's own evaluation, written after k8s.io/apimachinery (kubernetes/kubernetes
`staging/src/k8s.io/apimachinery`), so that a misreading in the tool's selectors
(`migrator.model.selectors`) cannot be shared by the judge; tests/peers runs apimachinery's own
parse and match tables against both.

- `pkg/labels/selector.go`: the `Lexer` (longest special-symbol token; any other run of
  characters up to whitespace or a special symbol is an identifier, `in`/`notin` keywords),
  the `Parser` (`in`/`notin` read as identifiers where a value is expected; `()` and empty
  list entries are the empty value; a bare key is Exists, `!key` DoesNotExist), `Parse`
  (requirements sorted by key), `NewRequirement` (In/NotIn need values; =, ==, != exactly
  one; Exists/DoesNotExist none; Gt/Lt one `strconv.ParseInt` integer; key and values
  validated), `Requirement.Matches` (NotIn and != match a missing key; Gt/Lt need an integer
  label value), `Requirement.String`, `SelectorFromSet` (no validation; empty is Everything),
  `Nothing()` (matches nothing, not Empty);
- `pkg/apis/meta/v1/helpers.go` `LabelSelectorAsSelector`: nil is Nothing, no matchLabels and
  no matchExpressions is Everything, operators In, NotIn, Exists, DoesNotExist;
- `pkg/util/validation/validation.go` `IsQualifiedName` (label keys) and `IsValidLabelValue`.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Labels = Mapping[str, str]

# selection.Operator values
EQUALS, DOUBLE_EQUALS, NOT_EQUALS = "=", "==", "!="
IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "in", "notin", "exists", "!"
GREATER_THAN, LESS_THAN = "gt", "lt"
_BINARY = (IN, NOT_IN, EQUALS, DOUBLE_EQUALS, NOT_EQUALS, GREATER_THAN, LESS_THAN)
_OPERATORS = (*_BINARY, EXISTS, DOES_NOT_EXIST)


class SelectorError(ValueError):
    """A selector the API server rejects (400 on list and watch, Invalid on a write)."""


# ---- validation.IsQualifiedName / IsValidLabelValue ------------------------------------------

_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = f"({_QUALIFIED_NAME})?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME_ERR = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
             "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
             f"'123-abc', regex used for validation is '{_QUALIFIED_NAME}')")
_VALUE_ERR = ("a valid label must be an empty string or consist of alphanumeric characters, "
              "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
              f"'MyValue',  or 'my_value',  or '12345', regex used for validation is "
              f"'{_LABEL_VALUE}')")


def key_errors(key: str) -> list[str]:
    """`IsQualifiedName`: `[prefix/]name`, name 1-63 characters, prefix a DNS subdomain."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a qualified name " + _NAME_ERR.removeprefix("name part ")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errs: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            errs.append("prefix part must be no more than 253 characters")
        elif not re.fullmatch(_SUBDOMAIN, prefix):
            errs.append("prefix part a lowercase RFC 1123 subdomain must consist of lower case "
                        "alphanumeric characters, '-' or '.', and must start and end with an "
                        "alphanumeric character")
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not re.fullmatch(_QUALIFIED_NAME, name):
        errs.append(_NAME_ERR)
    return errs


def value_errors(value: str) -> list[str]:
    """`IsValidLabelValue`: empty, or 1-63 characters of the qualified-name alphabet."""
    errs = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not re.fullmatch(_LABEL_VALUE, value):
        errs.append(_VALUE_ERR)
    return errs


def _parse_int64(text: str) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`: an optional sign and decimal digits, in range."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


# ---- Requirement, Selector ----------------------------------------------------------------------

@dataclass(frozen=True)
class Requirement:
    """`labels.Requirement`: key, operator (a selection.Operator string) and values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        op = self.operator
        if op in (IN, EQUALS, DOUBLE_EQUALS):
            return self.key in labels and labels[self.key] in self.values
        if op in (NOT_IN, NOT_EQUALS):
            return self.key not in labels or labels[self.key] not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        if op in (GREATER_THAN, LESS_THAN):
            have = _parse_int64(labels[self.key]) if self.key in labels else None
            want = _parse_int64(self.values[0]) if len(self.values) == 1 else None
            if have is None or want is None:
                return False
            return have > want if op == GREATER_THAN else have < want
        return False

    def __str__(self) -> str:
        op = self.operator
        head = ("!" if op == DOES_NOT_EXIST else "") + self.key
        if op in (EXISTS, DOES_NOT_EXIST):
            return head
        symbol = {IN: " in ", NOT_IN: " notin ", GREATER_THAN: ">", LESS_THAN: "<"}.get(op, op)
        values = self.values[0] if len(self.values) == 1 else ",".join(sorted(self.values))
        return f"{head}{symbol}({values})" if op in (IN, NOT_IN) else f"{head}{symbol}{values}"


def new_requirement(key: str, operator: str, values: Iterable[str] = ()) -> Requirement:
    """`labels.NewRequirement`: every violated rule is reported, as its aggregate error is."""
    vals = tuple(values)
    errs = [f"key: Invalid value: {key!r}: {'; '.join(e)}" for e in [key_errors(key)] if e]
    if operator in (IN, NOT_IN) and not vals:
        errs.append("values: for 'in', 'notin' operators, values set can't be empty")
    elif operator in (EQUALS, DOUBLE_EQUALS, NOT_EQUALS) and len(vals) != 1:
        errs.append("values: exact-match compatibility requires one single value")
    elif operator in (EXISTS, DOES_NOT_EXIST) and vals:
        errs.append("values: values set must be empty for exists and does not exist")
    elif operator in (GREATER_THAN, LESS_THAN):
        if len(vals) != 1:
            errs.append("values: for 'Gt', 'Lt' operators, exactly one value is required")
        errs += [f"values[{i}]: for 'Gt', 'Lt' operators, the value must be an integer"
                 for i, v in enumerate(vals) if _parse_int64(v) is None]
    elif operator not in _OPERATORS:
        errs.append(f"operator: Unsupported value: {operator!r}: supported values: "
                    + ", ".join(repr(o) for o in _OPERATORS))
    for v in vals:
        if verrs := value_errors(v):
            errs.append(f"values[{key}]: Invalid value: {v!r}: {'; '.join(verrs)}")
    if errs:
        raise SelectorError(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
    return Requirement(key, operator, vals)


@dataclass(frozen=True)
class Selector:
    """`labels.Selector`: the AND of its requirements; `nothing` is `labels.Nothing()`."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Labels | None) -> bool:
        if self.nothing:
            return False
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def empty(self) -> bool:
        """`Selector.Empty`: restricts nothing (Everything is empty, Nothing is not)."""
        return not self.nothing and not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


EVERYTHING = Selector()
NOTHING = Selector(nothing=True)


def _sorted(reqs: Iterable[Requirement]) -> Selector:
    """Requirements in key order (`sort.Sort(ByKey(...))`), as Parse and Add leave them."""
    return Selector(tuple(sorted(reqs, key=lambda r: r.key)))


def selector_from_set(labels: Labels | None) -> Selector:
    """`labels.SelectorFromSet`: key=value for every pair, unvalidated; empty is Everything."""
    return _sorted(Requirement(k, EQUALS, (v,)) for k, v in (labels or {}).items())


_EXPRESSION_OPS = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}


def label_selector_as_selector(obj: Mapping[str, Any] | None) -> Selector:
    """`metav1.LabelSelectorAsSelector`: None (a nil selector) matches nothing; one with no
    matchLabels and no matchExpressions matches everything."""
    if obj is None:
        return NOTHING
    match_labels = obj.get("matchLabels") or {}
    expressions = obj.get("matchExpressions") or []
    if not match_labels and not expressions:
        return EVERYTHING
    reqs = [new_requirement(k, EQUALS, (v,)) for k, v in match_labels.items()]
    for expr in expressions:
        op = _EXPRESSION_OPS.get(str(expr.get("operator", "")))
        if op is None:
            raise SelectorError(
                f'"{expr.get("operator", "")}" is not a valid label selector operator')
        reqs.append(new_requirement(str(expr.get("key", "")), op, expr.get("values") or ()))
    return _sorted(reqs)


# ---- the string form: Lexer and Parser of selector.go -------------------------------------------

_SPECIAL = "=!(),><"
_WHITESPACE = " \t\r\n"
_TOKENS = (")", ",", "!", "==", "=", ">", "in", "<", "!=", "notin", "(")
END, IDENT = "end", "id"


def lex(text: str) -> list[tuple[str, str]]:
    """The tokens of `text` as (token, literal), ending with END; a token is IDENT or the
    symbol or keyword itself."""
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in _WHITESPACE:
            pos += 1
        if pos >= len(text):
            out.append((END, ""))
            return out
        start = pos
        if text[pos] in _SPECIAL:  # scanSpecialSymbol: the longest symbol token
            last = ""
            while pos < len(text) and text[pos] in _SPECIAL:
                if text[start:pos + 1] in _TOKENS:
                    last = text[start:pos + 1]
                elif last:
                    break
                pos += 1
            pos = start + len(last)
            out.append((last, last))
        else:  # scanIDOrKeyword
            while pos < len(text) and text[pos] not in _SPECIAL + _WHITESPACE:
                pos += 1
            word = text[start:pos]
            out.append((word if word in _TOKENS else IDENT, word))


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = lex(text)
        self.pos = 0

    def lookahead(self, values: bool) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return (IDENT if values and tok in (IN, NOT_IN) else tok), lit

    def consume(self, values: bool) -> tuple[str, str]:
        item = self.lookahead(values)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self.lookahead(values=True)
            if tok == END:
                return reqs
            if tok not in (IDENT, DOES_NOT_EXIST):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                reqs.append(self.requirement())
            except SelectorError as e:
                raise SelectorError(f"unable to parse requirement: {e}") from e
            tok, lit = self.consume(values=True)
            if tok == END:
                return reqs
            if tok != ",":
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            tok, lit = self.lookahead(values=True)
            if tok not in (IDENT, DOES_NOT_EXIST):
                raise SelectorError(f"found '{lit}', expected: identifier after ','")

    def requirement(self) -> Requirement:
        operator = ""
        tok, key = self.consume(values=True)
        if tok == DOES_NOT_EXIST:
            operator = DOES_NOT_EXIST
            tok, key = self.consume(values=True)
        if tok != IDENT:
            raise SelectorError(f"found '{key}', expected: identifier")
        if errs := key_errors(key):
            raise SelectorError(f"Invalid value: {key!r}: {'; '.join(errs)}")
        if self.lookahead(values=True)[0] in (END, ","):
            operator = operator or EXISTS
        if operator in (EXISTS, DOES_NOT_EXIST):
            return new_requirement(key, operator)
        tok, lit = self.consume(values=False)
        ops = {IN: IN, "=": EQUALS, "==": DOUBLE_EQUALS, ">": GREATER_THAN, "<": LESS_THAN,
               NOT_IN: NOT_IN, "!=": NOT_EQUALS}
        if tok not in ops:
            raise SelectorError(f"found '{lit}', expected: {', '.join(_BINARY)}")
        op = ops[tok]
        values = self.value_set() if op in (IN, NOT_IN) else self.exact_value()
        return new_requirement(key, op, sorted(values))

    def value_set(self) -> set[str]:
        tok, lit = self.consume(values=True)
        if tok != "(":
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead(values=True)
        if tok == ")":
            self.consume(values=True)
            return {""}
        if tok not in (IDENT, ","):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        found = self.identifiers()
        if self.consume(values=True)[0] != ")":
            raise SelectorError(f"found '{lit}', expected: ')'")
        return found

    def identifiers(self) -> set[str]:
        """`parseIdentifiersList`: a possibly empty list of possibly empty identifiers."""
        found: set[str] = set()
        while True:
            tok, lit = self.consume(values=True)
            if tok == IDENT:
                found.add(lit)
                nxt, nlit = self.lookahead(values=True)
                if nxt == ")":
                    return found
                if nxt != ",":
                    raise SelectorError(f"found '{nlit}', expected: ',' or ')'")
            elif tok == ",":
                if not found:
                    found.add("")  # "(,"
                nxt = self.lookahead(values=True)[0]
                if nxt == ")":
                    found.add("")  # ",)"
                    return found
                if nxt == ",":
                    found.add("")  # ",,"
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        tok, _ = self.lookahead(values=True)
        if tok in (END, ","):
            return {""}
        tok, lit = self.consume(values=True)
        if tok != IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        return {lit}


def parse(text: str | None) -> Selector:
    """`labels.Parse`: the empty string is Everything; requirements sorted by key."""
    return _sorted(_Parser(text or "").parse())
