"""The GPU Operator imitation: off by default; reverts hand-edited Service selectors on every
reconcile; keeps hand-added DaemonSet labels until its desired spec (hash) changes; renders the
common labels when asked; state labels and controller references as the real operators."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers.operator import OperatorImitation
from migrator.model import kinds
from tests.conftest import Bare

NS = "gpu-operator"
Obj = dict[str, Any]
HAND = "example.com/added-by-hand"


def operator(bare: Bare) -> OperatorImitation:
    op = bare.controllers.get("operator")
    assert isinstance(op, OperatorImitation)
    return op


def wait_reconciles(bare: Bare, count: int) -> None:
    start = operator(bare).reconciles
    bare.wait_for(lambda: operator(bare).reconciles >= start + count)


def test_operator_is_off_by_default(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1)
    assert bare.controllers.get("operator") is None


def test_service_selector_is_reverted(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2, operator_reconcile_seconds=5.0)
    before = bare.get(kinds.SERVICE, "nvidia-dcgm-dra")
    bare.edit(kinds.SERVICE, "nvidia-dcgm-dra",
              lambda s: s["spec"].__setitem__("selector", {R.DCGM_LABEL: "true"}))
    bare.wait_for(lambda: bare.get(kinds.SERVICE, "nvidia-dcgm-dra")["spec"]["selector"]
                  == {"app": "nvidia-dcgm-dra"})
    after = bare.get(kinds.SERVICE, "nvidia-dcgm-dra")
    assert after["spec"]["clusterIP"] == before["spec"]["clusterIP"]
    assert after["spec"]["clusterIPs"] == before["spec"]["clusterIPs"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]


def test_hand_added_daemonset_label_survives_until_the_desired_spec_changes(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=2, operator_reconcile_seconds=2.0)
    name = "nvidia-dcgm-exporter-dra"
    bare.edit(kinds.DAEMONSET, name, lambda d: d["metadata"]["labels"].__setitem__(HAND, "x"))
    wait_reconciles(bare, 3)
    ds = bare.get(kinds.DAEMONSET, name)
    assert ds["metadata"]["labels"][HAND] == "x"
    old_hash = ds["metadata"]["annotations"][R.HASH_ANNOTATION]

    def upgrade(cr: Obj) -> None:
        cr["spec"]["dcgmExporter"]["version"] = "4.6.0-4.9.0-distroless"

    bare.edit(kinds.GPU_CLUSTER, "gpu-cluster", upgrade)
    bare.wait_for(lambda: HAND not in bare.get(kinds.DAEMONSET, name)["metadata"]["labels"])
    ds = bare.get(kinds.DAEMONSET, name)
    assert ds["metadata"]["annotations"][R.HASH_ANNOTATION] != old_hash
    assert ds["metadata"]["generation"] == 2
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.9.0-distroless"
    bare.wait_for(lambda: all(
        p["spec"]["containers"][0]["image"] == image for p in bare.pods(name)
    ) and len(bare.pods(name)) == 2)


def _rolled_with_label(bare: Bare, name: str, label: str) -> bool:
    """Both pods of DaemonSet `name` carry `label` and none is terminating."""
    return all(
        (p["metadata"]["labels"].get(label) == "true"
         and not p["metadata"].get("deletionTimestamp")) for p in bare.pods(name)
    ) and len(bare.pods(name)) == 2


def test_new_operator_version_renders_the_common_labels(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2, stack="clusterpolicy", operator_reconcile_seconds=2.0)
    bare.edit(kinds.CLUSTER_POLICY, "gpu-cluster-policy", lambda cr: cr["metadata"].setdefault(
        "annotations", {}).__setitem__(R.RENDERS_COMMON_LABELS, "true"))
    for name, label in (("nvidia-dcgm", R.DCGM_LABEL),
                        ("nvidia-dcgm-exporter", R.EXPORTER_LABEL)):
        bare.wait_for(partial(_rolled_with_label, bare, name, label))
        ds = bare.get(kinds.DAEMONSET, name)
        assert ds["metadata"]["labels"][label] == "true"
        assert ds["spec"]["template"]["metadata"]["labels"][label] == "true"
        assert ds["spec"]["selector"] == {"matchLabels": {"app": name}}


def test_ownership_and_state_labels(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1, stack="both", operator_release="future-coexistence")
    gc = bare.get(kinds.GPU_CLUSTER, "gpu-cluster")
    cp = bare.get(kinds.CLUSTER_POLICY, "gpu-cluster-policy")
    for kind, name, owner, state in (
        (kinds.DAEMONSET, "nvidia-dcgm-dra", gc, "state-dcgm"),
        (kinds.SERVICE, "nvidia-dcgm-dra", gc, "state-dcgm"),
        (kinds.DAEMONSET, "nvidia-dcgm-exporter-dra", gc, "state-dcgm-exporter"),
        (kinds.SERVICE, "nvidia-dcgm-exporter-dra", gc, "state-dcgm-exporter"),
        (kinds.DAEMONSET, "nvidia-dcgm", cp, None),
        (kinds.SERVICE, "nvidia-dcgm-exporter", cp, None),
        (kinds.SERVICE_MONITOR, "nvidia-dcgm-exporter", cp, None),
    ):
        obj = bare.get(kind, name)
        [ref] = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == (
            owner["kind"], owner["metadata"]["uid"], True)
        assert obj["metadata"]["labels"].get(R.STATE_LABEL) == state
        if kind is kinds.DAEMONSET:
            assert obj["metadata"]["annotations"][R.HASH_ANNOTATION].isdigit()


def test_deleted_service_is_recreated(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1, operator_reconcile_seconds=2.0)
    bare.store.delete(kinds.SERVICE, NS, "nvidia-dcgm-exporter-dra")
    svc = bare.wait_for(lambda: bare.store.find(kinds.SERVICE, NS, "nvidia-dcgm-exporter-dra"))
    assert svc is not None  # wait_for answers only once the predicate's value is truthy
    assert svc["spec"]["clusterIP"] and svc["spec"]["selector"] == {
        "app": "nvidia-dcgm-exporter-dra"}


def _stored_cr(stack: str) -> dict[str, Any]:
    """The stack's sample CR as the API server keeps it: its kind and a uid (render reads both)."""
    cr = R.sample_cr(stack)
    cr["metadata"]["uid"] = "uid-1"
    cr["apiVersion"], cr["kind"] = (("nvidia.com/v1", "ClusterPolicy") if stack == R.CLUSTERPOLICY
                                    else ("nvidia.com/v1alpha1", "GPUCluster"))
    return cr


def test_render_follows_the_cr_spec_pure() -> None:
    cr = _stored_cr(R.GPUCLUSTER)
    embedded = R.render(cr, "ns1")  # the sample: standalone DCGM off
    assert [(o["kind"], o["metadata"]["name"]) for o in embedded] == [
        ("ResourceClaimTemplate", "nvidia-dcgm-exporter-admin"),
        ("Service", "nvidia-dcgm-exporter-dra"), ("DaemonSet", "nvidia-dcgm-exporter-dra")]
    env = {e["name"] for e in embedded[2]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env
    cr["spec"]["dcgm"]["enabled"] = True
    remote = [o for o in R.render(cr, "ns1") if o["kind"] == "DaemonSet"]
    assert [o["metadata"]["name"] for o in remote] == ["nvidia-dcgm-dra",
                                                       "nvidia-dcgm-exporter-dra"]
    values = {e["name"]: e.get("value") for e in remote[1]["spec"]["template"]["spec"]
              ["containers"][0]["env"]}
    assert values["DCGM_REMOTE_HOSTENGINE_INFO"] == "nvidia-dcgm-dra:5555"
    assert remote[0]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "nvcr.io/nvidia/cloud-native/dcgm:4.5.2-1-ubuntu22.04")
    assert all(o["metadata"]["namespace"] == "ns1" for o in remote)
    # hard-coded in the GPUCluster's manifests: the CR's `daemonsets.rollingUpdate` is not used
    assert remote[0]["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    cr["spec"]["daemonsets"] = {"updateStrategy": "OnDelete", "priorityClassName": "low",
                                "labels": {"team": "gpu"}, "annotations": {"note": "x"}}
    edited = next(o for o in R.render(cr, "ns1") if o["kind"] == "DaemonSet")
    assert edited["spec"]["updateStrategy"] == {"type": "RollingUpdate"}
    assert edited["spec"]["template"]["spec"]["priorityClassName"] == "system-node-critical"
    assert edited["metadata"]["labels"]["team"] == "gpu"  # on the DaemonSet and its pods
    assert edited["spec"]["template"]["metadata"]["labels"]["team"] == "gpu"
    assert edited["metadata"]["annotations"]["note"] == "x"


def test_a_gpucluster_renders_the_exporter_only_with_its_section() -> None:
    """internal/state/dcgm_exporter.go: the exporter state runs for a `dcgmExporter` section
    that is not disabled; a GPUCluster without one renders no exporter (a ClusterPolicy's is
    on by default)."""
    cr = _stored_cr(R.GPUCLUSTER)

    def daemonsets(spec: dict[str, Any]) -> list[str]:
        return [o["metadata"]["name"] for o in R.render({**cr, "spec": spec}, "ns1")
                if o["kind"] == "DaemonSet"]

    spec = {k: v for k, v in cr["spec"].items() if k != "dcgmExporter"}
    assert daemonsets(spec) == []
    assert daemonsets({**spec, "dcgmExporter": {}}) == ["nvidia-dcgm-exporter-dra"]
    assert daemonsets({**spec, "dcgmExporter": {"enabled": False}}) == []
    policy = R.sample_cr(R.CLUSTERPOLICY)
    assert R.state_enabled({**policy, "spec": {}}, "state-dcgm-exporter")


@pytest.mark.parametrize("stack", [R.CLUSTERPOLICY, R.GPUCLUSTER])
def test_the_exporter_service_takes_its_type_and_traffic_policy_from_the_cr(stack: str) -> None:
    """`TransformDCGMExporterService` (object_controls.go at a22dbf671), both stacks."""
    cr = _stored_cr(stack)
    cr["spec"]["dcgmExporter"]["service"] = {"type": "NodePort",
                                             "internalTrafficPolicy": "Local"}
    services = [o for o in R.render(cr, "ns1") if o["kind"] == "Service"
                and o["metadata"]["name"].startswith("nvidia-dcgm-exporter")]
    assert [(s["spec"]["type"], s["spec"]["internalTrafficPolicy"]) for s in services] == [
        ("NodePort", "Local")]
