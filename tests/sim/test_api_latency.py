"""The sim's write path: a written object never shares a part with the body it came from, and
the modelled write latency (`apilatency.py`) holds simulated time while the sim handles a write
and only then."""

from __future__ import annotations

from dcgm_sim import writes
from dcgm_sim.apilatency import WriteLatency
from dcgm_sim.clock import SimClock
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Raw


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NS, "labels": {"a": "1"}},
            "data": {"k": "v"}}


def test_stored_objects_share_nothing_with_the_body_written(store: Store) -> None:
    body = _configmap("cm")
    created = writes.create(store, kinds.CONFIGMAP, body, namespace=NS)
    body["metadata"]["labels"]["a"] = "changed"  # type: ignore[index]
    body["data"]["k"] = "changed"  # type: ignore[index]
    stored = store.get(kinds.CONFIGMAP, NS, "cm")
    assert stored["data"] == {"k": "v"} and stored["metadata"]["labels"] == {"a": "1"}
    assert "uid" not in body["metadata"]  # type: ignore[operator]

    update = {**created, "data": {"k": "w"}}
    writes.update(store, kinds.CONFIGMAP, update, namespace=NS, name="cm")
    update["data"]["k"] = "changed"
    update["metadata"]["labels"]["a"] = "changed"
    stored = store.get(kinds.CONFIGMAP, NS, "cm")
    assert stored["data"] == {"k": "w"} and stored["metadata"]["labels"] == {"a": "1"}


def test_a_held_clock_stands_still_and_overlapping_holds_count_once() -> None:
    fake = FakeTime()
    clock = SimClock(1.0, monotonic=fake)
    fake.t += 2
    assert clock.now() == 2.0
    with clock.held():
        fake.t += 3
        with clock.held():
            fake.t += 1
        fake.t += 1
        assert clock.now() == 2.0
    fake.t += 0.5
    assert clock.now() == 2.5
    assert clock.held_seconds() == 5.0


def test_modelled_writes_hold_the_clock_reads_do_not(store: Store) -> None:
    clock = SimClock(1.0)
    server = ApiServer(store)
    server.model_writes(WriteLatency(clock, 0.0))
    holds: list[float] = []
    original = clock.held

    def counting():  # type: ignore[no-untyped-def]
        holds.append(clock.now())
        return original()

    clock.held = counting  # type: ignore[method-assign]
    server.start()
    try:
        raw = Raw(server.url)
        code, _, _ = raw("POST", f"/api/v1/namespaces/{NS}/configmaps", _configmap("cm"))
        assert code == 201 and len(holds) == 1
        code, _, _ = raw("GET", f"/api/v1/namespaces/{NS}/configmaps/cm")
        assert code == 200 and len(holds) == 1
        code, _, _ = raw("DELETE", f"/api/v1/namespaces/{NS}/configmaps/cm")
        assert code == 200 and len(holds) == 2
        server.model_writes(None)
        code, _, _ = raw("POST", f"/api/v1/namespaces/{NS}/configmaps", _configmap("cm2"))
        assert code == 201 and len(holds) == 2
    finally:
        server.stop()
