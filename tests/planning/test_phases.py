"""Planning is pure: plain-dict snapshots in, steps and gate results out (no server)."""

from __future__ import annotations

from dataclasses import replace
from typing import TypedDict, Unpack

from migrator import phases
from migrator.engine import assemble
from migrator.model.discovery import discover
from migrator.model.labelmarks import LABELS_MARK
from migrator.model.planning import Options, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import (
    CreateAlias,
    SetLabels,
    SetSelector,
    from_record,
    to_record,
)
from tests.helpers import builders as b

CAT = load_catalog()


class _Options(TypedDict, total=False):
    """The planning Options these tests set."""

    include_operator_owned: bool
    roll_on_delete: bool
    allow_foreign_pods: bool
    prepare_for: str


def ctx(snap: Snapshot, **opts: Unpack[_Options]) -> PlanContext:
    return PlanContext(snap, CAT, discover(snap, CAT).components, Options(**opts))


def test_discovery_recognises_gpucluster_and_its_components() -> None:
    found = discover(b.gpucluster_snapshot(), CAT)
    assert found.stack == "gpucluster"
    assert {c.daemonset for c in found.components} == {"nvidia-dcgm-dra",
                                                       "nvidia-dcgm-exporter-dra"}


def test_phase1_labels_metadata_and_template_of_each_daemonset() -> None:
    plan = phases.label.plan(ctx(b.gpucluster_snapshot()))
    assert [type(s) for s in plan.steps] == [SetLabels, SetLabels]
    step = plan.steps[0]
    assert isinstance(step, SetLabels)
    assert step.patch() == {
        "metadata": {"labels": {"nvidia.com/gpu-operator.dcgm": "true"},
                     "annotations": {LABELS_MARK: '{"metadata":{"nvidia.com/gpu-operator.dcgm"'
                                                  ':null},"template":{"nvidia.com/gpu-operator'
                                                  '.dcgm":null}}'}},
        "spec": {"template": {"metadata": {"labels": {"nvidia.com/gpu-operator.dcgm": "true"}}}},
    }
    fields = sorted(c.field for s in plan.steps for c in s.changes())
    assert fields == sorted([
        "metadata.labels[nvidia.com/gpu-operator.dcgm]",
        "spec.template.metadata.labels[nvidia.com/gpu-operator.dcgm]",
        "metadata.labels[nvidia.com/gpu-operator.dcgm-exporter]",
        "spec.template.metadata.labels[nvidia.com/gpu-operator.dcgm-exporter]"])
    assert all(g.ok for g in plan.gates)


def test_phase1_reserved_label_wins_and_rollback_restores_user_value() -> None:
    snap = b.gpucluster_snapshot()
    ds = b.daemonset("nvidia-dcgm-dra", labels={"nvidia.com/gpu-operator.dcgm": "false"},
                     template_labels={"nvidia.com/gpu-operator.dcgm": "false"})
    snap = replace(snap, daemonsets={**snap.daemonsets, "nvidia-dcgm-dra": ds})
    plan = phases.label.plan(ctx(snap))
    step = next(s for s in plan.steps if isinstance(s, SetLabels)
                and s.daemonset == "nvidia-dcgm-dra")
    assert step.meta_after == {"nvidia.com/gpu-operator.dcgm": "true"}
    assert step.inverse().meta_after == {"nvidia.com/gpu-operator.dcgm": "false"}
    assert any("reserved label wins" in w for w in plan.warnings)


def test_phase1_ondelete_blocks_without_roll_on_delete() -> None:
    snap = b.gpucluster_snapshot()
    ds = b.daemonset("nvidia-dcgm-dra", strategy="OnDelete")
    snap = replace(snap, daemonsets={**snap.daemonsets, "nvidia-dcgm-dra": ds})
    assert "OnDelete" in (phases.label.plan(ctx(snap)).blocked or "")
    plan = phases.label.plan(ctx(snap, roll_on_delete=True))
    assert plan.blocked is None
    assert any(s.type == "roll-pods" for s in plan.steps)


def test_phase1_unhealthy_daemonset_fails_the_pre_gate() -> None:
    snap = b.gpucluster_snapshot()
    ds = b.daemonset("nvidia-dcgm-dra", available=2)
    snap = replace(snap, daemonsets={**snap.daemonsets, "nvidia-dcgm-dra": ds})
    plan = phases.label.plan(ctx(snap))
    bad = [g for g in plan.gates if not g.ok]
    assert [g.name for g in bad] == ["rollout-complete/nvidia-dcgm-dra"]


def test_phase2_aliases_copy_supported_fields_and_never_assigned_ones() -> None:
    plan = phases.alias.plan(ctx(b.gpucluster_snapshot()))
    creates = {s.service: s for s in plan.steps if isinstance(s, CreateAlias)}
    assert set(creates) == {"nvidia-dcgm", "nvidia-dcgm-exporter"}
    dcgm = creates["nvidia-dcgm"].body
    assert dcgm["spec"]["selector"] == {"app": "nvidia-dcgm-dra"}
    assert dcgm["spec"]["internalTrafficPolicy"] == "Local"
    assert "clusterIP" not in dcgm["spec"] and "clusterIPs" not in dcgm["spec"]
    assert dcgm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dcgm-migrate"
    assert dcgm["metadata"]["annotations"]["dcgm-migrate/alias-of"] == "nvidia-dcgm-dra"
    ref = dcgm["metadata"]["ownerReferences"][0]
    assert ref["kind"] == "GPUCluster" and ref["controller"] is False
    exporter = creates["nvidia-dcgm-exporter"].body
    assert "prometheus.io/scrape" not in exporter["metadata"]["annotations"]
    assert all(g.ok for g in plan.gates), plan.gates


CLUSTER_POLICY = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                  "metadata": {"name": "gpu-cluster", "uid": "cr-uid", "generation": 1}}


def test_phase2_refuses_a_name_it_does_not_own() -> None:
    foreign = b.service("nvidia-dcgm", {"app": "someone-else"}, owner=None, local=True)
    plan = phases.alias.plan(ctx(b.gpucluster_snapshot(extra_services=[foreign])))
    assert plan.blocked and "not the tool's" in plan.blocked
    assert [s.service for s in plan.steps if isinstance(s, CreateAlias)] == [
        "nvidia-dcgm-exporter"]


def test_phase2_shares_a_name_a_clusterpolicy_renders_and_writes_nothing_for_it() -> None:
    legacy = b.service("nvidia-dcgm", {"app": "nvidia-dcgm"}, owner="ClusterPolicy", local=True)
    snap = replace(b.gpucluster_snapshot(extra_services=[legacy]),
                   cluster_policies=(CLUSTER_POLICY,))
    plan = phases.alias.plan(ctx(snap))
    assert plan.blocked is None
    gate = next(g for g in plan.gates if g.name == "alias-name-free/nvidia-dcgm")
    assert gate.ok and gate.detail.startswith("shared: Service/nvidia-dcgm belongs to "
                                              "ClusterPolicy/gpu-cluster")
    assert [s.service for s in plan.steps if isinstance(s, CreateAlias)] == [
        "nvidia-dcgm-exporter"]


def test_phase2_waits_for_a_name_whose_clusterpolicy_was_deleted() -> None:
    """The stack change: the ClusterPolicy is gone, garbage collection is about to remove its
    nvidia-dcgm; the plan is not blocked and the pre-write gate asks the runner to wait."""
    legacy = b.service("nvidia-dcgm", {"app": "nvidia-dcgm"}, owner="ClusterPolicy", local=True)
    c = ctx(b.gpucluster_snapshot(extra_services=[legacy]))
    plan = phases.alias.plan(c)
    assert plan.blocked is None
    step = next(s for s in plan.steps if s.name == "nvidia-dcgm")
    gate = phases.alias.before_write(c, step)[0]
    assert (gate.ok, gate.wait) == (False, True) and "garbage collection" in gate.detail


def test_phase2_refuses_a_duplicate_scrape_path() -> None:
    snap = b.gpucluster_snapshot()
    sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
          "metadata": {"name": "all", "namespace": b.NS},
          "spec": {"selector": {"matchExpressions": [
              {"key": "app.kubernetes.io/name", "operator": "Exists"}]},
              "endpoints": [{"port": "gpu-metrics"}]}}
    snap = replace(snap, service_monitors=(sm,))
    plan = phases.alias.plan(ctx(snap))
    dup = [g for g in plan.gates if g.name == "no-duplicate-scrape"]
    assert dup and not dup[0].ok


def test_phase3_refuses_mixed_rollout_naming_pods() -> None:
    snap = b.gpucluster_snapshot(labelled=True)
    half = [p if i % 2 else replace(p, labels={"app": p.labels["app"]})
            for i, p in enumerate(snap.pods)]
    alias = b.service("nvidia-dcgm", {"app": "nvidia-dcgm-dra"}, local=True, owner=None,
                      labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    snap = replace(snap, pods=tuple(half), services={**snap.services, "nvidia-dcgm": alias})
    plan = phases.switch.plan(ctx(snap))
    mixed = [g for g in plan.gates if g.name.startswith("mixed-rollout/") and not g.ok]
    assert mixed and "nvidia-dcgm-dra-0" in mixed[0].detail


def test_phase3_switches_owned_aliases_and_skips_operator_services() -> None:
    snap = b.gpucluster_snapshot(labelled=True)
    alias = b.service("nvidia-dcgm", {"app": "nvidia-dcgm-dra"}, local=True, owner=None,
                      labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    snap = replace(snap, services={**snap.services, "nvidia-dcgm": alias},
                   endpoints={**snap.endpoints, "nvidia-dcgm": b.endpoints_for(
                       "nvidia-dcgm", snap.pods_of("nvidia-dcgm-dra"))})
    plan = phases.switch.plan(ctx(snap))
    assert [s.name for s in plan.steps] == ["nvidia-dcgm"]
    step = plan.steps[0]
    assert isinstance(step, SetSelector) and step.after == {"nvidia.com/gpu-operator.dcgm": "true"}
    assert all(g.ok for g in plan.gates), plan.gates
    assert any("nvidia-dcgm-dra" in w and "operator" in w for w in plan.warnings)
    with_flag = phases.switch.plan(ctx(snap, include_operator_owned=True))
    assert {s.name for s in with_flag.steps} == {"nvidia-dcgm", "nvidia-dcgm-dra",
                                                     "nvidia-dcgm-exporter-dra"}


def test_steps_round_trip_through_state_records() -> None:
    for step in phases.label.plan(ctx(b.gpucluster_snapshot())).steps:
        assert from_record(to_record(step)) == step


def test_report_shows_projected_phase3_changes_and_drift_risk() -> None:
    doc = assemble.build(b.gpucluster_snapshot(), CAT, None, Options())
    assert doc.stack == "gpucluster"
    assert [p.number for p in doc.phases] == [1, 2, 3]
    p3 = doc.phases[2]
    assert {c.object for c in p3.changes} == {"Service/nvidia-dcgm",
                                              "Service/nvidia-dcgm-exporter"}
    assert any(w.startswith("Drift risk") for w in doc.warnings)
