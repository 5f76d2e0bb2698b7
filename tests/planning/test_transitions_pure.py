"""The transition rules on plain-dict snapshots: zero desired pods, stable names of the stack
running now, aliases created after phase 3, rollback of objects that are no longer the tool's,
retired steps, and DaemonSets of a deleted CR (no server)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from migrator import phases
from migrator.model.discovery import discover
from migrator.model.planning import Options, PlanContext
from migrator.model.retiring import GONE, REPLACED, REVERTED, reasked, retired
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import CreateAlias, SetLabels, SetSelector
from tests.helpers import builders as b

CAT = load_catalog()
DCGM = "nvidia.com/gpu-operator.dcgm"


def ctx(snap: Snapshot, **opts: Any) -> PlanContext:
    return PlanContext(snap, CAT, discover(snap, CAT).components, Options(**opts))


def _zero_dcgm(snap: Snapshot) -> Snapshot:
    """No node labelled for DCGM: its DaemonSet desires 0 pods, its Service is empty."""
    ds = dict(snap.daemonsets)
    ds["nvidia-dcgm-dra"] = b.daemonset("nvidia-dcgm-dra", labels={DCGM: "true"},
                                        template_labels={DCGM: "true"}, desired=0)
    pods = tuple(p for p in snap.pods if p.owner_name != "nvidia-dcgm-dra")
    eps = {**snap.endpoints, "nvidia-dcgm-dra": b.endpoints_for("nvidia-dcgm-dra", []),
           "nvidia-dcgm": b.endpoints_for("nvidia-dcgm", [])}
    return replace(snap, daemonsets=ds, pods=pods, endpoints=eps)


def _switched_alias(snap: Snapshot) -> Snapshot:
    alias = b.service("nvidia-dcgm", {DCGM: "true"}, owner=None, local=True,
                      labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    alias["metadata"]["annotations"] = {"dcgm-migrate/alias-of": "nvidia-dcgm-dra"}
    return replace(snap, services={**snap.services, "nvidia-dcgm": alias})


SWITCH = SetSelector("nvidia-dcgm", {"app": "nvidia-dcgm-dra"}, {DCGM: "true"}, True)


def test_zero_desired_pods_pass_selector_holds_and_stable_name() -> None:
    c = ctx(_zero_dcgm(_switched_alias(b.gpucluster_snapshot(labelled=True))))
    held = phases.switch.verify(c, [SWITCH])[0]
    assert held.ok and "0 desired pods" in held.detail
    names = {r.name: r for r in phases.alias.stable_names(c)}
    assert names["stable-name/nvidia-dcgm"].ok


def test_an_empty_alias_while_pods_are_desired_fails() -> None:
    snap = _switched_alias(b.gpucluster_snapshot(labelled=True))
    snap = replace(snap, endpoints={**snap.endpoints,
                                    "nvidia-dcgm": b.endpoints_for("nvidia-dcgm", [])})
    held = phases.switch.verify(ctx(snap), [SWITCH])[0]
    assert not held.ok and "3 pods are desired" in held.detail


def test_stable_names_of_the_current_stack_are_checked_without_any_recorded_step() -> None:
    results = phases.alias.verify(ctx(b.gpucluster_snapshot()), [])
    failed = {r.name: r.detail for r in results if not r.ok}
    assert set(failed) == {"stable-name/nvidia-dcgm", "stable-name/nvidia-dcgm-exporter"}
    assert "does not exist" in failed["stable-name/nvidia-dcgm"]


def test_an_unswitched_tool_alias_fails_phase3_verify() -> None:
    snap = _switched_alias(b.gpucluster_snapshot(labelled=True))
    alias = snap.services["nvidia-dcgm"]
    unswitched = {**alias, "spec": {**alias["spec"], "selector": {"app": "nvidia-dcgm-dra"}}}
    c = ctx(replace(snap, services={**snap.services, "nvidia-dcgm": unswitched}))
    failed = [r for r in phases.switch.verify(c, []) if not r.ok]
    assert [r.name for r in failed] == ["switched/nvidia-dcgm"]


def test_rollback_skips_an_alias_an_operator_took_over() -> None:
    taken = b.service("nvidia-dcgm", {"app": "nvidia-dcgm"}, owner="ClusterPolicy", local=True)
    snap = replace(b.gpucluster_snapshot(labelled=True),
                   services={**b.gpucluster_snapshot().services, "nvidia-dcgm": taken})
    plan = phases.switch.rollback(ctx(snap), [SWITCH])
    assert plan.steps == ()
    assert plan.warnings and "no longer the tool's alias" in plan.warnings[0]


def test_rollback_restores_a_switch_that_is_still_ours() -> None:
    snap = _switched_alias(b.gpucluster_snapshot(labelled=True))
    plan = phases.switch.rollback(ctx(snap), [SWITCH])
    assert plan.steps == (SWITCH.inverse(),) and plan.warnings == ()


def test_steps_on_objects_that_are_gone_or_reverted_are_retired() -> None:
    snap = b.gpucluster_snapshot()
    gone = SetLabels("nvidia-dcgm", {DCGM: "true"}, {DCGM: "true"}, {DCGM: None}, {DCGM: None})
    verdict = retired(ctx(snap), gone)
    assert verdict is not None and verdict[0] == GONE  # retired() is None for a live step only
    svc = b.service("nvidia-dcgm", {"app": "nvidia-dcgm"}, owner="ClusterPolicy", local=True)
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
              "metadata": {"name": "gpu-cluster", "uid": "cr-uid"}}
    snap = replace(snap, services={**snap.services, "nvidia-dcgm": svc},
                   cluster_policies=(policy,))
    op_switch = replace(SWITCH, before={"app": "nvidia-dcgm"}, operator_owned=True)
    verdict = retired(ctx(snap), op_switch)
    assert verdict is not None and verdict[0] == REVERTED
    assert retired(ctx(snap, include_operator_owned=True), op_switch) is None
    assert reasked([op_switch], Options()) == []
    assert not reasked([op_switch], Options(include_operator_owned=True))[0].ok


def test_an_alias_whose_stack_was_removed_and_name_taken_is_replaced_not_recreated() -> None:
    snap = b.gpucluster_snapshot()
    create = CreateAlias("nvidia-dcgm", "nvidia-dcgm-dra", {})
    assert retired(ctx(snap), create) is None  # deleted alias, source still there: re-created
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
              "metadata": {"name": "gpu-cluster", "uid": "cr-uid"}}
    taken = b.service("nvidia-dcgm", {"app": "nvidia-dcgm"}, owner="ClusterPolicy", local=True)
    services = {n: s for n, s in snap.services.items() if n != "nvidia-dcgm-dra"}
    moved = replace(snap, services={**services, "nvidia-dcgm": taken},
                    cluster_policies=(policy,))
    for step in (create, SWITCH):
        verdict = retired(ctx(moved), step)
        assert verdict is not None and verdict[0] == REPLACED, step
        assert "ClusterPolicy/gpu-cluster" in verdict[1]
    # the same takeover while the source still exists (both stacks run) is a hand-over: the
    # ClusterPolicy's operator renders the name, the guard shares it, the record is retired
    kept = replace(snap, services={**snap.services, "nvidia-dcgm": taken},
                   cluster_policies=(policy,))
    verdict = retired(ctx(kept), SWITCH)
    assert verdict is not None and verdict[0] == REPLACED and "handed over" in verdict[1]
    # a takeover by anything but a ClusterPolicy is not (it is drift, reported as such)
    foreign = b.service("nvidia-dcgm", {"app": "x"}, owner=None, local=True)
    assert retired(ctx(replace(snap, services={**snap.services, "nvidia-dcgm": foreign})),
                   SWITCH) is None


def test_daemonsets_of_a_deleted_cr_are_not_a_running_stack() -> None:
    snap = b.gpucluster_snapshot()
    assert discover(snap, CAT).stack == "gpucluster"
    assert discover(replace(snap, gpu_clusters=()), CAT).stack == "none"
    deleting = {**snap.gpu_clusters[0], "metadata": {**snap.gpu_clusters[0]["metadata"],
                                                     "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert discover(replace(snap, gpu_clusters=(deleting,)), CAT).components == ()
    # without the GPU Operator API nothing can be judged: the DaemonSets count
    assert discover(replace(snap, gpu_clusters=(), nvidia_api=False), CAT).stack == "gpucluster"
