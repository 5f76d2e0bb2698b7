"""The state document (docs/design.md, "State and resume") with plain data: round trip, step
records, bounded history, and refusal of documents that are not a valid state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from migrator.engine.state.document import HISTORY_LIMIT, State
from migrator.errors import StateCorrupt
from migrator.model.phasestatus import PhaseStatus
from migrator.model.steps import SetLabels, SetSelector
from tests.helpers.clock import FakeClock

STEP = SetLabels("nvidia-dcgm-dra", {"k": "true"}, {"k": "true"}, {"k": None}, {"k": "false"})


def test_round_trip_keeps_steps_originals_and_baselines() -> None:
    state = State("gpu-operator", stack="gpucluster", plan_fingerprint="sha256:x")
    rec = state.phase(1)
    rec.status = PhaseStatus.IN_PROGRESS
    rec.baselines = [{"service": "nvidia-dcgm-dra", "total": 3, "by_node": {"n1": 1},
                      "local": True}]
    rec.mark(STEP, "intent")
    rec.mark(STEP, "done")
    again = State.from_document(state.to_document())
    assert again.stack == "gpucluster" and again.plan_fingerprint == "sha256:x"
    assert again.phase(1).baselines == rec.baselines
    assert [(r.status, r.id) for r in again.phase(1).steps] == [("done", STEP.id)]
    assert again.phase(1).done_steps() == [STEP]
    undo = again.phase(1).done_steps()[0].inverse()
    assert isinstance(undo, SetLabels)
    assert undo.template_after == {"k": "false"}


def test_intent_without_done_still_counts_as_possibly_written() -> None:
    state = State("ns")
    step = SetSelector("svc", {"app": "a"}, {"c": "true"}, local=False)
    state.phase(3).mark(step, "intent")
    assert state.phase(3).done_steps() == [step]
    state.phase(3).mark(step, "skipped")
    assert state.phase(3).done_steps() == []


def test_history_is_bounded() -> None:
    state = State("ns")
    for i in range(HISTORY_LIMIT + 25):
        state.log("event", i=i)
    assert len(state.history) == HISTORY_LIMIT
    assert state.history[-1]["i"] == HISTORY_LIMIT + 24


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(schema=99),
    lambda d: d.pop("phases"),
    lambda d: d["phases"][0].update(status="half-done"),
    lambda d: d["phases"][0].update(steps=[{"status": "done", "at": "t",
                                            "step": {"type": "teleport"}}]),
    lambda d: d.update(namespace=None) or d.pop("namespace"),
])
def test_invalid_documents_are_refused(mutate: Callable[[dict[str, Any]], object]) -> None:
    doc = State("ns").to_document()
    mutate(doc)
    with pytest.raises(StateCorrupt) as err:
        State.from_document(doc)
    assert err.value.hint, "a refusal must say what to do"


def test_every_timestamp_comes_from_the_injected_clock() -> None:
    clock = FakeClock()
    state = State("ns", clock=clock)
    assert state.created == state.updated == "2025-03-01T12:00:00Z"
    clock.advance(61)
    state.phase(1).mark(STEP, "intent")
    state.log("phase-start", phase=1)
    clock.advance(60)
    doc = state.to_document()
    assert doc["phases"][0]["steps"][0]["at"] == "2025-03-01T12:01:01Z"
    assert doc["history"][0]["at"] == "2025-03-01T12:01:01Z"
    assert (doc["created"], doc["updated"]) == ("2025-03-01T12:00:00Z", "2025-03-01T12:02:01Z")
    again = State.from_document(doc, clock)
    clock.advance(1)
    again.phase(2).mark(STEP, "done")  # a loaded document keeps stamping on the same clock
    assert again.phase(2).steps[0].at == "2025-03-01T12:02:02Z"
    assert again.created == "2025-03-01T12:00:00Z"
