"""The per-node gap `change-stack` measures (`engine/stackchange.py`), on a fake clock and fake
EndpointSlices: a node's gap opens when its last ready endpoint goes and closes when one is
back; nodes not served at the start are not waited for; `over` names open gaps past a limit;
`renewed` holds only once every node is served by one of the pods it is given (the new
stack's), whatever else serves it, and asks for them only when a pod it has not judged serves a
node still waiting."""

from __future__ import annotations

from typing import Any, cast

from migrator.engine.gaps import GapMeter
from migrator.engine.informer import Reflector
from migrator.model.objects import SERVICE_NAME_LABEL
from tests.helpers.clock import FakeClock


class Slices:
    """The watched EndpointSlices (a reflector's `items`), one per service, from a dict the
    test changes."""

    def __init__(self) -> None:
        self.ready: dict[str, dict[str, bool]] = {}  # service → node → ready
        self.pod: dict[str, str] = {}  # node → the uid of the pod serving it ("" by default)

    def items(self) -> list[dict[str, Any]]:
        def endpoint(service: str, node: str, ready: bool) -> dict[str, Any]:
            uid = f"{service}-{self.pod.get(node, '')}"
            return {"nodeName": node, "conditions": {"ready": ready},
                    "targetRef": {"kind": "Pod", "uid": uid}}

        return [{"metadata": {"labels": {SERVICE_NAME_LABEL: service}},
                 "endpoints": [endpoint(service, n, r) for n, r in nodes.items()]}
                for service, nodes in self.ready.items()]


def over(slices: Slices, services: list[str], clock: FakeClock) -> GapMeter:
    return GapMeter(cast("Reflector[dict[str, Any]]", slices), services, clock)


def test_a_gap_opens_and_closes_per_service_and_node() -> None:
    clock, slices = FakeClock(), Slices()
    slices.ready = {"dcgm": {"a": True, "b": True}, "exp": {"a": True, "b": False}}
    meter = over(slices, ["dcgm", "exp"], clock)
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


class NewPods:
    """The new stack's pod uids, counting how often they are listed."""

    def __init__(self, *uids: str) -> None:
        self.uids, self.listed = set(uids), 0

    def __call__(self) -> set[str]:
        self.listed += 1
        return self.uids


def test_renewed_only_once_every_node_is_served_by_the_given_pods() -> None:
    clock, slices = FakeClock(), Slices()
    slices.ready = {"dcgm": {"a": True, "b": True}, "exp": {"a": True, "b": True}}
    slices.pod = {"a": "old", "b": "old"}
    meter = over(slices, ["dcgm", "exp"], clock)
    meter.sample()
    new = NewPods("dcgm-new", "exp-new")
    assert meter.all_served() and not meter.renewed(new)  # the old pods serve every node
    slices.pod["a"] = "new"
    meter.sample()
    assert not meter.renewed(new)
    slices.ready["exp"]["b"] = False  # b's old exporter goes before its new one is Ready
    meter.sample()
    assert not meter.renewed(new) and not meter.all_served()
    slices.pod["b"] = "new"
    slices.ready["exp"]["b"] = True
    meter.sample()
    assert meter.all_served() and meter.renewed(new)
    other = over(slices, ["dcgm", "exp"], clock)
    other.sample()
    assert not other.renewed(NewPods("dcgm-new"))  # the exporter's pods are not among them


def test_the_new_pods_are_listed_only_when_an_unjudged_pod_serves_a_waiting_node() -> None:
    clock, slices = FakeClock(), Slices()
    slices.ready = {"dcgm": {"a": True, "b": True}}
    slices.pod = {"a": "old-a", "b": "old-b"}
    meter = over(slices, ["dcgm"], clock)
    new = NewPods()  # the new stack's pods: none yet
    meter.sample()
    assert not meter.renewed(new) and new.listed == 1
    for _ in range(5):  # the old pods outlive their CR: judged once, not listed again
        meter.sample()
        assert not meter.renewed(new)
    assert new.listed == 1
    new.uids = {"dcgm-new-a", "dcgm-new-b"}
    slices.pod["a"] = "new-a"  # a pod not seen before serves a waiting node
    meter.sample()
    assert not meter.renewed(new) and new.listed == 2
    slices.pod["b"] = "new-b"  # already listed as the new stack's: no listing
    meter.sample()
    assert meter.renewed(new) and new.listed == 2
