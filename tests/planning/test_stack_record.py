"""What `status` and the refusals read from a stack change's record (`model/stackchange.py`),
on plain data: whether it is unfinished, what a running change waits for at each step, the
commands that go on with it and undo it, and its recorded CR (a resume needs no -f)."""

from __future__ import annotations

from typing import Any

import pytest

from migrator.errors import UsageError
from migrator.model import stackchange as sc

OLD = {"kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"}}
NEW = {"kind": "GPUCluster", "metadata": {"name": "gpu-cluster"}, "spec": {"dcgm": {}}}


def record(*steps: tuple[str, str, str, str], to: str = "gpucluster",
           status: str = "in-progress", old: dict[str, Any] | None = OLD) -> dict[str, Any]:
    new = NEW if to == "gpucluster" else {**OLD, "metadata": {"name": "back"}}
    return {"to": to, "status": status, "oldCr": old, "newCr": new, "steps": {
        f"{a}/{k}/{n}": {"action": a, "kind": k, "name": n, "status": s}
        for a, k, n, s in steps}}


KEPT = [(sc.KEEP, "Service", n, "done") for n in ("nvidia-dcgm", "nvidia-dcgm-exporter")]
DELETED = (sc.DELETE, "ClusterPolicy", "cluster-policy", "done")
GONE = (sc.GONE, "ClusterPolicy", "cluster-policy", "done")
CREATED = (sc.CREATE, "GPUCluster", "gpu-cluster", "done")


@pytest.mark.parametrize(("steps", "to", "expected"), [
    ((), "gpucluster", "the stable Services kept from the garbage collector"),
    (((sc.KEEP, "Service", "nvidia-dcgm", "intent"),), "gpucluster",
     "Service/nvidia-dcgm kept from the garbage collector"),
    ((*KEPT,), "gpucluster", "the delete of ClusterPolicy/cluster-policy"),
    ((*KEPT, (sc.DELETE, "ClusterPolicy", "cluster-policy", "intent")), "gpucluster",
     "the delete of ClusterPolicy/cluster-policy"),
    ((*KEPT, DELETED), "gpucluster",
     "ClusterPolicy/cluster-policy gone: its DaemonSets and pods removed"),
    ((*KEPT, DELETED, GONE), "gpucluster", "the create of GPUCluster/gpu-cluster"),
    ((*KEPT, DELETED, GONE, CREATED), "gpucluster",
     "the stable Services made the aliases of the Services the GPUCluster renders"),
    ((*KEPT, DELETED, GONE, CREATED, (sc.RETARGET, "Service", "nvidia-dcgm", "intent")),
     "gpucluster", "Service/nvidia-dcgm made the alias of the GPUCluster's Service"),
    ((*KEPT, DELETED, GONE, CREATED, (sc.RETARGET, "Service", "nvidia-dcgm", "done")),
     "gpucluster", "every node served again by the stable names (the new stack's pods Ready)"),
    ((*KEPT, DELETED, GONE, (sc.CREATE, "ClusterPolicy", "back", "done")), "clusterpolicy",
     "every node served again by the stable names (the new stack's pods Ready)"),
    ((*KEPT, DELETED, GONE, CREATED, (sc.SERVING, "GPUCluster", "gpu-cluster", "done")),
     "gpucluster", "the new stack's phases (apply --phase 3)"),
])
def test_a_running_change_waits_for_its_newest_step_or_the_next(
        steps: tuple[tuple[str, str, str, str], ...], to: str, expected: str) -> None:
    assert sc.waits_for(record(*steps, to=to)) == expected


def test_a_change_without_an_old_cr_waits_first_for_its_create() -> None:
    assert sc.waits_for(record(old=None)) == "the create of GPUCluster/gpu-cluster"


def test_only_an_in_progress_record_is_unfinished() -> None:
    assert sc.unfinished(record())
    assert not sc.unfinished(record(status="completed"))
    assert not sc.unfinished(record(status="rolled-back"))
    assert not sc.unfinished(None) and not sc.unfinished({})


def test_the_resume_names_the_old_cr_to_delete_only_when_one_was_recorded() -> None:
    assert sc.resume_command(record(), "gpu-ops") == (
        "dcgm-migrate change-stack --to gpucluster --delete-cr cluster-policy -n gpu-ops")
    assert sc.resume_command(record(old=None), "gpu-operator") == (
        "dcgm-migrate change-stack --to gpucluster -n gpu-operator")
    assert sc.undo_command("gpu-ops") == "dcgm-migrate change-stack --rollback -n gpu-ops"


def test_a_resume_without_f_takes_the_recorded_cr_of_that_change_only() -> None:
    assert sc.recorded_cr(record(), "gpucluster") == NEW
    for other in (record(status="completed"), record(to="clusterpolicy"), None):
        with pytest.raises(UsageError) as refused:
            sc.recorded_cr(other, "gpucluster")
        assert refused.value.hint == "pass -f <cr.yaml>"


def test_a_begun_undo_is_unfinished_until_rolled_back_and_resumes_as_an_undo() -> None:
    for status in ("in-progress", "completed"):  # an undo of a stopped or a completed change
        undoing = {**record(status=status), "rollback": "2026-12-08T03:00:00Z"}
        assert sc.unfinished(undoing) and sc.undoing(undoing)
        assert sc.resume_command(undoing, "gpu-operator") == sc.undo_command("gpu-operator")
        assert sc.waits_for(undoing) == "the undo of the change to the gpucluster stack"
    assert not sc.unfinished({**record(status="rolled-back"), "rollback": "2026-12-08T03:00:00Z"})
    assert not sc.undoing(record())
