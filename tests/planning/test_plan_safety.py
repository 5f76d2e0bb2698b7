"""Plan safety on plain data: a plan with a failed gate refuses before its first write, phase 3
refuses pods outside the DaemonSets unless allowed (and records that), certain vs possible
duplicate scrape paths, and the warning for a reserved label the CR sets to another value."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from migrator import phases
from migrator.engine import assemble
from migrator.model import gates, scrapechecks
from migrator.model.discovery import discover
from migrator.model.gates import GateResult
from migrator.model.monitoring import scrape_paths
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import SetLabels, SetSelector, from_record, to_record
from tests.helpers import builders as b

CAT = load_catalog()
DCGM = "nvidia.com/gpu-operator.dcgm"
EXPORTER = "nvidia.com/gpu-operator.dcgm-exporter"
EXPORTERS = ["nvidia-dcgm-exporter-dra"]


def ctx(snap: Snapshot, **opts: Any) -> PlanContext:
    return PlanContext(snap, CAT, discover(snap, CAT).components, Options(**opts))


def _switched_ready(allow: bool = False) -> Snapshot:
    """Labelled pods, the tool's aliases in place, and a stray pod carrying the DCGM label."""
    snap = b.gpucluster_snapshot(labelled=True)
    alias = b.service("nvidia-dcgm", {"app": "nvidia-dcgm-dra"}, local=True, owner=None,
                      labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    stray = PodView(name="debug-dcgm", uid="u-stray", node="node-0",
                    labels={DCGM: "true", "run": "debug"}, ready=True, deleting=False,
                    owner_kind="", owner_name="")
    return replace(snap, pods=(*snap.pods, stray),
                   services={**snap.services, "nvidia-dcgm": alias})


# ---- failed plan gates refuse the whole phase --------------------------------------------

def test_refusal_names_every_failed_gate_and_is_none_when_all_pass() -> None:
    ok, bad = GateResult("a/x", True, "fine"), GateResult("b/y", False, "broken")
    assert PhasePlan(number=2, name="alias", gates=(ok,)).refusal is None
    assert PhasePlan(number=2, name="alias", gates=(ok, bad)).refusal == "b/y: broken"
    blocked = PhasePlan(number=2, name="alias", gates=(bad,), blocked="stop")
    assert blocked.refusal == "stop; b/y: broken"
    same = GateResult("c/z", False, "stop")  # the gate that blocked: said once
    assert PhasePlan(number=2, name="alias", gates=(same,), blocked="stop").refusal == "stop"


def test_phase2_duplicate_gate_refuses_both_aliases_not_only_the_exporter() -> None:
    sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
          "metadata": {"name": "by-name", "namespace": b.NS},
          "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "nvidia-dcgm-exporter"}},
                   "endpoints": [{"port": "gpu-metrics"}]}}
    plan = phases.alias.plan(ctx(replace(b.gpucluster_snapshot(), service_monitors=(sm,))))
    assert [s.name for s in plan.steps] == ["nvidia-dcgm", "nvidia-dcgm-exporter"]
    assert plan.refusal and "no-duplicate-scrape" in plan.refusal


# ---- foreign pods ------------------------------------------------------------------------

def test_phase3_refuses_a_selector_that_picks_up_a_stray_pod() -> None:
    plan = phases.switch.plan(ctx(_switched_ready()))
    gate = next(g for g in plan.gates if g.name == "no-foreign-pods/nvidia-dcgm")
    assert not gate.ok and "debug-dcgm" in gate.detail and "--allow-foreign-pods" in gate.detail
    assert plan.refusal and "no-foreign-pods/nvidia-dcgm" in plan.refusal
    assert any("debug-dcgm" in w for w in plan.warnings)
    others = [g for g in plan.gates if g.name.startswith("no-foreign-pods/")
              and g.name != "no-foreign-pods/nvidia-dcgm"]
    assert all(g.ok for g in others)  # the stray carries only the DCGM label


def test_allow_foreign_pods_passes_the_gate_and_is_recorded_on_the_step() -> None:
    plan = phases.switch.plan(ctx(_switched_ready(), allow_foreign_pods=True))
    gate = next(g for g in plan.gates if g.name == "no-foreign-pods/nvidia-dcgm")
    assert gate.ok and "allowed by --allow-foreign-pods" in gate.detail
    assert plan.refusal is None
    step = next(s for s in plan.steps if isinstance(s, SetSelector))
    assert step.allow_foreign
    assert from_record(to_record(step)) == step
    # a record written before the field existed reads as "not allowed"
    old = {k: v for k, v in to_record(step).items() if k != "allow_foreign"}
    restored = from_record(old)
    assert isinstance(restored, SetSelector) and not restored.allow_foreign


def test_verify_after_the_switch_catches_a_stray_unless_it_was_allowed() -> None:
    snap = _switched_ready()
    alias = dict(snap.services["nvidia-dcgm"])
    alias["spec"] = {**alias["spec"], "selector": {DCGM: "true"}}
    snap = replace(snap, services={**snap.services, "nvidia-dcgm": alias})
    step = SetSelector("nvidia-dcgm", {"app": "nvidia-dcgm-dra"}, {DCGM: "true"}, True)
    refused = {g.name: g for g in phases.switch.verify(ctx(snap), [step])}
    assert not refused["no-foreign-pods/nvidia-dcgm"].ok
    allowed = {g.name: g for g in phases.switch.verify(
        ctx(snap), [replace(step, allow_foreign=True)])}
    assert allowed["no-foreign-pods/nvidia-dcgm"].ok
    # and status shows it as a warning of the completed phase
    assert any("selects pods outside the DaemonSets" in w
               for w in phases.switch.plan(ctx(snap)).warnings)


# ---- duplicate scrape paths --------------------------------------------------------------

def _sm(name: str, match: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": name, "namespace": b.NS},
            "spec": {"selector": {"matchLabels": match}, "endpoints": [{"port": "gpu-metrics"}]}}


def test_annotation_plus_servicemonitor_is_possible_not_certain() -> None:
    snap = replace(b.gpucluster_snapshot(),
                   service_monitors=(_sm("dra", {"app": "nvidia-dcgm-exporter-dra"}),))
    assert scrapechecks.certain(scrape_paths(snap, EXPORTERS)) == {}
    assert len(scrapechecks.possible(scrape_paths(snap, EXPORTERS))) == 3
    # the what-if gate stays strict: the tool never creates even a possible duplicate
    assert not scrapechecks.duplicate_gate(snap, EXPORTERS).ok


def test_two_servicemonitors_or_two_annotations_are_certain_on_any_service() -> None:
    two_sms = replace(b.gpucluster_snapshot(), service_monitors=(
        _sm("a", {"app": "nvidia-dcgm-exporter-dra"}),
        _sm("b", {"app": "nvidia-dcgm-exporter-dra"})))
    assert len(scrapechecks.certain(scrape_paths(two_sms, EXPORTERS))) == 3
    other = b.service("team-scrape", {"app": "nvidia-dcgm-exporter-dra"}, owner=None,
                      labels={}, annotations={"prometheus.io/scrape": "true"})
    two_ann = b.gpucluster_snapshot(extra_services=[other])
    dups = scrapechecks.certain(scrape_paths(two_ann, EXPORTERS))
    assert len(dups) == 3 and all(len(p) == 2 for p in dups.values())
    report = assemble.build(two_ann, CAT, None, Options())
    assert report.scrape_duplicates == 3 and report.tool_duplicates == 0
    assert any(w.startswith("duplicate scraping now: 3") for w in report.warnings)


# ---- reserved label set by the CR --------------------------------------------------------

def test_cr_false_for_a_reserved_label_warns_naming_the_cr_field() -> None:
    snap = b.gpucluster_snapshot()
    ds = b.daemonset("nvidia-dcgm-exporter-dra", template_labels={EXPORTER: "false"})
    cr = {**snap.gpu_clusters[0], "spec": {"daemonsets": {"labels": {EXPORTER: "false"}}}}
    snap = replace(snap, gpu_clusters=(cr,),
                   daemonsets={**snap.daemonsets, "nvidia-dcgm-exporter-dra": ds})
    plan = phases.label.plan(ctx(snap))
    step = next(s for s in plan.steps if s.name == "nvidia-dcgm-exporter-dra")
    assert isinstance(step, SetLabels)
    assert step.template_after == {EXPORTER: "true"}  # the reserved label still wins
    cr_warn = [w for w in plan.warnings if w.startswith("GPUCluster/gpu-cluster ")]
    assert len(cr_warn) == 1
    assert f"spec.daemonsets.labels['{EXPORTER}']" in cr_warn[0]
    assert "re-render" in cr_warn[0]
    assert any("DaemonSet/nvidia-dcgm-exporter-dra sets" in w for w in plan.warnings)


def test_cr_true_or_unrelated_labels_do_not_warn() -> None:
    snap = b.gpucluster_snapshot()
    cr = {**snap.gpu_clusters[0],
          "spec": {"daemonsets": {"labels": {EXPORTER: "true", "team": "gpu"}}}}
    plan = phases.label.plan(ctx(replace(snap, gpu_clusters=(cr,))))
    assert not [w for w in plan.warnings if "GPUCluster/" in w]


def test_foreign_pods_that_garbage_collection_removes_are_waited_for_not_refused() -> None:
    """Strays garbage collection is removing (the other stack's pods after its CR was
    deleted): the gate fails with `wait`; one stray that stays refuses, naming only it."""
    leaving = {"nvidia-dcgm-a": "DaemonSet/nvidia-dcgm is gone"}
    waits = gates.foreign_pods("nvidia-dcgm", ["nvidia-dcgm-a"], ["nvidia-dcgm-dra"], False,
                               leaving=leaving)
    assert not waits.ok and waits.wait
    assert "garbage collection is removing (DaemonSet/nvidia-dcgm is gone)" in waits.detail
    mixed = gates.foreign_pods("nvidia-dcgm", ["debug", "nvidia-dcgm-a"], ["nvidia-dcgm-dra"],
                               False, leaving=leaving)
    assert not mixed.ok and not mixed.wait
    assert "would also select 1 pod outside DaemonSets nvidia-dcgm-dra: debug;" in mixed.detail
    allowed = gates.foreign_pods("nvidia-dcgm", ["debug"], ["nvidia-dcgm-dra"], True)
    assert allowed.ok
