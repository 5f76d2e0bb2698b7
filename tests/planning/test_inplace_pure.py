"""Phase 1's in-place path, its pure parts: which path a DaemonSet takes and why
(model/halfrolls.py), the proof from two ControllerRevisions that only labels differ, and the
JSON patch of one pod (engine/inplace.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from migrator import phases
from migrator.engine.inplace import only_labels_differ, pod_patch
from migrator.model.discovery import discover
from migrator.model.halfrolls import cost, rolling_because
from migrator.model.objects import HELD_STRATEGY
from migrator.model.planning import Options, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import HoldStrategy, RelabelPods, RestoreStrategy, SetLabels
from tests.helpers import builders as b

CAT = load_catalog()
HASH = "controller-revision-hash"
DCGM = "nvidia-dcgm-dra"


def _snap(*, hashes: tuple[str, ...] = ("h1", "h1", "h1"), **ds_args: Any) -> Snapshot:
    """The GPUCluster stack, every pod carrying a revision hash (`hashes`, one per pod of
    the DCGM DaemonSet)."""
    snap = b.gpucluster_snapshot()
    pods = tuple(replace(p, labels={**p.labels, HASH: hashes[int(p.name[-1])]})
                 if p.owner_name == DCGM else replace(p, labels={**p.labels, HASH: "e1"})
                 for p in snap.pods)
    daemonsets = {**snap.daemonsets, DCGM: b.daemonset(DCGM, **ds_args)}
    return replace(snap, pods=pods, daemonsets=daemonsets)


def _ctx(snap: Snapshot, **options: Any) -> PlanContext:
    return PlanContext(snap, CAT, discover(snap, CAT).components, Options(**options))


def test_every_pod_on_the_current_revision_goes_in_place() -> None:
    snap = _snap()
    assert rolling_because(_ctx(snap), snap.daemonsets[DCGM]) is None
    plan = phases.label.plan(_ctx(snap))
    mine = [s for s in plan.steps if s.name == DCGM]
    assert [type(s) for s in mine] == [HoldStrategy, SetLabels, RelabelPods, RestoreStrategy]
    assert isinstance(mine[1], SetLabels) and mine[1].in_place and not mine[1].rolls_pods()
    assert mine[1].labels_pods()  # the state's wroteLabels: the drift risk all the same
    assert any(n.startswith(f"DaemonSet/{DCGM}: in place: 0 of 3 pods restarted")
               for n in plan.notes), plan.notes


def test_the_rolling_path_and_why() -> None:
    ds = _snap().daemonsets[DCGM]
    assert rolling_because(_ctx(_snap(), rolling=True), ds) == "--rolling"
    older = _snap(hashes=("h1", "h0", "h1"))
    assert "older revision" in str(rolling_because(_ctx(older), older.daemonsets[DCGM]))
    rolling_out = _snap(updated=2)
    assert "older revision" in str(rolling_because(_ctx(rolling_out),
                                                   rolling_out.daemonsets[DCGM]))
    ondelete = _snap(strategy="OnDelete")
    assert rolling_because(_ctx(ondelete), ondelete.daemonsets[DCGM]) == "updateStrategy OnDelete"
    plan = phases.label.plan(_ctx(older))
    assert [type(s) for s in plan.steps if s.name == DCGM] == [SetLabels]


def test_a_pod_not_ready_on_the_current_revision_keeps_the_in_place_path() -> None:
    """Every pod on the current revision but one not available (a node's pod starting, or
    failing its probe): `plan` still says in place, restarting nothing, and the health gate,
    not the path, names the pod's node."""
    snap = _snap(available=2)
    node = next(p.node for p in snap.pods if p.owner_name == DCGM)
    pods = tuple(replace(p, ready=False, why="Running, not Ready")
                 if p.owner_name == DCGM and p.node == node else p for p in snap.pods)
    snap = replace(snap, pods=pods)
    assert rolling_because(_ctx(snap), snap.daemonsets[DCGM]) is None
    plan = phases.label.plan(_ctx(snap))
    assert any(n.startswith(f"DaemonSet/{DCGM}: in place: 0 of 3 pods restarted")
               for n in plan.notes), plan.notes
    gate = next(r for r in plan.gates if r.name == f"rollout-complete/{DCGM}")
    assert not gate.ok and f"pods not ready on nodes {node} (Running, not Ready)" in gate.detail


def test_a_node_without_its_pod_yet_or_a_pod_on_a_deleted_node_keeps_the_in_place_path(
        ) -> None:
    """A node that should run a pod and has none yet (its pod not created, or not schedulable):
    the pods there are all counted updated, so `plan` says in place; the health gate names
    the shortfall. Nor does a pod on a deleted node turn the path."""
    snap = _snap(updated=2, available=2)
    gone = next(p.name for p in snap.pods if p.owner_name == DCGM)
    snap = replace(snap, pods=tuple(p for p in snap.pods if p.name != gone))
    assert rolling_because(_ctx(snap), snap.daemonsets[DCGM]) is None
    plan = phases.label.plan(_ctx(snap))
    gate = next(r for r in plan.gates if r.name == f"rollout-complete/{DCGM}")
    assert not gate.ok and "updated 2/3" in gate.detail, gate
    # A pod left on a deleted node: the controller counts it nowhere (2 desired, 2 updated,
    # 3 pods until the pod GC removes it), and it runs the current revision all the same.
    ghost = _snap(desired=2, updated=2, available=2)
    assert len([p for p in ghost.pods if p.owner_name == DCGM]) == 3
    assert rolling_because(_ctx(ghost), ghost.daemonsets[DCGM]) is None


def test_a_daemonset_the_tool_holds_finishes_in_place_even_with_rolling() -> None:
    """A run killed while it held the DaemonSet resumes in place (never rolls from OnDelete
    with --rolling): the hold's record is the live annotation."""
    snap = _snap(strategy="OnDelete")
    ds = snap.daemonsets[DCGM]
    ds["metadata"]["annotations"] = {HELD_STRATEGY: json.dumps({"type": "RollingUpdate"})}
    assert rolling_because(_ctx(snap, rolling=True), ds) is None
    steps = [s for s in phases.label.plan(_ctx(snap)).steps if s.name == DCGM]
    assert isinstance(steps[-1], RestoreStrategy)
    assert steps[-1].strategy == {"type": "RollingUpdate"}


def test_the_costs_a_plan_prints() -> None:
    ds = b.daemonset(DCGM)
    ds["spec"]["template"]["spec"]["containers"][0]["readinessProbe"] = {
        "initialDelaySeconds": 45, "periodSeconds": 5}
    assert cost(ds, 1000, None).startswith("in place: 0 of 1000 pods restarted, 1000 pod "
                                           "patches")
    # 1000 waves of 45 s + 5 s at maxUnavailable 1 (the API's default)
    assert cost(ds, 1000, "--rolling").startswith("rolling (--rolling): 1000 pods restarted, "
                                                  "about 833 min")


def _revision(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", **spec}]},
                "$patch": "replace"}
    return {"data": {"spec": {"template": template}}}


def test_only_labels_differ_is_the_proof() -> None:
    old = _revision({"app": "x"}, image="dcgm:1")
    assert only_labels_differ(old, _revision({"app": "x", "common": "true"}, image="dcgm:1"))
    assert not only_labels_differ(old, _revision({"app": "x", "common": "true"},
                                                 image="dcgm:2"))
    annotated = _revision({"app": "x"}, image="dcgm:1")
    annotated["data"]["spec"]["template"]["metadata"]["annotations"] = {"a": "b"}
    assert not only_labels_differ(old, annotated)
    # a revision of a controller manager before v1.34 keeps a null the later one omits: the
    # same template decoded, so the proof holds across the upgrade; a real value does not
    before_v1_34 = _revision({"app": "x"}, image="dcgm:1")
    before_v1_34["data"]["spec"]["template"]["metadata"]["creationTimestamp"] = None
    assert only_labels_differ(before_v1_34, _revision({"app": "x", "common": "true"},
                                                      image="dcgm:1"))
    before_v1_34["data"]["spec"]["template"]["metadata"]["creationTimestamp"] = "2026-01-01"
    assert not only_labels_differ(before_v1_34, _revision({"app": "x"}, image="dcgm:1"))


def test_a_pod_patch_tests_uid_and_old_hash_then_moves_the_labels() -> None:
    pod = replace(b.pods(DCGM, 1)[0], labels={"app": DCGM, "gone": "1", HASH: "old",
                                               "pod-template-generation": "3"})
    ops = pod_patch(pod, {"app": DCGM, "gone": "1"}, {"app": DCGM, "a/b": "true"}, "new", "4")
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": pod.uid},
        {"op": "test", "path": "/metadata/labels/controller-revision-hash", "value": "old"},
        {"op": "add", "path": "/metadata/labels/a~1b", "value": "true"},
        {"op": "remove", "path": "/metadata/labels/gone"},
        {"op": "replace", "path": "/metadata/labels/controller-revision-hash", "value": "new"},
        {"op": "replace", "path": "/metadata/labels/pod-template-generation", "value": "4"}]
