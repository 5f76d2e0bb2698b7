"""apimachinery's own label-selector tables, run against the sim's and the tool's selectors.

The cases are kept as data in `apimachinery_labels.json` (its `origin` names the files and
commits of kubernetes/kubernetes they come from and the tables left out, with why). Every case
runs against both `dcgm_sim.labelselectors` (the judge) and `migrator.model.selectors` (the
tool); a case an implementation deliberately does not support names it, with the reason, in the
data. Each run reports its counts as a `peer-suite` user property.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim import labelselectors as sim
from migrator.model import selectors as tool

DATA = json.loads((Path(__file__).parent / "apimachinery_labels.json").read_text())
Req = tuple[str, str, frozenset[str]]  # key, selection.Operator, values


class Sim:
    """`dcgm_sim.labelselectors`: operators are selection.Operator values already."""

    name = "dcgm_sim.labelselectors"
    errors = (sim.SelectorError,)

    def parse(self, text: str) -> tuple[Req, ...]:
        return tuple((r.key, r.operator, frozenset(r.values))
                     for r in sim.parse(text).requirements)

    def string(self, text: str) -> str:
        return str(sim.parse(text))

    def matches(self, text: str, labels: Mapping[str, str]) -> bool:
        return sim.parse(text).matches(labels)

    def everything(self) -> tuple[bool, Callable[[Mapping[str, str]], bool]]:
        return sim.EVERYTHING.empty, sim.EVERYTHING.matches

    def from_set(self, labels: Mapping[str, str] | None) -> tuple[bool, Callable[..., bool]]:
        selector = sim.selector_from_set(labels)
        return selector.empty, selector.matches

    def requirement(self, key: str, op: str, values: list[str] | None) -> None:
        sim.new_requirement(key, op, values or ())

    def built(self, reqs: list[list[Any]], labels: Mapping[str, str]) -> bool:
        return sim.Selector(tuple(sim.new_requirement(k, op, v) for k, op, v in reqs)).matches(
            labels)

    def label_selector(self, obj: Any) -> tuple[tuple[Req, ...] | str, Callable[..., bool]]:
        selector = sim.label_selector_as_selector(obj)
        shape = "nothing" if selector.nothing else "everything" if selector.empty else tuple(
            (r.key, r.operator, frozenset(r.values)) for r in selector.requirements)
        return shape, selector.matches


# The tool's operator names -> selection.Operator; it folds `==` into `=` (same meaning).
_TOOL_OPS = {"!exists": "!"}
_TO_TOOL = {"!": "!exists", "==": "="}


class Tool:
    """`migrator.model.selectors`, its operator names mapped to selection.Operator values."""

    name = "migrator.model.selectors"
    errors = (tool.SelectorError,)

    @staticmethod
    def _reqs(selector: tool.Selector) -> tuple[Req, ...]:
        return tuple((r.key, _TOOL_OPS.get(r.op, r.op), frozenset(r.values))
                     for r in selector.requirements)

    def parse(self, text: str) -> tuple[Req, ...]:
        return self._reqs(tool.parse(text))

    def string(self, text: str) -> str:
        raise NotImplementedError  # unsupported in the data: the tool has no string form

    def matches(self, text: str, labels: Mapping[str, str]) -> bool:
        return tool.parse(text).matches(labels)

    def everything(self) -> tuple[bool, Callable[[Mapping[str, str]], bool]]:
        return tool.Selector().empty, tool.Selector().matches

    def from_set(self, labels: Mapping[str, str] | None) -> tuple[bool, Callable[..., bool]]:
        selector = tool.from_labels(labels)
        return selector.empty, selector.matches

    def requirement(self, key: str, op: str, values: list[str] | None) -> None:
        tool.requirement(key, _TO_TOOL.get(op, op), frozenset(values or ()))

    def built(self, reqs: list[list[Any]], labels: Mapping[str, str]) -> bool:
        return tool.Selector(tuple(tool.requirement(k, _TO_TOOL.get(op, op), frozenset(v))
                                   for k, op, v in reqs)).matches(labels)

    def label_selector(self, obj: Any) -> tuple[tuple[Req, ...] | str, Callable[..., bool]]:
        selector = tool.from_label_selector(obj)
        shape = "nothing" if selector.nothing else "everything" if selector.empty else (
            self._reqs(selector))
        return shape, selector.matches


def _expected(reqs: list[list[Any]], impl: Sim | Tool) -> tuple[Req, ...]:
    fold = {"==": "="} if isinstance(impl, Tool) else {}
    return tuple((k, fold.get(op, op), frozenset(v)) for k, op, v in reqs)


def _valid(impl: Sim | Tool, run: Callable[[], object]) -> bool:
    try:
        run()
    except impl.errors:
        return False
    return True


def failure(impl: Sim | Tool, case: dict[str, Any]) -> str | None:
    """Why `case` fails on `impl`, or None when it passes."""
    check = case["check"]
    if check == "parse":
        ok = _valid(impl, lambda: impl.parse(case["selector"]))
        if ok != case["valid"]:
            return f"valid={ok}, apimachinery says {case['valid']}"
        if "requirements" in case and impl.parse(case["selector"]) != _expected(
                case["requirements"], impl):
            return f"parsed to {impl.parse(case['selector'])}"
    elif check == "string":
        if (got := impl.string(case["selector"])) != case["string"]:
            return f"String() is {got!r}"
    elif check == "same":
        if impl.parse(case["selector"]) != impl.parse(case["other"]):
            return "the two orders parse differently"
    elif check == "match":
        if impl.matches(case["selector"], case["labels"]) != case["match"]:
            return f"matches={not case['match']}"
    elif check in ("everything", "set_match", "set_empty"):
        empty, matches = impl.everything() if check == "everything" else impl.from_set(
            case["set"])
        if "empty" in case and empty != case["empty"]:
            return f"empty={empty}"
        if "match" in case and matches(case["labels"]) != case["match"]:
            return f"matches={not case['match']}"
    elif check == "requirement":
        ok = _valid(impl, lambda: impl.requirement(case["key"], case["operator"],
                                                   case["values"]))
        if ok != case["valid"]:
            return f"valid={ok}"
    elif check == "requirements_match":
        if impl.built(case["requirements"], case["labels"]) != case["match"]:
            return f"matches={not case['match']}"
    elif check == "label_selector":
        return _label_selector_failure(impl, case)
    else:
        raise AssertionError(f"unknown check {check!r}")
    return None


def _label_selector_failure(impl: Sim | Tool, case: dict[str, Any]) -> str | None:
    """`LabelSelectorAsSelector`: the error, the selector (as `mustParse(out)`, or nothing /
    everything, which the Go table tells apart only by String and this by matching), and the
    input left unmodified."""
    given = copy.deepcopy(case["in"])
    try:
        shape, matches = impl.label_selector(given)
    except impl.errors:
        return None if case["error"] else "error"
    if given != case["in"]:
        return "the LabelSelector was modified"
    if case["error"]:
        return "no error"
    out = case["out"]
    if out in ("nothing", "everything"):
        want_match = out == "everything"
        if shape != out or matches({}) != want_match or matches({"foo": "bar"}) != want_match:
            return f"is {shape}, not {out}"
    elif shape != impl.parse(out):
        return f"is {shape}, not {out}"
    return None


@pytest.mark.parametrize("impl", [Sim(), Tool()], ids=lambda i: i.name)
def test_apimachinery_label_selector_tables(impl: Sim | Tool,
                                            request: pytest.FixtureRequest) -> None:
    run = passed = unsupported = 0
    failures: list[str] = []
    for suite, cases in DATA["suites"].items():
        for i, case in enumerate(cases):
            if impl.name in case.get("unsupported", {}):
                unsupported += 1
                continue
            run += 1
            why = failure(impl, case)
            if why is None:
                passed += 1
            else:
                failures.append(f"{suite}[{i}] {json.dumps(case)}: {why}")
    request.node.user_properties.append((
        "peer-suite", f"apimachinery label selectors vs {impl.name}: {run} cases run, "
                      f"{passed} pass, {unsupported} unsupported"))
    assert failures == []
    assert run + unsupported == sum(len(c) for c in DATA["suites"].values()) == 115


def test_every_unsupported_case_names_an_implementation_and_a_reason() -> None:
    names = {Sim.name, Tool.name}
    for cases in DATA["suites"].values():
        for case in cases:
            for impl, reason in case.get("unsupported", {}).items():
                assert impl in names and len(reason) > 20
