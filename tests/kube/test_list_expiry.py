"""A list whose continue token expires mid-read (410) restarts from scratch, and its last try is
one unpaginated list (client-go's pager `FullListIfExpired`), so a busy cluster cannot starve a
read; the page size is a connection setting (`Kube(page_size=...)`)."""

from __future__ import annotations

from typing import Any

import pytest

from migrator.errors import WatchExpired
from migrator.kube import Kube, RetryPolicy
from migrator.kube.client import EXPIRED_RESTARTS
from migrator.model import kinds

Stub = Any  # the `stub` fixture (conftest.py)
TOO_OLD = "The provided continue parameter is too old to display a consistent list result."


def _expired() -> tuple[int, dict[str, str], Any]:
    return 410, {}, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                     "reason": "Expired", "message": TOO_OLD, "metadata": {"continue": "x"}}


def _page(names: list[str], rv: str, cont: str = "") -> tuple[int, dict[str, str], Any]:
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    return 200, {}, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                     "items": [{"metadata": {"name": n}} for n in names]}


def _kube(stub: Stub, page_size: int) -> Kube:
    return Kube.for_server(stub.url, "t", retry=RetryPolicy(sleep=lambda s: None),
                           page_size=page_size)


def test_the_connection_page_size_is_the_limit_of_every_page(stub: Stub) -> None:
    stub.script(_page(["a"], "5", "t1"), _page(["b"], "5"))
    names, version = _kube(stub, 1).collect(kinds.POD, "ns", keep=lambda p: p["metadata"]["name"])
    assert (names, version) == (["a", "b"], "5")
    assert [r.query.get("limit") for r in stub.requests] == [["1"], ["1"]]


def test_after_the_restarts_the_last_try_is_one_unpaginated_list(stub: Stub) -> None:
    script = []
    for _ in range(EXPIRED_RESTARTS):
        script += [_page(["a"], "10", "t1"), _expired()]
    script.append(_page(["a", "b", "c"], "20"))
    stub.script(*script)
    listed = _kube(stub, 1).list(kinds.POD, "ns")
    assert [p["metadata"]["name"] for p in listed.items] == ["a", "b", "c"]
    assert listed.resource_version == "20"
    queries = [r.query for r in stub.requests]
    assert len(queries) == 2 * EXPIRED_RESTARTS + 1
    assert all(q.get("limit") == ["1"] for q in queries[:-1])
    assert "limit" not in queries[-1] and "continue" not in queries[-1]


def test_an_unpaginated_list_that_still_fails_raises(stub: Stub) -> None:
    stub.script(*([_page(["a"], "10", "t1"), _expired()] * EXPIRED_RESTARTS), _expired())
    with pytest.raises(WatchExpired):
        _kube(stub, 1).list(kinds.POD, "ns")
