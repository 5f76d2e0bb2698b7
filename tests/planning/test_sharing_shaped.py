"""The shared slices' endpoints are shaped once per slice version (`sharing._endpoints_of`): a
new version of a slice is shaped again, never answered from the old one."""

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
    first = sharing._endpoints_of(_slice("1", True), "ns")
    assert first == ({"addresses": ["10.0.0.1"], "nodeName": "n1",
                      "conditions": {"ready": True, "serving": True, "terminating": False},
                      "targetRef": {"kind": "Pod", "name": "p", "namespace": "ns",
                                    "uid": "pu"}},)
    assert sharing._endpoints_of(_slice("1", True), "ns") is first  # the same version: kept
    second = sharing._endpoints_of(_slice("2", False), "ns")
    assert second[0]["conditions"]["ready"] is False
    assert sharing._endpoints_of(_slice("2", False), "other")[0]["targetRef"][
        "namespace"] == "other"


def test_a_slice_without_uid_or_version_is_shaped_every_time() -> None:
    sl = _slice("", True, uid="")
    assert sharing._endpoints_of(sl, "ns") == sharing._endpoints_of(sl, "ns")
    sl["endpoints"][0]["nodeName"] = "n2"
    assert sharing._endpoints_of(sl, "ns")[0]["nodeName"] == "n2"
