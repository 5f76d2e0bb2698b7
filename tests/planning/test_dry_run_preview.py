"""The report back end of the one loop is pure: each phase the loop reaches run against the
cluster as it would be after the earlier phases' writes (model/projection.py), never reported
completed, and refusing only on a gate it can evaluate (engine/projecting.py)."""

from __future__ import annotations

import functools
from dataclasses import replace

from migrator import phases
from migrator.engine import assemble, projecting
from migrator.engine.loop import RunSettings
from migrator.engine.reports import PhasePreview, PhaseView, PlanReport
from migrator.engine.state import PhaseStatus, State
from migrator.model import projection
from migrator.model.discovery import discover
from migrator.model.planning import Options, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import CreateAlias, SetLabels, SetSelector
from tests.helpers import builders as b

CAT = load_catalog()
DCGM, EXPORTER = b.COMMON["dcgm"], b.COMMON["exporter"]


def _preview(snap: Snapshot, state: State | None, options: Options, upto: int,
             *, rollback: bool = False) -> projecting.Preview:
    """The one loop on the report back end (`Project`): what the run would do."""
    report = assemble.build(snap, CAT, state, options, forward=not rollback)
    return projecting.preview(projecting.Project(snap, CAT, RunSettings(options=options)),
                              state, report, upto, rollback=rollback)


def ctx(snap: Snapshot) -> PlanContext:
    return PlanContext(snap, CAT, discover(snap, CAT).components, Options())


def test_labels_project_onto_the_daemonset_its_template_and_its_pods() -> None:
    snap = b.gpucluster_snapshot()
    step = phases.label.plan(ctx(snap)).steps[0]
    assert isinstance(step, SetLabels) and step.daemonset == "nvidia-dcgm-dra"
    after = projection.after(snap, step)
    ds = after.daemonsets["nvidia-dcgm-dra"]
    assert ds["metadata"]["labels"][DCGM] == "true"
    assert ds["spec"]["template"]["metadata"]["labels"][DCGM] == "true"
    assert ds["status"] == snap.daemonsets["nvidia-dcgm-dra"]["status"]  # as if rolled out
    assert all(p.labels.get(DCGM) == "true" for p in after.pods_of("nvidia-dcgm-dra"))
    assert not any(DCGM in p.labels for p in after.pods_of("nvidia-dcgm-exporter-dra"))
    assert DCGM not in snap.daemonsets["nvidia-dcgm-dra"]["metadata"]["labels"]  # pure


def test_an_ondelete_template_change_relabels_no_pod() -> None:
    snap = b.gpucluster_snapshot()
    ds = b.daemonset("nvidia-dcgm-dra", strategy="OnDelete")
    snap = replace(snap, daemonsets={**snap.daemonsets, "nvidia-dcgm-dra": ds})
    step = SetLabels("nvidia-dcgm-dra", {DCGM: "true"}, {DCGM: "true"}, {DCGM: None},
                     {DCGM: None})
    after = projection.after(snap, step)
    assert not any(DCGM in p.labels for p in after.pods_of("nvidia-dcgm-dra"))


def test_an_alias_and_a_switch_project_with_the_endpoints_they_would_get() -> None:
    snap = b.gpucluster_snapshot(labelled=True)
    create = next(s for s in phases.alias.plan(ctx(snap)).steps if isinstance(s, CreateAlias))
    made = projection.after(snap, create)
    assert made.services[create.service]["spec"]["selector"] == {"app": "nvidia-dcgm-dra"}
    assert made.endpoints_of(create.service).ready_pods() == snap.endpoints_of(
        "nvidia-dcgm-dra").ready_pods()
    switch = SetSelector(create.service, {"app": "nvidia-dcgm-dra"}, {DCGM: "true"}, True)
    switched = projection.after(made, switch)
    assert switched.services[create.service]["spec"]["selector"] == {DCGM: "true"}
    assert switched.endpoints_of(create.service).ready_total == 3


def _outcomes(report: PlanReport) -> list[str]:
    return [_outcome_of(p).outcome for p in report.phases]


def _outcome_of(view: PhaseView) -> PhasePreview:
    assert view.preview is not None, view
    return view.preview


def test_a_fresh_cluster_previews_all_three_phases_as_they_would_run() -> None:
    found = _preview(b.gpucluster_snapshot(), None, Options(), 3)
    views = found.report.phases
    assert found.refusal is None
    assert [v.status for v in views] == [PhaseStatus.PENDING] * 3  # a dry run records nothing
    assert _outcomes(found.report) == ["would-run"] * 3
    assert all(g.ok for v in views for g in v.gates), [
        g for v in views for g in v.gates if not g.ok]
    switched = {(c.object, str(c.after)) for c in views[2].changes}
    assert switched == {("Service/nvidia-dcgm", str({DCGM: "true"})),
                        ("Service/nvidia-dcgm-exporter", str({EXPORTER: "true"}))}
    assert any(g.name == "mixed-rollout/nvidia-dcgm-dra" for g in views[2].gates)
    waits = _outcome_of(views[0]).would_wait_for
    assert any(w.startswith("the rollout of DaemonSet/nvidia-dcgm-dra") for w in waits), waits
    assert any("EndpointSlices of Service/nvidia-dcgm " in w
               for w in _outcome_of(views[1]).would_wait_for)
    # the aliases' switches cannot reach the API server: the aliases do not exist yet
    assert [s.type for s in found.writes] == ["set-labels"] * 2 + ["create-alias"] * 2
    assert len(found.unsent) == 2 and all("set-selector" in u for u in found.unsent)


def test_a_gate_that_fails_now_stops_the_preview_there() -> None:
    snap = b.gpucluster_snapshot()
    sick = tuple(replace(p, ready=False, why="NotReady") if p.name == "nvidia-dcgm-dra-1"
                 else p for p in snap.pods)
    ds = b.daemonset("nvidia-dcgm-dra", available=2)
    snap = replace(snap, pods=sick, daemonsets={**snap.daemonsets, "nvidia-dcgm-dra": ds})
    found = _preview(snap, None, Options(), 3)
    assert found.refusal and "rollout-complete/nvidia-dcgm-dra" in found.refusal
    assert "node-1" in found.refusal
    assert _outcomes(found.report) == ["would-stop", "not-reached", "not-reached"]
    assert found.writes == ()


def test_a_phase_past_n_is_shown_without_a_preview() -> None:
    found = _preview(b.gpucluster_snapshot(), None, Options(), 1)
    assert [v.preview is not None for v in found.report.phases] == [True, False, False]
    assert [s.type for s in found.writes] == ["set-labels"] * 2


def test_a_completed_phase_that_holds_is_left_alone() -> None:
    snap = b.gpucluster_snapshot()
    state = State(b.NS)
    step = phases.label.plan(ctx(snap)).steps
    labelled = functools.reduce(projection.after, step, snap)
    rec = state.phase(1)
    for s in step:
        rec.mark(s, "done")
    rec.status = PhaseStatus.COMPLETED
    found = _preview(labelled, state, Options(), 3)
    assert _outcomes(found.report) == ["holds", "would-run", "would-run"]
    assert found.report.phases[0].status is PhaseStatus.COMPLETED
    assert all(g.ok for g in found.report.phases[0].gates)
    assert [s.type for s in found.writes] == ["create-alias"] * 2


def test_ondelete_stops_the_preview_unless_the_tool_may_roll_the_pods() -> None:
    snap = b.gpucluster_snapshot()
    snap = replace(snap, daemonsets={n: b.daemonset(n, strategy="OnDelete")
                                     for n in snap.daemonsets})
    blocked = _preview(snap, None, Options(), 3)
    assert blocked.refusal and "--roll-on-delete" in blocked.refusal
    assert _outcome_of(blocked.report.phases[0]).outcome == "would-stop"
    found = _preview(snap, None, Options(roll_on_delete=True), 3)
    assert found.refusal is None and _outcomes(found.report) == ["would-run"] * 3
    waits = _outcome_of(found.report.phases[0]).would_wait_for
    assert any("old pods deleted one node at a time" in w for w in waits), waits
    assert not any(w.startswith("the rollout of") for w in waits), waits  # OnDelete: none
    assert all(g.ok for g in found.report.phases[2].gates)  # pods relabelled by then
    assert [s.type for s in found.writes] == ["set-labels"] * 2 + ["create-alias"] * 2
