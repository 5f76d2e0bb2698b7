"""The per-node gap `change-stack` measures (`engine/stackchange.py`), on a fake clock and fake
EndpointSlices: a node's gap opens when its last ready endpoint goes and closes when one is
back; nodes not served at the start are not waited for; `over` names open gaps past a limit."""

from __future__ import annotations

from typing import Any, cast

from migrator.engine.stackchange import GapMeter
from migrator.kube.client import Kube, ObjList
from tests.helpers.clock import FakeClock


class Slices:
    """`Kube.list` of EndpointSlices by service name, from a dict the test changes."""

    def __init__(self) -> None:
        self.ready: dict[str, dict[str, bool]] = {}  # service → node → ready

    def list(self, kind: Any, namespace: str | None = None, *,
             label_selector: str | None = None) -> ObjList:
        service = (label_selector or "").split("=", 1)[1]
        endpoints = [{"nodeName": n, "conditions": {"ready": r}}
                     for n, r in self.ready.get(service, {}).items()]
        return ObjList([{"endpoints": endpoints}], "1")


def test_a_gap_opens_and_closes_per_service_and_node() -> None:
    clock, slices = FakeClock(), Slices()
    slices.ready = {"dcgm": {"a": True, "b": True}, "exp": {"a": True, "b": False}}
    meter = GapMeter(cast(Kube, slices), "ns", ["dcgm", "exp"], clock)
    meter.sample()
    assert meter.nodes == {"dcgm": {"a", "b"}, "exp": {"a"}}  # b's exporter: not waited for
    slices.ready["dcgm"]["a"] = False
    slices.ready["exp"]["a"] = False
    clock.sleep(10)
    meter.sample()
    clock.sleep(40)
    assert meter.over(45) == [] and not meter.all_served()
    clock.sleep(10)
    assert meter.over(45) == ["dcgm@a", "exp@a"]
    slices.ready["dcgm"]["a"] = True
    meter.sample()
    clock.sleep(5)
    slices.ready["exp"]["a"] = True
    meter.sample()
    assert meter.all_served()
    assert meter.as_record() == {"a": {"dcgm": 50.0, "exp": 55.0}}
    assert meter.worst() == 55.0
