"""The cache's pure parts: versions, which events a reflector takes, the pod selectors."""

from __future__ import annotations

from typing import Any, cast

from migrator.engine import informer
from migrator.kube.client import Kube
from migrator.model import kinds, stacks
from migrator.model import objects as o
from migrator.model.selectors import parse
from migrator.model.stacks import load_catalog


def _obj(name: str, rv: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv),
                         "labels": labels}}


def _reflector(selector: str | None = None) -> informer.Reflector[dict[str, Any]]:
    return informer.Reflector(cast(Kube, None), kinds.SERVICE, "ns", lambda o: o, selector)


def test_versions_compare_as_integers_and_opaque_ones_as_none() -> None:
    assert o.int_version("1234") == 1234
    assert o.int_version("") == o.int_version(None) == o.int_version("abc") == 0


def test_an_event_a_list_already_covers_does_not_overwrite_it() -> None:
    """A list on the reading thread (a late fence) may overtake events still in flight on the
    stream: those must not put an older state back."""
    r = _reflector()
    r._apply("ADDED", _obj("a", 5))
    r.rv = 10  # as after a list at version 10
    r._items["a"] = _obj("a", 9)
    r._apply("MODIFIED", _obj("a", 7))  # in flight from before the list
    assert r._items["a"]["metadata"]["resourceVersion"] == "9"
    r._apply("DELETED", _obj("a", 8))
    assert "a" in r._items
    r._apply("MODIFIED", _obj("a", 11))
    assert r._items["a"]["metadata"]["resourceVersion"] == "11" and r.rv == 11
    r._apply("DELETED", _obj("a", 12))
    assert "a" not in r._items and r.rv == 12


class _ListsAt:
    """A kube whose one list answers at version `rv` with `items`, while `meanwhile` runs
    (the stream applying events during the list)."""

    def __init__(self, rv: int, items: list[dict[str, Any]], meanwhile: Any) -> None:
        self.rv, self.items, self.meanwhile = rv, items, meanwhile

    def collect(self, kind: Any, namespace: Any, *, keep: Any, **kw: Any) -> Any:
        self.meanwhile()
        return [keep(i) for i in self.items], str(self.rv)


def test_a_list_the_stream_overtook_does_not_put_a_deleted_object_back() -> None:
    """A late fence lists on the reading thread while the stream keeps applying events: a
    delete at version 12 applied during a list answered at 10 stays applied."""
    r = _reflector()
    r._apply("ADDED", _obj("a", 5))
    r.kube = cast(Kube, _ListsAt(10, [_obj("a", 5)], lambda: r._apply("DELETED", _obj("a", 12))))
    r.load()
    assert "a" not in r._items and r.rv == 12
    r.kube = cast(Kube, _ListsAt(20, [_obj("b", 15)], lambda: None))
    r.load()  # a list newer than the cache replaces it
    assert list(r._items) == ["b"] and r.rv == 20


def test_a_reflector_waits_only_for_objects_its_selector_holds() -> None:
    r = _reflector("app=x")
    r.saw(kinds.SERVICE, _obj("a", 40, app="y"))
    r.saw(kinds.POD, _obj("a", 41, app="x"))
    r.saw(kinds.SERVICE, {"metadata": {**_obj("a", 42, app="x")["metadata"],
                                       "namespace": "other"}})
    assert r.want == 0
    r.saw(kinds.SERVICE, _obj("a", 43, app="x"))
    assert r.want == 43


def test_pod_selectors_cover_every_app_and_the_strays_once() -> None:
    catalog = load_catalog()
    selectors = [parse(s) for s in informer.pod_selectors(catalog)]
    for c in catalog.components:
        own = {"app": c.app_label, c.common_label.key: c.common_label.value}
        assert sum(s.matches(own) for s in selectors) == 1
        stray = {"app": "something-else", c.common_label.key: c.common_label.value}
        assert sum(s.matches(stray) for s in selectors) >= 1
    assert not any(s.matches({"app": "something-else"}) for s in selectors)


def test_which_pods_belong_is_one_definition_whether_listed_per_app_cached_or_read() -> None:
    """The API reads (one selector for the app labels), the cache's reflectors (one per app
    label) and the filter over cached pods answer alike."""
    comps = load_catalog().components
    together = [parse(s) for s in stacks.pod_selectors(comps)]
    apart = [parse(s) for s in stacks.pod_selectors(comps, per_app=True)]
    mine = stacks.belongs(comps)
    samples = [{"app": c.app_label} for c in comps] + [
        {"app": "x", c.common_label.key: "true"} for c in comps] + [
        {c.common_label.key: "true"} for c in comps] + [{"app": "x"}, {}]
    for labels in samples:
        expected = any(s.matches(labels) for s in together)
        assert any(s.matches(labels) for s in apart) == expected == mine(labels), labels
    assert sum(mine(labels) for labels in samples) == len(samples) - 2


def test_the_nodes_names_are_read_again_only_for_a_node_not_judged_or_after_a_while() -> None:
    reads: list[frozenset[str]] = []
    cluster = frozenset({"n1", "n2"})

    def read() -> frozenset[str]:
        reads.append(cluster)
        return cluster

    known = informer.KnownNodes()
    assert known.of(frozenset({"n1", "n3"}), 0.0, read) == cluster and len(reads) == 1
    known.of(frozenset({"n1"}), 5.0, read)  # every pod's node judged: served from memory
    assert len(reads) == 1
    known.of(frozenset({"n1", "n4"}), 6.0, read)  # a node the read did not judge: read again
    assert len(reads) == 2
    known.of(frozenset({"n1"}), 6.0 + informer.NODES_FRESH_SECONDS, read)  # stale
    assert len(reads) == 3
