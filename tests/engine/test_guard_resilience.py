"""The guard keeps going where one thing fails: a shared slice the API server refuses is
reported while the others are written, and a watch that fails in any way is retried by its
reflector instead of ending its thread with a traceback. The refusals are stand-ins: the sim
refuses no well-formed slice, so the failing calls are scripted here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any, cast

from migrator.engine import informer
from migrator.engine.guard import Guard
from migrator.engine.guardwrites import Outcome
from migrator.errors import APIUnreachable
from migrator.kube import transport as statuses
from migrator.kube.client import Kube
from migrator.model import kinds, sharing
from migrator.model.stacks import load_catalog

Obj = dict[str, Any]


class _Refusing:
    """Creates slices, refusing those whose name is in `refuse` with a 422."""

    def __init__(self, refuse: set[str]) -> None:
        self.refuse = refuse
        self.created: list[str] = []

    def create(self, body: Obj) -> Obj:
        name = body["metadata"]["name"]
        if name in self.refuse:  # the API server's Status, through the client's translation
            raise statuses.error_for(422, json.dumps({
                "kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422,
                "message": f'EndpointSlice.discovery.k8s.io "{name}" is invalid: '
                           "endpoints[0].addresses[0]: Invalid value",
                "details": {"name": name, "kind": "EndpointSlice", "causes": [
                    {"reason": "FieldValueInvalid", "field": "endpoints[0].addresses[0]",
                     "message": "Invalid value: \"300.0.0.1\""}]}}).encode(),
                method="POST", path="/apis/discovery.k8s.io/v1/endpointslices")
        self.created.append(name)
        return body


def _create(name: str, service: str) -> sharing.SliceWrite:
    return sharing.SliceWrite(sharing.CREATE, name, service, "r",
                              {"metadata": {"name": name, "namespace": "gpu-operator"}})


def test_a_refused_slice_is_reported_and_the_rest_are_written() -> None:
    kube = _Refusing({"nvidia-dcgm-dcgm-migrate-0"})
    log: list[str] = []
    guard = Guard(cast(Kube, kube), "gpu-operator", load_catalog(), log=log.append)
    writes = [_create("nvidia-dcgm-dcgm-migrate-0", "nvidia-dcgm"),
              _create("nvidia-dcgm-exporter-dcgm-migrate-0", "nvidia-dcgm-exporter")]
    done, refused = guard.writers.write_slices(writes)
    assert [w.name for w in done] == ["nvidia-dcgm-exporter-dcgm-migrate-0"]
    assert kube.created == ["nvidia-dcgm-exporter-dcgm-migrate-0"]
    # A typed value with the API Status, not a line to parse; its line names slice and Service.
    [refusal] = refused
    assert (refusal.outcome, refusal.kind, refusal.name, refusal.action, refusal.service,
            refusal.status, refusal.reason) == (
        Outcome.REFUSED, "EndpointSlice", "nvidia-dcgm-dcgm-migrate-0", "create",
        "nvidia-dcgm", 422, "Invalid")
    assert "is invalid" in refusal.message
    assert refusal.causes == ('endpoints[0].addresses[0]: Invalid value: "300.0.0.1"',)
    assert str(refusal).startswith(
        "create EndpointSlice/nvidia-dcgm-dcgm-migrate-0 for Service/nvidia-dcgm: ")
    # Logged once, not on every pass that tries it again.
    guard.writers.write_slices(writes[:1])
    assert sum("nvidia-dcgm-dcgm-migrate-0" in line for line in log) == 1


class _Stream:
    def __init__(self, events: list[tuple[str, Obj]]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[tuple[str, Obj]]:
        return iter(self.events)

    def stop(self) -> None:
        pass


class _FlakyWatch:
    """Lists nothing; its first watches fail (a dropped connection, then a bug-like error),
    the next one delivers an object."""

    def __init__(self) -> None:
        self.watches = 0
        self.delivered = threading.Event()

    def collect(self, *_: Any, **__: Any) -> tuple[list[Any], str]:
        return [], "1"

    def watch(self, *_: Any, **__: Any) -> _Stream:
        self.watches += 1
        if self.watches == 1:
            raise APIUnreachable("connection reset by peer")
        if self.watches == 2:
            raise ValueError("a malformed event")
        if self.watches == 3:
            obj = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "2"}}
            self.delivered.set()
            return _Stream([("ADDED", obj)])
        return _Stream([])


def test_a_failing_watch_is_retried_never_a_thread_traceback(monkeypatch: Any) -> None:
    crashed: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_value))
    monkeypatch.setattr(informer, "RETRY_SECONDS", 0.01)
    kube = _FlakyWatch()
    reflector = informer.Reflector(cast(Kube, kube), kinds.SERVICE, "ns", lambda o: o, None)
    reflector.start()
    try:
        assert kube.delivered.wait(5)
        with reflector._cond:  # the delivered event is applied on the reflector's thread
            assert reflector._cond.wait_for(lambda: "a" in reflector._items, 5)
        assert reflector.alive
    finally:
        reflector.stop()
    assert crashed == []
    assert reflector.failures == 2 and reflector.last_error == "a malformed event"
