"""Printed pods (model/printed.py): when a Table row may stand for a pod's Ready condition, and
the PodView it gives; plain dicts shaped as the server's rows with includeObject=Metadata."""

from __future__ import annotations

from typing import Any

import pytest

from migrator.model import printed
from migrator.model.snapshot import EndpointView, PodView
from migrator.model.tables import Row

OWNER = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nvidia-dcgm",
         "uid": "ds-uid", "controller": True}


def _pod(ready: str = "1/1", status: str = "Running", node: str = "gpu-node-0001",
         gates: str = "<none>", rv: str = "40", **meta: Any) -> dict[str, Any]:
    metadata = {"name": "nvidia-dcgm-abcde", "namespace": "gpu-operator", "uid": "pod-uid",
                "resourceVersion": rv, "labels": {"app": "nvidia-dcgm"},
                "ownerReferences": [OWNER], **meta}
    row = Row({"Name": metadata["name"], "Ready": ready, "Status": status, "Restarts": "0",
               "Age": "5m", "IP": "10.0.0.7", "Node": node, "Nominated Node": "<none>",
               "Readiness Gates": gates}, rv,
              {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
               "metadata": metadata})
    return printed.printed_object(row)


def test_a_plainly_healthy_row_gives_the_view_a_whole_ready_pod_gives() -> None:
    view = PodView.of(_pod())
    assert (view.name, view.uid, view.node, dict(view.labels)) == (
        "nvidia-dcgm-abcde", "pod-uid", "gpu-node-0001", {"app": "nvidia-dcgm"})
    assert (view.owner_kind, view.owner_name) == ("DaemonSet", "nvidia-dcgm")
    assert view.ready and not view.deleting and not view.node_lost and view.why == ""
    assert view.printed and view.version == 40 and not view.doubtful


@pytest.mark.parametrize(("pod", "why"), [
    (_pod(ready="0/1"), "Running"),  # a container not (yet) ready
    (_pod(ready="1/2"), "Running"),
    (_pod(ready="0/0"), "Running"),  # no container counted: nothing to vouch for
    (_pod(ready="garbage"), "Running"),
    (_pod(status="ContainerCreating", ready="0/1"), "ContainerCreating"),
    (_pod(status="Pending", ready="0/1", node="<none>"), "Pending"),
    (_pod(node="<none>"), "Running"),  # not on a node
    (_pod(gates="1/2"), "Running"),  # a readiness gate not True
    (_pod(gates="x"), "Running"),
    (_pod(status="Terminating", deletionTimestamp="2026-12-01T00:00:00Z"), "Terminating"),
    (_pod(deletionTimestamp="2026-12-01T00:00:00Z"), "Running"),
    (_pod(status="CrashLoopBackOff", ready="0/1"), "CrashLoopBackOff"),
])
def test_any_other_row_is_doubtful_and_not_ready(pod: dict[str, Any], why: str) -> None:
    view = PodView.of(pod)
    assert not view.ready and view.doubtful
    assert view.why == why


def test_every_readiness_gate_true_is_healthy() -> None:
    assert PodView.of(_pod(gates="2/2")).ready


def test_a_whole_pod_is_never_printed_nor_doubtful() -> None:
    whole = {"metadata": {"name": "p", "uid": "u", "resourceVersion": "9"},
             "spec": {"nodeName": "n"},
             "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    view = PodView.of(whole)
    assert not view.printed and not view.doubtful and not view.ready and view.version == 9


def _ep(serving: bool, version: int, pod: str = "nvidia-dcgm-abcde") -> EndpointView:
    return EndpointView(pod=pod, node="gpu-node-0001", ready=serving, serving=serving,
                        version=version)


def test_a_newer_slice_that_says_not_serving_contradicts_a_healthy_row() -> None:
    view = PodView.of(_pod(rv="40"))
    assert view.contradicted([_ep(serving=False, version=41)])  # MarkPodsNotReady, then slice


@pytest.mark.parametrize("endpoints", [
    [],  # no Service selects it
    [_ep(serving=False, version=39)],  # the slice predates the pod's last change: may lag
    [_ep(serving=False, version=40)],
    [_ep(serving=True, version=41)],
    [_ep(serving=False, version=41, pod="another-pod")],
])
def test_an_older_slice_or_a_serving_one_does_not(endpoints: list[EndpointView]) -> None:
    assert not PodView.of(_pod(rv="40")).contradicted(endpoints)


def test_only_a_printed_ready_view_can_be_contradicted() -> None:
    assert not PodView.of(_pod(ready="0/1")).contradicted([_ep(False, 41)])  # doubtful anyway
    whole = {"metadata": {"name": "nvidia-dcgm-abcde", "uid": "u", "resourceVersion": "40"},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert not PodView.of(whole).contradicted([_ep(False, 41)])  # its conditions are known


def test_not_serving_reads_versions_and_names() -> None:
    view = PodView.of(_pod(rv="5"))
    assert view.contradicted([_ep(False, 6)])
    assert not view.contradicted([_ep(True, 6), _ep(False, 5), _ep(False, 9, pod="q")])
