"""The sim's crash-test hook `hang_nth_write`: the Nth successful write is applied, its answer
held until the hook is cleared; failed writes and reads do not count; settable over /sim/v1."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest

from dcgm_sim.faults import FaultsError
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds

NS = "gpu-operator"


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}}


def test_the_nth_successful_write_lands_and_its_answer_waits(empty_api: ApiServer) -> None:
    kube = Kube.for_server(empty_api.url, ADMIN_TOKEN, retry=RetryPolicy(attempts=1))
    empty_api.faults.update(hang_nth_write=2)
    kube.create(_cm("one"))  # write 1
    kube.list(kinds.CONFIGMAP, NS)  # reads do not count
    with pytest.raises(Exception, match="already exists"):
        kube.create(_cm("one"))  # a refused write does not count
    answered = threading.Event()

    def second() -> None:
        kube.create(_cm("two"))
        answered.set()

    threading.Thread(target=second, daemon=True).start()
    assert empty_api.faults.wait_held(10)
    assert empty_api.store.find(kinds.CONFIGMAP, NS, "two") is not None  # applied...
    assert not answered.wait(0.2)  # ...but unanswered
    assert empty_api.faults.snapshot()["write_held"] is True
    empty_api.faults.release_held()
    assert answered.wait(10)
    assert empty_api.faults.snapshot()["write_held"] is False
    kube.create(_cm("three"))  # the hook fired once; later writes answer at once


def test_the_hook_is_settable_over_http(empty_api: ApiServer) -> None:
    def put(body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(f"{empty_api.url}/sim/v1/faults", json.dumps(body).encode(),
                                     method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
            return doc

    assert put({"hang_nth_write": 3})["hang_nth_write"] == 3
    assert put({"hang_nth_write": None})["hang_nth_write"] is None
    with pytest.raises(FaultsError):
        empty_api.faults.update(hang_nth_write=0)


def test_the_hook_counts_only_the_writes_of_the_kind_it_is_given(empty_api: ApiServer) -> None:
    """`hang_write_of`: the Nth write of that verb and resource, whatever came between; the
    request log marks the one whose answer was held."""
    kube = Kube.for_server(empty_api.url, ADMIN_TOKEN, retry=RetryPolicy(attempts=1))
    empty_api.faults.update(hang_nth_write=2, hang_write_of="patch configmaps")
    kube.create(_cm("one"))  # a create: not counted
    kube.patch(kinds.CONFIGMAP, "one", NS, {"data": {"a": "1"}})  # patch 1
    kube.create(_cm("two"))
    answered = threading.Event()

    def second_patch() -> None:
        kube.patch(kinds.CONFIGMAP, "two", NS, {"data": {"b": "2"}})
        answered.set()

    threading.Thread(target=second_patch, daemon=True).start()
    assert empty_api.faults.wait_held(10)
    assert not answered.wait(0.2)
    empty_api.faults.release_held()
    assert answered.wait(10)
    held = [(r.verb, r.name) for r in empty_api.log.writes() if r.held_answer]
    assert held == [("patch", "two")]
    with pytest.raises(FaultsError):
        empty_api.faults.update(hang_write_of="patch")
