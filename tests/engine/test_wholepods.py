"""engine/wholepods.py with a recording stand-in for `Kube.get`/`Kube.collect`: which printed
pods are read whole, by name or by which selectors, and when a kept whole view still stands
for a row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from migrator.engine.wholepods import MAX_GETS, WholePods
from migrator.kube.client import Kube
from migrator.model.snapshot import EndpointView, PodView, ServiceEndpoints

APP, STRAYS = "app=nvidia-dcgm", "nvidia.com/gpu-operator.dcgm,app notin (nvidia-dcgm)"


def _row(name: str, rv: str, ready: bool, app: str = "nvidia-dcgm") -> PodView:
    return PodView(name=name, uid=f"uid-{name}", node="n1", labels={"app": app}, ready=ready,
                   deleting=False, owner_kind="DaemonSet", owner_name="nvidia-dcgm",
                   why="" if ready else "Running", printed=True,
                   version=int(rv) if rv.isdigit() else 0)


def _whole(name: str, rv: str, ready: bool, app: str = "nvidia-dcgm") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv,
                         "labels": {"app": app}},
            "spec": {"nodeName": "n1"},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True" if ready else "False"},
                {"type": "ContainersReady", "status": "True"}]}}


class FakeKube:
    """`get` and `collect` answer from `pods`, recording each name or selector asked for."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self.pods = list(pods)
        self.asked: list[str | None] = []

    def get(self, kind: Any, name: str, namespace: str) -> dict[str, Any] | None:
        self.asked.append(f"get {name}")
        return next((p for p in self.pods if p["metadata"]["name"] == name), None)

    def collect(self, kind: Any, namespace: str, *, keep: Callable[[Any], PodView],
                label_selector: str | None = None, **_: Any) -> tuple[list[PodView], str]:
        self.asked.append(label_selector)
        app = (label_selector or "").partition("=")[2]
        return [keep(p) for p in self.pods if p["metadata"]["labels"]["app"] == app], "100"


def _settle(whole: WholePods, kube: FakeKube, views: list[PodView],
            endpoints: dict[str, ServiceEndpoints] | None = None) -> list[PodView]:
    return whole.resolve(cast(Kube, kube), "ns", views, endpoints or {}, [APP, STRAYS])


def test_healthy_rows_are_believed_and_nothing_is_read() -> None:
    kube, whole = FakeKube(), WholePods()
    rows = [_row("a", "5", True), _row("b", "6", True)]
    assert _settle(whole, kube, rows) == rows
    assert kube.asked == [] and whole.reads == 0


def test_a_doubtful_row_is_read_whole_by_name_and_kept_until_it_changes() -> None:
    kube, whole = FakeKube(_whole("a", "5", False), _whole("b", "6", True)), WholePods()
    views = _settle(whole, kube, [_row("a", "5", False), _row("b", "6", True)])
    assert [(v.name, v.printed, v.ready, v.node_lost) for v in views] == [
        ("a", False, False, True), ("b", True, True, False)]
    assert kube.asked == ["get a"]
    _settle(whole, kube, [_row("a", "5", False)])
    assert kube.asked == ["get a"], "the same version of a pod was read whole twice"
    kube.pods[0] = _whole("a", "7", True)
    views = _settle(whole, kube, [_row("a", "7", False)])  # changed: the kept view is older
    assert kube.asked == ["get a", "get a"]
    assert [(v.printed, v.ready) for v in views] == [(False, True)]
    assert whole.reads == 2


def test_many_doubtful_rows_are_read_by_listing_only_the_selectors_that_hold_them() -> None:
    names = [f"p{i}" for i in range(MAX_GETS + 1)]
    kube = FakeKube(*(_whole(n, "5", False) for n in names))
    whole = WholePods()
    views = _settle(whole, kube, [_row(n, "5", False) for n in names])
    assert kube.asked == [APP]  # one list, and not the strays' selector
    assert len(views) == len(names) and not any(v.printed for v in views)
    _settle(whole, kube, [_row(n, "5", False) for n in names])
    assert kube.asked == [APP]


def test_a_row_contradicted_by_a_newer_slice_is_read_whole() -> None:
    kube, whole = FakeKube(_whole("a", "5", False)), WholePods()
    slice_says = {"svc": ServiceEndpoints("svc", (EndpointView("a", "n1", False, False,
                                                               version=9),))}
    [view] = _settle(whole, kube, [_row("a", "5", True)], slice_says)
    assert not view.printed and not view.ready and view.node_lost
    assert kube.asked == ["get a"]


def test_a_doubtful_pod_the_whole_read_no_longer_finds_is_left_out() -> None:
    replaced = _whole("c", "8", True)
    replaced["metadata"]["uid"] = "uid-of-a-new-pod"  # the name now holds another pod
    kube, whole = FakeKube(_whole("b", "6", True), replaced), WholePods()
    views = _settle(whole, kube, [_row("a", "5", False), _row("b", "6", True),
                                  _row("c", "7", False)])
    assert [v.name for v in views] == ["b"]


def test_a_version_that_is_not_an_integer_is_read_whole_every_time() -> None:
    kube, whole = FakeKube(_whole("a", "x", False)), WholePods()
    for _ in range(2):
        [view] = _settle(whole, kube, [_row("a", "x", False)])
        assert not view.printed
    assert kube.asked == ["get a", "get a"]
