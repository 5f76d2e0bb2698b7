"""What the parts of the apply back end outside it work through (engine/loop.py): the phase's
direction as data (forward records in the steps, rollback in its own undo), the gates the
post-write wait acts on found by their kind (never by name), and the apply back end as the
`Applier` that afterwrite and inplace are typed against. Plain data: no API server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from migrator import phases
from migrator.engine.applying import Apply
from migrator.engine.loop import Applier, Direction, PhaseWork
from migrator.engine.state import State
from migrator.model import gates as g
from migrator.model.gates import GateKind, GateResult, ServiceBaseline
from migrator.model.planning import PhasePlan
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.steps import SetLabels
from tests.helpers.builders import NS, endpoints_for, pods
from tests.helpers.runs import offline_run

COMMON = {"nvidia.com/gpu-operator.dcgm": "true"}
OLD = {"app": "dcgm"}
STEP = SetLabels("dcgm", COMMON, COMMON, {}, {})


def _phase(direction: Direction) -> PhaseWork:
    state = State(NS)
    return PhaseWork(phases.by_number(1), state.phase(1), PhasePlan(number=1, name="label"), (),
                    direction, Snapshot(NS))


@pytest.mark.parametrize("direction", list(Direction))
def test_a_phase_records_its_steps_where_its_direction_keeps_them(direction: Direction) -> None:
    run = _phase(direction)
    run.mark(STEP, "intent")
    run.mark(STEP, "done")
    assert run.rollback is (direction is Direction.ROLLBACK)
    assert [r.status for r in run.records] == ["done"]
    other = run.rec.steps if run.rollback else run.rec.undo
    assert other == []  # forward never touches the undo list, rollback never the steps


def test_the_apply_back_end_is_what_afterwrite_and_inplace_work_through() -> None:
    backend = Apply(offline_run(), State(NS), 1)
    context: Applier = backend  # checked by mypy: afterwrite and inplace need no more
    assert context.result.writes == 0


def _switched(views: list[PodView]) -> tuple[Snapshot, ServiceBaseline]:
    """A Service switched from OLD to COMMON, its baseline taken with every pod Ready."""
    serving = [v for v in views if all(v.labels.get(k) == val for k, val in COMMON.items())]
    snap = Snapshot(NS, pods=tuple(views), endpoints={"svc": endpoints_for("svc", serving)})
    return snap, ServiceBaseline("svc", 3)


def test_the_gates_the_wait_acts_on_carry_their_kind() -> None:
    views = pods("dcgm", 3, labels={**OLD, **COMMON})
    snap, base = _switched(views)
    held = g.endpoints_hold(snap, base)
    assert held.ok and held.kind is GateKind.ENDPOINTS
    dip_views = list(views)
    dip_views[2] = replace(dip_views[2], ready=False)  # a probe flap: not the switch's doing
    dip = g.switch_loss(*_switched(dip_views), OLD, COMMON)
    assert dip.name == "endpoints-dip/svc" and dip.kind is GateKind.ENDPOINTS_DIP
    lost_views = list(views)
    lost_views[0] = replace(lost_views[0], labels=OLD)  # only the old selector selects it
    lost = g.switch_loss(*_switched(lost_views), OLD, COMMON)
    assert lost.name == "endpoints/svc" and lost.kind is GateKind.ENDPOINTS
    lost_node = list(views)
    lost_node[1] = replace(lost_node[1], ready=False, node_lost=True)
    for result in (g.nodes_reporting("dcgm", views), g.nodes_reporting("dcgm", lost_node)):
        assert result.kind is GateKind.NODES_REPORTING
    assert g.rollout_complete({"metadata": {"name": "dcgm"}}).kind is GateKind.CHECK


def test_the_kind_stays_out_of_the_report() -> None:
    result = GateResult("endpoints/svc", False, "1/2 ready", kind=GateKind.ENDPOINTS)
    assert result.as_dict() == {"name": "endpoints/svc", "ok": False, "detail": "1/2 ready"}
