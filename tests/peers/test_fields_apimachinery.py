"""apimachinery's own field-selector tables, run against the sim's `fieldSelector` parsing.

The cases are kept as data in `apimachinery_fields.json` (its `origin` names the file and
commit of kubernetes/kubernetes and the tables left out, with why). Only the sim evaluates
field selectors (the tool only sends `metadata.name=…`), so each case runs against
`dcgm_sim.fieldselectors`; a case it deliberately does not support says so, with the reason,
in the data. The run reports its counts as a `peer-suite` user property.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim import fieldselectors as fs

DATA = json.loads((Path(__file__).parent / "apimachinery_fields.json").read_text())
NAME = "dcgm_sim.fieldselectors"


def _parsed(text: str) -> tuple[tuple[str, str, str], ...]:
    return tuple((r.field, r.op, r.value) for r in fs.parse_selector(text))


def failure(case: dict[str, Any]) -> str | None:
    """Why `case` fails, or None when it passes."""
    check = case["check"]
    if check == "split_terms":
        if (terms := fs.split_terms(case["selector"])) != case["terms"]:
            return f"terms {terms}"
    elif check == "split_term":
        got = fs.split_term(case["term"])
        want = (case["lhs"], case["op"], case["rhs"]) if case["ok"] else None
        if got != want:
            return f"split {got}"
    elif check == "unescape":
        try:
            value = fs.unescape_value(case["escaped"])
        except fs.FieldSelectorError as e:
            return None if case.get("error", "-") in str(e) else f"error {e}"
        if "error" in case or value != case["value"]:
            return f"unescaped to {value!r}"
    elif check == "parse":
        try:
            fs.parse_selector(case["selector"])
        except fs.FieldSelectorError:
            return None if not case["valid"] else "error"
        return None if case["valid"] else "no error"
    elif check == "same":
        if _parsed(case["selector"]) != _parsed(case["other"]):
            return "the two orders parse differently"
    elif check == "match":
        if fs.matches(fs.parse_selector(case["selector"]), case["fields"]) != case["match"]:
            return f"matches={not case['match']}"
    else:
        raise AssertionError(f"unknown check {check!r}")
    return None


def test_apimachinery_field_selector_tables(request: pytest.FixtureRequest) -> None:
    run = passed = unsupported = 0
    failures: list[str] = []
    for suite, cases in DATA["suites"].items():
        for i, case in enumerate(cases):
            if NAME in case.get("unsupported", {}):
                unsupported += 1
                continue
            run += 1
            why = failure(case)
            if why is None:
                passed += 1
            else:
                failures.append(f"{suite}[{i}] {json.dumps(case)}: {why}")
    request.node.user_properties.append((
        "peer-suite", f"apimachinery field selectors vs {NAME}: {run} cases run, "
                      f"{passed} pass, {unsupported} unsupported"))
    assert failures == []
    assert run + unsupported == sum(len(c) for c in DATA["suites"].values()) == 70
