"""Steps answer the runner's questions themselves (model/steps.py): which object they target,
whether they move pods, which rollout they start, which selector they change, how they are
written; and `inverse()`/`satisfied()` are honest for every step type."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from migrator.engine import executor
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model.labelmarks import LABELS_MARK
from migrator.model.stacks import Catalog
from migrator.model.steps import (
    CreateAlias,
    DeleteAlias,
    RollPods,
    SetLabels,
    SetSelector,
    Step,
    from_record,
    to_record,
)
from migrator.phases import PHASES, Phase
from tests.helpers import builders as b

KEY = "nvidia.com/gpu-operator.dcgm"
LABELS = SetLabels("nvidia-dcgm", {KEY: "true"}, {KEY: "true"}, {KEY: None}, {KEY: None})
META_ONLY = SetLabels("nvidia-dcgm", {KEY: "true"}, {}, {KEY: None}, {})
ROLL = RollPods("nvidia-dcgm", (KEY,))
ALIAS = CreateAlias("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra",
                    {"metadata": {"name": "nvidia-dcgm-exporter"}})
UNALIAS = DeleteAlias("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra")
SWITCH = SetSelector("nvidia-dcgm-exporter", {"app": "a"}, {KEY: "true"}, local=False)
ALL: tuple[Step, ...] = (LABELS, ROLL, ALIAS, UNALIAS, SWITCH)


def test_each_step_names_the_object_it_targets() -> None:
    assert [(s.kind, s.name) for s in ALL] == [
        (kinds.DAEMONSET, "nvidia-dcgm"), (kinds.DAEMONSET, "nvidia-dcgm"),
        (kinds.SERVICE, "nvidia-dcgm-exporter"), (kinds.SERVICE, "nvidia-dcgm-exporter"),
        (kinds.SERVICE, "nvidia-dcgm-exporter")]
    assert all(s.object == f"{s.kind.kind}/{s.name}" for s in ALL)


def test_what_the_runner_asks_of_each_step() -> None:
    assert [s.rolls_pods() for s in (*ALL, META_ONLY)] == [True, True, False, False, False,
                                                            False]
    assert [s.rollout_of() for s in ALL] == ["nvidia-dcgm", None, None, None, None]
    assert [s.pod_by_pod for s in ALL] == [False, True, False, False, False]
    assert SWITCH.selector_change("nvidia-dcgm-exporter") == ({"app": "a"}, {KEY: "true"})
    assert SWITCH.selector_change("another") is None
    assert all(s.selector_change("nvidia-dcgm-exporter") is None for s in ALL[:4])
    assert LABELS.pod_labels() == {KEY: "true"} and SWITCH.pod_labels() == {}
    assert "coexistence" in ALIAS.stop_hint(rollback=False)
    assert SWITCH.stop_hint(rollback=False) != SWITCH.stop_hint(rollback=True)


def _inverse(step: Step) -> Step | None:
    """A step's inverse as the runner asks for it: a step, or None where there is no undo."""
    return step.inverse()


def test_inverse_is_the_real_undo_or_none() -> None:
    assert LABELS.inverse() == SetLabels("nvidia-dcgm", {KEY: None}, {KEY: None},
                                         {KEY: "true"}, {KEY: "true"}, undo=True)
    assert LABELS.inverse().inverse() == LABELS
    # the forward write marks the DaemonSet with the originals, the undo removes the mark
    assert LABELS.patch()["metadata"]["annotations"] == {
        LABELS_MARK: json.dumps({"metadata": {KEY: None}, "template": {KEY: None}},
                                sort_keys=True, separators=(",", ":"))}
    assert LABELS.inverse().patch()["metadata"]["annotations"] == {LABELS_MARK: None}
    assert SWITCH.inverse().inverse() == SWITCH
    assert ALIAS.inverse() == UNALIAS
    assert _inverse(ROLL) is None  # a deleted pod cannot be undeleted
    assert _inverse(UNALIAS) is None  # the body was not recorded with the deletion


def _ds(**kw: Any) -> dict[str, Any]:
    return b.daemonset("nvidia-dcgm", strategy="OnDelete", **kw)


def test_roll_pods_is_satisfied_when_every_pod_runs_the_current_template() -> None:
    assert ROLL.satisfied(_ds(desired=3, updated=3))
    assert not ROLL.satisfied(_ds(desired=3, updated=2))
    stale = _ds(desired=3, updated=3, generation=2)
    stale["status"]["observedGeneration"] = 1  # the controller has not seen the new template
    assert not ROLL.satisfied(stale)
    assert ROLL.satisfied(None)  # nothing left to roll


@pytest.mark.parametrize("step", ALL, ids=lambda s: s.type)
def test_records_round_trip(step: Step) -> None:
    assert from_record(to_record(step)) == step


def test_a_pod_by_pod_step_has_no_single_write() -> None:
    with pytest.raises(TypeError, match="pod_by_pod"):
        # no client or catalog: refused before either is used
        executor.execute(ROLL, cast(Kube, None), "ns", cast(Catalog, None))


def test_the_phases_have_the_phase_surface_in_order() -> None:
    surface = ("plan", "before_write", "after_write", "verify", "rollback")
    phases: tuple[Phase, ...] = PHASES
    assert [(p.NUMBER, p.NAME) for p in phases] == [(1, "label"), (2, "alias"), (3, "switch")]
    assert all(callable(getattr(p, f)) for p in phases for f in surface)
