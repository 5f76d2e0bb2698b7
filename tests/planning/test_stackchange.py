"""The stack change planned on plain data (`model/stackchange.py`) and the verdict's check of
both CRs at once (also there): the order of the steps, every refusal (one sentence,
the fix), and when two CRs are red."""

from __future__ import annotations

from typing import Any

import pytest

from migrator.errors import UsageError
from migrator.model import stackchange as sc
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import load_catalog

CATALOG = load_catalog()


def cr(kind: str, name: str, *, error: tuple[str, str] | None = None, ready: bool = False,
       created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    conditions = []
    if error:
        conditions.append({"type": "Error", "status": "True", "reason": error[0],
                           "message": error[1]})
    if ready:
        conditions.append({"type": "Ready", "status": "True", "reason": "Reconciled"})
    api = "nvidia.com/v1" if kind == "ClusterPolicy" else "nvidia.com/v1alpha1"
    return {"apiVersion": api, "kind": kind,
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7",
                         "creationTimestamp": created},
            "spec": {"x": 1}, "status": {"conditions": conditions}}


def svc(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": [
        {"kind": "ClusterPolicy", "name": "cp", "uid": "uid-cp", "controller": True}]},
        "spec": {"selector": {"app": name}, "clusterIP": "10.96.0.10"}}


def snapshot(cps: tuple[dict[str, Any], ...] = (), gcs: tuple[dict[str, Any], ...] = (),
             services: tuple[str, ...] = ("nvidia-dcgm", "nvidia-dcgm-exporter")) -> Snapshot:
    return Snapshot("gpu-operator", cluster_policies=cps, gpu_clusters=gcs,
                    services={n: svc(n) for n in services})


NEW_GC = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
          "metadata": {"name": "gpu-cluster"}, "spec": {"dcgmExporter": {}}}
REFUSED = ("PrerequisiteNotMet", 'A ClusterPolicy CR "cp" exists; a ClusterPolicy CR and '
           "GPUCluster CR may not exist at the same time")


def test_to_gpucluster_keeps_the_services_before_the_delete_and_creates_after() -> None:
    plan = sc.plan(snapshot((cr("ClusterPolicy", "cp"),)), CATALOG, "gpucluster", NEW_GC, "cp")
    assert [s.id for s in plan.steps] == [
        "keep-service/Service/nvidia-dcgm", "keep-service/Service/nvidia-dcgm-exporter",
        "delete-cr/ClusterPolicy/cp", "await-gone/ClusterPolicy/cp",
        "create-cr/GPUCluster/gpu-cluster", "retarget/Service/nvidia-dcgm",
        "retarget/Service/nvidia-dcgm-exporter", "await-serving/GPUCluster/gpu-cluster",
        "run-phases/GPUCluster/gpu-cluster"]
    assert plan.old_cr is not None
    assert "uid" not in plan.old_cr["metadata"] and "status" not in plan.old_cr


def test_to_clusterpolicy_leaves_the_services_to_its_operator() -> None:
    new = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cp"}}
    plan = sc.plan(snapshot(gcs=(cr("GPUCluster", "gc"),)), CATALOG, "clusterpolicy", new, "gc")
    assert [s.action for s in plan.steps] == [
        "keep-service", "keep-service", "delete-cr", "await-gone", "create-cr",
        "await-serving", "run-phases"]


def test_without_delete_cr_a_second_cr_is_refused_with_the_flag() -> None:
    with pytest.raises(UsageError) as refused:
        sc.plan(snapshot((cr("ClusterPolicy", "cp"),)), CATALOG, "gpucluster", NEW_GC, None)
    assert "would make the GPU Operator stop reconciling every operand" in refused.value.message
    assert refused.value.hint.startswith("pass --delete-cr cp")


def test_delete_cr_must_name_the_cr_that_exists() -> None:
    with pytest.raises(UsageError, match="names no ClusterPolicy"):
        sc.plan(snapshot((cr("ClusterPolicy", "cp"),)), CATALOG, "gpucluster", NEW_GC, "other")


def test_a_manifest_of_the_wrong_kind_is_refused() -> None:
    wrong = {**NEW_GC, "kind": "ClusterPolicy"}
    with pytest.raises(UsageError, match=r"not the nvidia\.com/v1alpha1 GPUCluster"):
        sc.plan(snapshot((cr("ClusterPolicy", "cp"),)), CATALOG, "gpucluster", wrong, "cp")


def test_both_crs_refused_already_is_refused_with_the_delete_of_the_new_one() -> None:
    snap = snapshot((cr("ClusterPolicy", "cp"),), (cr("GPUCluster", "gpu-cluster",
                                                      error=REFUSED),))
    with pytest.raises(UsageError) as refused:
        sc.plan(snap, CATALOG, "gpucluster", NEW_GC, "cp")
    assert sc.STALLED in refused.value.message
    assert "kubectl delete gpuclusters gpu-cluster" in refused.value.hint


def test_resumed_after_the_delete_plans_only_what_is_left() -> None:
    plan = sc.plan(snapshot(gcs=(cr("GPUCluster", "gpu-cluster"),)), CATALOG, "gpucluster",
                   NEW_GC, "cp")
    assert [s.action for s in plan.steps] == [
        "create-cr", "retarget", "retarget", "await-serving", "run-phases"]


def test_a_completed_change_planned_again_never_moves_an_alias_back() -> None:
    """Once the kept Service is the tool's alias of the `-dra` Service, phase 3 owns its
    selector: running the same change-stack again plans no retarget."""
    snap = snapshot(gcs=(cr("GPUCluster", "gpu-cluster"),))
    for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        alias = snap.services[name]
        alias["metadata"].update(
            labels={"app.kubernetes.io/managed-by": "dcgm-migrate"},
            annotations={"dcgm-migrate/alias-of": f"{name}-dra"},
            ownerReferences=[{"kind": "GPUCluster", "name": "gpu-cluster", "controller": False}])
        alias["spec"]["selector"] = {"nvidia.com/gpu-operator.x": "true"}
    plan = sc.plan(snap, CATALOG, "gpucluster", NEW_GC, "cp")
    assert [s.action for s in plan.steps] == ["create-cr", "await-serving", "run-phases"]


def test_the_verdict_is_red_only_when_the_operator_refuses_the_pair() -> None:
    cp = cr("ClusterPolicy", "cp", error=("ReconcileFailed", 'conflicting GPUCluster resource '
                                          '"gpu-cluster" detected; ClusterPolicy and GPUCluster '
                                          "cannot co-exist"))
    gc = cr("GPUCluster", "gpu-cluster", error=REFUSED, created="2026-02-01T00:00:00Z")
    [red] = sc.findings(snapshot((cp,), (gc,)))
    assert not red.ok and red.subject == "GPUCluster/gpu-cluster"
    assert red.detail.startswith(sc.STALLED)
    assert "ClusterPolicy/cp" in red.detail and "GPUCluster/gpu-cluster" in red.detail
    assert "kubectl delete gpuclusters gpu-cluster" in red.fix
    assert "--delete-cr cp" in red.fix
    # a release that reconciles both (each Ready, none refused): not this check's business
    both_ready = snapshot((cr("ClusterPolicy", "cp", ready=True),),
                          (cr("GPUCluster", "gpu-cluster", ready=True),))
    assert sc.findings(both_ready) == []
    assert sc.findings(snapshot((cp,))) == []


def test_selector_patch_leaves_exactly_the_wanted_selector() -> None:
    assert sc.selector_patch({"a": "1", "b": "2"}, {"b": "3"}) == {"a": None, "b": "3"}
