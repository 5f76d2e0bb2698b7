"""The operator imitation's CR watches pass what upstream's `GenerationChangedPredicate`
passes (controllers/gpucluster_controller.go and clusterpolicy_controller.go
`SetupWithManager`, NVIDIA/gpu-operator a22dbf671): creates, deletes and spec changes, never
a label or annotation touch; which is why `change-stack` prompts the new CR's controller by
creating the CR, not by touching it."""

from __future__ import annotations

import copy
from typing import Any

from dcgm_sim.controllers import operatorqueue as Q
from dcgm_sim.controllers.rendering import RENDERS_COMMON_LABELS


def gpucluster(generation: int = 1, annotations: dict[str, str] | None = None
               ) -> dict[str, Any]:
    return {"kind": "GPUCluster", "metadata": {"name": "gpu-cluster", "generation": generation,
                                               "annotations": dict(annotations or {})}}


def test_create_and_delete_reconcile_both_controllers() -> None:
    for event in ("ADDED", "DELETED"):
        assert Q.triggered(event, "GPUCluster", None, gpucluster()) == {Q.CLUSTERPOLICY,
                                                                         Q.GPUCLUSTER}


def test_an_annotation_or_label_touch_reconciles_nothing() -> None:
    old = gpucluster()
    touched = gpucluster(annotations={"example.com/nudge": "1"})
    assert Q.triggered("MODIFIED", "GPUCluster", old, touched) == set()
    labelled = copy.deepcopy(old)
    labelled["metadata"]["labels"] = {"x": "y"}
    assert Q.triggered("MODIFIED", "GPUCluster", old, labelled) == set()


def test_a_spec_change_reconciles() -> None:
    assert Q.triggered("MODIFIED", "GPUCluster", gpucluster(1), gpucluster(2)) == {
        Q.CLUSTERPOLICY, Q.GPUCLUSTER}


def test_the_sims_operator_upgrade_annotation_still_reconciles() -> None:
    upgraded = gpucluster(annotations={RENDERS_COMMON_LABELS: "true"})
    assert Q.triggered("MODIFIED", "GPUCluster", gpucluster(), upgraded) == {
        Q.CLUSTERPOLICY, Q.GPUCLUSTER}
