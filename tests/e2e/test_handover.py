"""The hand-over to a GPU Operator release that ships shared Services (docs/runbook.md,
"Upgrading to an operator with shared Services"), end to end with the operator imitation on and
the disruption monitor running: the preparation (`--prepare-for`) and what the tool refuses."""

from __future__ import annotations

from collections.abc import Callable

from migrator.model import kinds
from tests.e2e.conftest import E2E, NS

COMPONENT = "app.kubernetes.io/component"
DAEMONSETS = {"nvidia-dcgm-dra": "nvidia-dcgm", "nvidia-dcgm-exporter-dra": "nvidia-dcgm-exporter"}


def test_an_unknown_release_is_refused_with_the_known_ones_and_no_write(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=None)
    mark = env.mark()
    for argv in (("plan", "--prepare-for", "next-year"),
                 ("apply", "--phase", "1", "--yes", "--prepare-for", "next-year")):
        res = env.cli(*argv)
        assert res.code == 2, (argv, res.stdout, res.stderr)
        assert "names no GPU Operator release" in res.stderr and "shared-services" in res.stderr
    assert env.writes(since=mark) == []


def test_preparing_puts_the_release_labels_on_every_pod_of_a_migrated_cluster_and_rollback_takes_them_off(  # noqa: E501
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    plan = env.cli("plan", "--prepare-for", "shared-services", "-o", "json").json()
    label = next(p for p in plan["phases"] if p["number"] == 1)
    todo = {g["name"] for g in label["gates"] if not g["ok"] and "phase 1 adds it" in g["detail"]}
    assert todo == {f"prepared/{ds}" for ds in DAEMONSETS}, label["gates"]
    assert any("deletes Service/nvidia-dcgm-dra" in w for w in plan["warnings"])

    prepared = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                       "--prepare-for", "shared-services")
    assert prepared.code == 0, prepared.stdout + prepared.stderr
    for ds, value in DAEMONSETS.items():
        assert env.ds(ds)["spec"]["template"]["metadata"]["labels"][COMPONENT] == value
        pods = env.pods(ds)
        assert pods and all(p["metadata"]["labels"].get(COMPONENT) == value for p in pods)
    assert env.cli("verify").code == 0

    back = env.cli("rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert back.code == 0, back.stdout + back.stderr
    for ds in DAEMONSETS:
        labels = env.sim.store.get(kinds.DAEMONSET, NS, ds)["spec"]["template"]["metadata"][
            "labels"]
        assert COMPONENT not in labels and "nvidia.com/gpu-operator.dcgm" not in str(labels)
