"""`migrator.model.selectors` against the Kubernetes label selector rules themselves.

The simulated API server and the tool share this module, so an end-to-end test cannot see a
bug in it: both sides would agree on the wrong answer. The expected values below come from
k8s.io/apimachinery, not from this implementation: `pkg/labels/selector.go` (`Parse`,
`NewRequirement`, `Requirement.Matches`, `SelectorFromSet`), `pkg/apis/meta/v1/helpers.go`
(`LabelSelectorAsSelector`) and `pkg/util/validation` (label key and value syntax); the
upstream test table `pkg/labels/selector_test.go` has many of the same cases.
"""

from __future__ import annotations

from typing import Any

import pytest

from migrator.model.selectors import (
    SelectorError,
    for_service,
    from_label_selector,
    from_labels,
    parse,
)
from migrator.model.stacks import load_catalog, pod_selectors

NONE: dict[str, str] = {}

# (selector, labels, matches): labels.Parse(selector).Matches(labels.Set(labels))
PARSE_MATCHES: list[tuple[str, dict[str, str], bool]] = [
    # the empty selector is labels.Everything()
    ("", NONE, True),
    ("", {"a": "b"}, True),
    ("   ", {"a": "b"}, True),
    # equality: =, == (the same operator), !=
    ("a=b", {"a": "b"}, True),
    ("a=b", {"a": "c"}, False),
    ("a=b", NONE, False),
    ("a==b", {"a": "b"}, True),
    ("a==b", {"a": "c"}, False),
    ("a!=b", {"a": "b"}, False),
    ("a!=b", {"a": "c"}, True),
    ("a!=b", NONE, True),  # != matches objects without the key
    ("a!=b", {"c": "b"}, True),
    ("a=", {"a": ""}, True),  # an exact match on the empty value
    ("a=", {"a": "b"}, False),
    ("a=", NONE, False),
    ("a!=", NONE, True),
    ("a!=", {"a": ""}, False),
    # set-based: in, notin
    ("a in (b,c)", {"a": "c"}, True),
    ("a in (b,c)", {"a": "d"}, False),
    ("a in (b,c)", NONE, False),
    ("a notin (b,c)", {"a": "b"}, False),
    ("a notin (b,c)", {"a": "d"}, True),
    ("a notin (b,c)", NONE, True),  # notin matches objects without the key
    ("a in ()", {"a": ""}, True),  # `()` is the set holding the empty value
    ("a in ()", {"a": "b"}, False),
    ("a notin ()", {"a": ""}, False),
    ("a notin ()", {"a": "b"}, True),
    ("a in (b,)", {"a": ""}, True),  # a trailing comma adds the empty value
    ("a in (,b)", {"a": ""}, True),
    ("a in (b,,c)", {"a": ""}, True),
    ("a in (b)", {"a": ""}, False),
    ("a in(b)", {"a": "b"}, True),  # no space needed before '('
    ("  a   in   (  b ,  c  )  ", {"a": "c"}, True),
    ("a in (in,notin)", {"a": "notin"}, True),  # keywords are values inside a set
    ("in=notin", {"in": "notin"}, True),  # ... and keys or values elsewhere
    ("a=in", {"a": "in"}, True),
    # existence: key, !key
    ("a", {"a": ""}, True),
    ("a", {"a": "b"}, True),
    ("a", NONE, False),
    ("!a", NONE, True),
    ("!a", {"a": ""}, False),
    ("! a", NONE, True),
    ("!a", {"b": "a"}, True),
    # conjunction
    ("a=b,c=d", {"a": "b", "c": "d"}, True),
    ("a=b,c=d", {"a": "b"}, False),
    ("a=b,a=c", {"a": "b"}, False),
    ("a,!b,c in (d),e notin (f),g!=h", {"a": "", "c": "d", "e": "x"}, True),
    ("a,!b,c in (d),e notin (f),g!=h", {"a": "", "c": "d", "e": "f"}, False),
    ("a,!b,c in (d),e notin (f),g!=h", {"a": "", "b": "", "c": "d"}, False),
    ("x in (foo,,baz),y,z notin ()", {"x": "foo", "y": ""}, True),  # labels.Parse's example
    ("x in (foo,,baz),y,z notin ()", {"x": "", "y": "", "z": "a"}, True),
    ("x in (foo,,baz),y,z notin ()", {"x": "foo", "y": "", "z": ""}, False),
    # numeric comparison: > and < (an integer value; a label that is no integer never matches)
    ("a>1", {"a": "2"}, True),
    ("a>1", {"a": "1"}, False),
    ("a>1", {"a": "x"}, False),
    ("a>1", NONE, False),
    ("a<1", {"a": "0"}, True),
    ("a<10", {"a": "9"}, True),
    ("a<10", {"a": "10"}, False),
    # qualified keys
    ("example.com/a=b", {"example.com/a": "b"}, True),
    ("example.com/a=b", {"a": "b"}, False),
    ("app.kubernetes.io/name in (dcgm,dcgm-exporter)",
     {"app.kubernetes.io/name": "dcgm-exporter"}, True),
    ("A_b.c-D=E_f.g-H", {"A_b.c-D": "E_f.g-H"}, True),
    ("k" * 63 + "=" + "v" * 63, {"k" * 63: "v" * 63}, True),
    ("a" * 253 + "/b=c", {"a" * 253 + "/b": "c"}, True),
]

# labels.Parse returns an error for each of these.
PARSE_ERRORS: list[str] = [
    "a=b=c",
    "a==b==c",
    "a=b c",
    "a b",
    "a,",  # an identifier must follow ','
    ",a",
    "a,,b",
    "=a",
    "!",
    "!=a",
    "!a=b",  # '!' only negates existence
    "!a in (b)",
    "a!b",
    "ain (b)",  # 'ain' is one key; then '(' is no operator
    "anotin (b)",
    "a in b",
    "a in (b",
    "a in (b c)",
    "a in (b))",
    "a in ((b))",
    "a=(b)",
    "(a)",
    "a)",
    "a in (b),",
    "a>",  # '>' needs an integer
    "a>b",
    "a>1.5",
    "a>=1",
    "a<>1",
    # key syntax
    "-a=b",
    "a-=b",
    ".a",
    "a/b/c=d",
    "/a=b",
    "a/=b",
    "Example.com/a=b",  # the prefix is a lowercase DNS subdomain
    "exa_mple.com/a=b",
    "-example.com/a=b",
    "k" * 64 + "=v",
    "a" * 254 + "/b=c",
    "a@b=c",
    # value syntax
    "a=b.",
    "a=-b",
    "a=b@c",
    "a=" + "v" * 64,
    "a in (b,-c)",
    "a!=_b",
]


@pytest.mark.parametrize(("selector", "labels", "expected"), PARSE_MATCHES,
                         ids=[f"{s!r}~{lbl}" for s, lbl, _ in PARSE_MATCHES])
def test_parse_matches_like_kubernetes(selector: str, labels: dict[str, str],
                                       expected: bool) -> None:
    assert parse(selector).matches(labels) is expected


@pytest.mark.parametrize("selector", PARSE_ERRORS)
def test_parse_rejects_what_kubernetes_rejects(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse(selector)


def test_only_the_empty_string_is_empty() -> None:
    assert parse("").empty and parse(None).empty and parse(" \t").empty
    assert not parse("a").empty and not parse("a!=b").empty


# ---- metav1.LabelSelector (LabelSelectorAsSelector) ---------------------------------------------

def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


# (selector object, labels, matches)
LABEL_SELECTOR_MATCHES: list[tuple[dict[str, Any] | None, dict[str, str], bool]] = [
    (None, NONE, False),  # a nil selector matches nothing
    (None, {"a": "b"}, False),
    ({}, NONE, True),  # an empty one matches everything
    ({}, {"a": "b"}, True),
    ({"matchLabels": {}, "matchExpressions": []}, {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "c"}, False),
    ({"matchLabels": {"a": "b"}}, NONE, False),
    ({"matchLabels": {"a": "b", "c": "d"}}, {"a": "b"}, False),
    ({"matchExpressions": [expr("a", "In", "b", "c")]}, {"a": "c"}, True),
    ({"matchExpressions": [expr("a", "In", "b", "c")]}, {"a": "d"}, False),
    ({"matchExpressions": [expr("a", "In", "b")]}, NONE, False),
    ({"matchExpressions": [expr("a", "NotIn", "b")]}, {"a": "b"}, False),
    ({"matchExpressions": [expr("a", "NotIn", "b")]}, {"a": "c"}, True),
    ({"matchExpressions": [expr("a", "NotIn", "b")]}, NONE, True),
    ({"matchExpressions": [expr("a", "In", "")]}, {"a": ""}, True),
    ({"matchExpressions": [expr("a", "Exists")]}, {"a": ""}, True),
    ({"matchExpressions": [expr("a", "Exists")]}, NONE, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": "x"}, True),
    ({"matchExpressions": [expr("a", "DoesNotExist")]}, NONE, True),
    ({"matchExpressions": [expr("a", "DoesNotExist")]}, {"a": ""}, False),
    ({"matchLabels": {"a": "b"}, "matchExpressions": [expr("c", "DoesNotExist")]},
     {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}, "matchExpressions": [expr("c", "DoesNotExist")]},
     {"a": "b", "c": "d"}, False),
    ({"matchExpressions": [expr("a", "In", "b"), expr("a", "In", "c")]}, {"a": "b"}, False),
]

LABEL_SELECTOR_ERRORS: list[dict[str, Any]] = [
    {"matchExpressions": [expr("a", "in", "b")]},  # operators are case-sensitive
    {"matchExpressions": [expr("a", "Gt", "1")]},  # Gt/Lt are node selector operators only
    {"matchExpressions": [expr("a", "Equals", "b")]},
    {"matchExpressions": [{"key": "a"}]},
    {"matchExpressions": [expr("a", "In")]},  # In and NotIn need values
    {"matchExpressions": [expr("a", "NotIn")]},
    {"matchExpressions": [expr("a", "Exists", "b")]},  # Exists and DoesNotExist take none
    {"matchExpressions": [expr("a", "DoesNotExist", "b")]},
    {"matchExpressions": [expr("-a", "Exists")]},
    {"matchExpressions": [expr("", "Exists")]},
    {"matchExpressions": [expr("a", "In", "b c")]},
    {"matchLabels": {"a/b/c": "d"}},
    {"matchLabels": {"a": "-b"}},
    {"matchLabels": {"a": "v" * 64}},
]


@pytest.mark.parametrize(("selector", "labels", "expected"), LABEL_SELECTOR_MATCHES,
                         ids=[f"{s}~{lbl}" for s, lbl, _ in LABEL_SELECTOR_MATCHES])
def test_label_selector_matches_like_kubernetes(selector: dict[str, Any] | None,
                                                labels: dict[str, str], expected: bool) -> None:
    assert from_label_selector(selector).matches(labels) is expected


@pytest.mark.parametrize("selector", LABEL_SELECTOR_ERRORS, ids=str)
def test_label_selector_rejects_what_kubernetes_rejects(selector: dict[str, Any]) -> None:
    with pytest.raises(SelectorError):
        from_label_selector(selector)


def test_the_nil_selector_is_not_empty_but_matches_nothing() -> None:
    assert from_label_selector({}).empty
    assert not from_label_selector(None).empty  # labels.Nothing().Empty() is false


# ---- a map of labels, and a Service's spec.selector --------------------------------------------

@pytest.mark.parametrize(("selector", "labels", "expected"), [
    (None, {"a": "b"}, True),  # labels.SelectorFromSet: nil and empty are Everything()
    ({}, NONE, True),
    ({"a": "b"}, {"a": "b", "c": "d"}, True),
    ({"a": "b"}, {"a": "c"}, False),
    ({"a": "b", "c": "d"}, {"a": "b"}, False),
])
def test_a_set_selects_every_pair(selector: dict[str, str] | None, labels: dict[str, str],
                                  expected: bool) -> None:
    assert from_labels(selector).matches(labels) is expected


@pytest.mark.parametrize(("selector", "labels", "expected"), [
    (None, NONE, False),  # no selector: the EndpointSlice controller gives no endpoints
    (None, {"app": "x"}, False),
    ({}, {"app": "x"}, False),  # `selector: {}` is stored as no selector
    ({"app": "x"}, {"app": "x", "pod-template-generation": "2"}, True),
    ({"app": "x"}, {"app": "y"}, False),
    ({"app": "x"}, NONE, False),
])
def test_a_service_without_a_selector_selects_no_pod(
        selector: dict[str, str] | None, labels: dict[str, str], expected: bool) -> None:
    assert for_service(selector).matches(labels) is expected


def test_labels_may_be_missing() -> None:
    assert parse("!a").matches(None) and not parse("a").matches(None)


def test_the_pod_selectors_of_a_stack_read_each_pod_once() -> None:
    """`stacks.pod_selectors`: the app labels, then strays with a common label and none of
    them; a labelled DaemonSet pod matches exactly one selector."""
    comps = load_catalog().stack("gpucluster").components
    sels = pod_selectors(comps)
    assert sels == ["app in (nvidia-dcgm-dra,nvidia-dcgm-exporter-dra)",
                    "nvidia.com/gpu-operator.dcgm,app notin "
                    "(nvidia-dcgm-dra,nvidia-dcgm-exporter-dra)",
                    "nvidia.com/gpu-operator.dcgm-exporter,app notin "
                    "(nvidia-dcgm-dra,nvidia-dcgm-exporter-dra)"]
    parsed = [parse(s) for s in sels]
    for labels, hits in [
        ({"app": "nvidia-dcgm-dra", "nvidia.com/gpu-operator.dcgm": "true"}, 1),
        ({"nvidia.com/gpu-operator.dcgm": "true"}, 1),  # a stray without an app label
        ({"app": "other", "nvidia.com/gpu-operator.dcgm-exporter": "true"}, 1),
        ({"app": "other"}, 0),
    ]:
        assert sum(s.matches(labels) for s in parsed) == hits, labels
    assert pod_selectors([]) == []
