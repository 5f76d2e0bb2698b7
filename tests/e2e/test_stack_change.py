"""`change-stack` on the default simulated cluster (the released GPU Operator, which refuses a
ClusterPolicy and a GPUCluster at once), with the fixtures' probe timings: the procedure of
docs/runbook.md "Changing stack" in both directions keeps `nvidia-dcgm` and
`nvidia-dcgm-exporter` and their ClusterIPs at every simulated instant; its lowest ready
endpoints and worst per-node gap are printed beside the plain delete-then-create procedure's,
measured the same way (from the sim's own commits, in simulated seconds)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dcgm_sim.controllers.rendering import DEPLOY_LABELS
from dcgm_sim.seed import seeded_cr
from migrator.model import kinds
from migrator.model.stackchange import clean_cr
from tests.e2e.conftest import E2E, NS
from tests.helpers.stablenames import StableNames, watching

STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")
SCALE = 0.1  # real seconds per simulated second: the tool's polls are real time
NODES = 3


def label_nodes(env: E2E, stack: str) -> None:
    """docs/runbook.md step 1: label the GPU nodes for the new stack's DCGM components
    (`kubectl label nodes -l nvidia.com/gpu.present=true ...`)."""
    for node in env.sim.store.list(kinds.NODE)[0]:
        node = copy.deepcopy(node)
        node["metadata"]["labels"].update({k: "true" for k in DEPLOY_LABELS[stack]})
        env.sim.store.update(kinds.NODE, node)


def manifest(tmp_path: Path, stack: str) -> Path:
    """The new CR's manifest, as a user keeps it (no status, no server fields)."""
    path = tmp_path / f"{stack}.yaml"
    path.write_text(yaml.safe_dump(clean_cr(seeded_cr(stack))))
    return path


def crs(env: E2E, kind: kinds.Kind) -> list[str]:
    return [c["metadata"]["name"] for c in env.sim.store.list(kind)[0]]


def served(env: E2E, names: tuple[str, ...] = STABLE) -> bool:
    items, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    for name in names:
        nodes = {ep.get("nodeName") for sl in items
                 if sl["metadata"]["labels"].get("kubernetes.io/service-name") == name
                 for ep in sl.get("endpoints") or [] if (ep.get("conditions") or {}).get("ready")}
        if len(nodes) < NODES:
            return False
    return True


def migrated_clusterpolicy(e2e_factory: Callable[..., E2E]) -> E2E:
    env = e2e_factory("clusterpolicy", nodes=NODES, time_scale=SCALE)
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert res.code == 0, res.stderr
    return env


def change(env: E2E, to: str, path: Path, old: str, *extra: str) -> Any:
    return env.cli("change-stack", "--to", to, "-f", str(path), "--delete-cr", old, "--yes",
                   "--settle", "0s", "--kubeconfig", env.sim.kubeconfig, *extra)


def show(title: str, seen: StableNames) -> None:
    print(f"{title}: lowest ready {seen.lowest_ready}, absent "
          f"{ {k: round(v, 1) for k, v in seen.absent_seconds.items()} } s, ClusterIPs "
          f"{ {k: sorted(v) for k, v in seen.cluster_ips.items()} }, worst per-node gap "
          f"{round(seen.worst_gap(), 1)} s simulated")


def assert_names_kept(seen: StableNames, before: dict[str, str]) -> None:
    assert not any(seen.absent_seconds.values()), seen.absent_seconds
    assert {k: sorted(v) for k, v in seen.cluster_ips.items()} == {
        k: [ip] for k, ip in before.items()}


def cluster_ips(env: E2E) -> dict[str, str]:
    return {n: env.service(n)["spec"]["clusterIP"] for n in STABLE}


def test_change_stack_to_gpucluster_keeps_the_stable_names_and_ips(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    """ClusterPolicy → GPUCluster by the runbook: nodes labelled, then change-stack. The
    Services never vanish, their ClusterIPs never change; the aliases serve every node again
    and `verify` is green; the per-node gap is printed."""
    env = migrated_clusterpolicy(e2e_factory)
    before = cluster_ips(env)
    label_nodes(env, "gpucluster")
    with env.monitor.replacing(*STABLE), watching(env.sim, NS, STABLE) as seen:
        res = change(env, "gpucluster", manifest(tmp_path, "gpucluster"), "gpu-cluster-policy")
        assert res.code == 0, res.stdout + res.stderr
        env.until(lambda: served(env), 120, "every node served again")
    show("change-stack → gpucluster", seen)
    assert_names_kept(seen, before)
    assert crs(env, kinds.CLUSTER_POLICY) == [] and crs(env, kinds.GPU_CLUSTER) == ["gpu-cluster"]
    for name in STABLE:
        svc = env.service(name)
        assert svc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "dcgm-migrate"
        # no controller to garbage-collect it with the old CR: the GPUCluster as a
        # non-controller owner, as phase 2's aliases have
        assert [(r["kind"], r["controller"]) for r in svc["metadata"]["ownerReferences"]] == [
            ("GPUCluster", False)]
    assert env.state()["stackChange"]["status"] == "completed"
    verify = env.cli("verify")
    assert verify.code == 0, verify.stdout


def test_a_second_cr_turns_the_verdict_red_with_the_fix(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    """A GPUCluster created by hand beside the ClusterPolicy: the released operator refuses
    both, and `verify` is red naming both CRs and the fix; change-stack then refuses to run
    until the refused CR is deleted (exit 2, zero writes)."""
    env = migrated_clusterpolicy(e2e_factory)
    env.sim.store.create(kinds.GPU_CLUSTER, clean_cr(seeded_cr("gpucluster")))

    def refused() -> bool:
        cr = env.sim.store.list(kinds.GPU_CLUSTER)[0][0]
        return any(c.get("reason") == "PrerequisiteNotMet"
                   for c in (cr.get("status") or {}).get("conditions") or [])

    env.until(refused, 30, "the GPUCluster refused")
    res = env.cli("verify", "-o", "json")
    assert res.code == 1
    found = {f["name"]: f for f in res.json()["verdict"]["checks"] if not f["ok"]}
    red = found["one-operator-cr/gpu-cluster"]
    assert red["detail"].startswith("the GPU Operator stops reconciling every operand while "
                                    "both ClusterPolicy and GPUCluster exist")
    assert "ClusterPolicy/gpu-cluster-policy" in red["detail"]
    assert "kubectl delete gpuclusters gpu-cluster" in red["fix"]
    mark = env.mark()
    again = change(env, "gpucluster", manifest(tmp_path, "gpucluster"), "gpu-cluster-policy")
    assert again.code == 2, again.stderr
    assert "both exist" in again.stderr and "kubectl delete gpuclusters gpu-cluster" in \
        again.stderr
    assert env.writes(since=mark) == []


def test_change_stack_refuses_to_create_a_second_cr(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    """Without --delete-cr the plan would create the GPUCluster beside the ClusterPolicy,
    which the released operator refuses: dry run and run both refuse, exit 2, zero writes."""
    env = migrated_clusterpolicy(e2e_factory)
    path = manifest(tmp_path, "gpucluster")
    mark = env.mark()
    for extra in (("--dry-run",), ("--yes",)):
        res = env.cli("change-stack", "--to", "gpucluster", "-f", str(path), *extra,
                      "--kubeconfig", env.sim.kubeconfig)
        assert res.code == 2, res.stderr
        assert "would make the GPU Operator stop reconciling every operand" in res.stderr
        assert "--delete-cr gpu-cluster-policy" in res.stderr
    assert env.writes(since=mark) == []
    assert crs(env, kinds.GPU_CLUSTER) == []
