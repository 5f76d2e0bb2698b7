"""The shared slices' endpoints are shaped once per slice version by the reader's
`ShapedEndpoints` (the guard's reconciler owns one): a new version of a slice is shaped again,
never answered from the old one, and a caller without one shapes every time."""

from __future__ import annotations

from typing import Any

from migrator.model import sharing


def _slice(version: str, ready: bool, uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": "s", "namespace": "ns", "uid": uid,
                         "resourceVersion": version},
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": "n1",
                           "conditions": {"ready": ready, "serving": ready,
                                          "terminating": False},
                           "targetRef": {"kind": "Pod", "name": "p", "uid": "pu"},
                           "hints": {"forZones": []}}]}


def test_each_version_is_shaped_and_a_new_one_is_not_answered_from_the_old() -> None:
    shaped = sharing.ShapedEndpoints()
    first = shaped.of(_slice("1", True), "ns")
    assert first == ({"addresses": ["10.0.0.1"], "nodeName": "n1",
                      "conditions": {"ready": True, "serving": True, "terminating": False},
                      "targetRef": {"kind": "Pod", "name": "p", "namespace": "ns",
                                    "uid": "pu"}},)
    assert shaped.of(_slice("1", True), "ns") is first  # the same version: kept
    second = shaped.of(_slice("2", False), "ns")
    assert second[0]["conditions"]["ready"] is False
    assert shaped.of(_slice("2", False), "other")[0]["targetRef"]["namespace"] == "other"


def test_without_a_reader_cache_nothing_is_kept_between_calls() -> None:
    first = sharing._endpoints_of(_slice("1", True), "ns")
    assert sharing._endpoints_of(_slice("1", True), "ns") == first
    assert sharing._endpoints_of(_slice("1", True), "ns") is not first


def test_a_full_cache_starts_again() -> None:
    shaped = sharing.ShapedEndpoints(limit=2)
    a = shaped.of(_slice("1", True, uid="a"), "ns")
    shaped.of(_slice("1", True, uid="b"), "ns")
    shaped.of(_slice("1", True, uid="c"), "ns")  # full: cleared, then c kept
    assert shaped.of(_slice("1", True, uid="a"), "ns") is not a


def test_a_slice_without_uid_or_version_is_shaped_every_time() -> None:
    shaped = sharing.ShapedEndpoints()
    sl = _slice("", True, uid="")
    assert shaped.of(sl, "ns") == shaped.of(sl, "ns")
    sl["endpoints"][0]["nodeName"] = "n2"
    assert shaped.of(sl, "ns")[0]["nodeName"] == "n2"
