"""The verdict judges the live cluster, not the record: a stuck rollout, a re-render that drops
the labels, a deleted state, both stacks at once, an alias that no longer matches its source
and a second scrape path each turn `verify` red, on the sim with the operator imitation on."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from migrator.model import kinds
from migrator.model.gates import rollout_complete
from tests.conftest import edit_cr, edit_object, pods_ready_on
from tests.e2e.conftest import E2E, NS

EXPORTER_DRA = "nvidia-dcgm-exporter-dra"
STATE = "dcgm-migrate-state"


def _failed(doc: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["detail"] for c in doc["verdict"]["checks"] if not c["ok"]}


def _rolled_out(env: E2E, *names: str) -> bool:
    return all(rollout_complete(env.ds(n)).ok for n in names)


def test_a_stuck_phase1_rollout_is_red(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    bad = "gpu-node-0002"
    pods_ready_on(env.sim.store, bad, False)
    res = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "3s")
    assert res.code == 1, res.stderr
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 1, doc.stdout
    failed = _failed(doc.json())
    stuck = [n for n in failed if n.startswith("rollout-complete/")]
    assert stuck and bad in failed[stuck[0]], failed
    assert not doc.json()["ok"]


def test_a_cr_edit_that_drops_the_labels_turns_verify_red(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("clusterpolicy", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    assert env.cli("verify").code == 0
    with env.monitor.expected_outage():
        def edit(cr: dict[str, Any]) -> None:
            cr["spec"]["dcgmExporter"]["version"] = "4.5.2-4.8.1-distroless"
        edit_cr(env.sim.store, kinds.CLUSTER_POLICY, edit)
        env.sim.wait_for(lambda: "nvidia.com/gpu-operator.dcgm-exporter" not in env.ds(
            "nvidia-dcgm-exporter")["metadata"]["labels"], 30)
        env.sim.wait_for(lambda: _rolled_out(env, "nvidia-dcgm-exporter"), 60)
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 1
    failed = _failed(doc.json())
    assert "lack nvidia.com/gpu-operator.dcgm-exporter=true" in failed[
        "pods-labelled/nvidia-dcgm-exporter"], failed


def test_a_deleted_state_is_reported_and_rollback_claims_nothing(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    env.sim.store.delete(kinds.CONFIGMAP, NS, STATE)
    status = env.cli("status", "-o", "json")
    assert status.code == 1
    doc = status.json()
    assert doc["verdict"]["ok"]  # consumers are fine ...
    assert doc["lostState"] == ["DaemonSet/nvidia-dcgm-dra (labelled by the tool's phase 1)",
                                "DaemonSet/nvidia-dcgm-exporter-dra (labelled by the tool's "
                                "phase 1)",
                                "Service/nvidia-dcgm (the tool's alias)",
                                "Service/nvidia-dcgm-exporter (the tool's alias)"]
    assert any("No state" in w for w in doc["warnings"])  # ... but nothing can be rolled back
    mark = env.mark()
    for argv in (("apply", "--phase", "3", "--yes"), ("rollback", "--phase", "1", "--yes")):
        res = env.cli(*argv)
        assert res.code == 2, (argv, res.stdout, res.stderr)
        assert "No state ConfigMap" in res.stderr and "Restoring the state" in res.stderr
    assert env.writes(since=mark) == []
    for alias in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        live = env.svc(alias)
        assert live is not None and "nvidia.com/gpu-operator" in str(live["spec"]["selector"])


def test_both_stacks_on_every_node_are_red_for_gpus_reported_twice(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("both", operator_release=FUTURE, nodes=3)
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 1
    failed = _failed(doc.json())
    assert "3 nodes run the exporters of both stacks" in failed["one-exporter-per-node/*"]
    fix = next(c["fix"] for c in doc.json()["verdict"]["checks"]
               if c["name"] == "one-exporter-per-node/*")
    assert "nvidia.com/gpu.deploy.dcgm-exporter=false" in fix
    assert "nvidia.com/gpu.deploy.dcgm-exporter-dra=false" in fix


def test_mixed_stacks_are_red_while_a_stable_name_misses_the_dra_nodes(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4)
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 1
    failed = _failed(doc.json())
    dra_nodes = sorted({p["spec"]["nodeName"] for p in env.pods(EXPORTER_DRA)})
    assert dra_nodes
    detail = failed["nodes-covered/nvidia-dcgm-exporter"]
    assert f"no ready endpoint on {len(dra_nodes)} of 4 nodes" in detail
    assert all(n in detail for n in dra_nodes)
    plan = env.cli("plan", "-o", "json").json()  # the plan says so before anything is run
    guard = f"`dcgm-migrate guard --kubeconfig {env.sim.kubeconfig}` adds the GPUCluster pods"
    assert any("run on separate nodes" in w and guard in w  # pointed at this cluster
               for w in plan["warnings"]), plan["warnings"]


def test_an_alias_that_no_longer_matches_its_source_is_red_until_the_guard_syncs_it(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=1.0)
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    assert env.cli("verify").code == 0

    def edit(cr: dict[str, Any]) -> None:
        cr["spec"]["dcgmExporter"]["service"] = {"type": "NodePort"}
    edit_cr(env.sim.store, kinds.GPU_CLUSTER, edit)
    env.sim.wait_for(lambda: (env.svc(EXPORTER_DRA) or {})["spec"].get("type") == "NodePort", 30)
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 1
    gates = {g["name"]: g for p in doc.json()["phases"] for g in p["gates"]}
    assert not gates["alias-holds/nvidia-dcgm-exporter"]["ok"]
    assert "type" in gates["alias-holds/nvidia-dcgm-exporter"]["detail"]

    guard = env.cli("guard", "--once", "-o", "json")
    assert guard.code == 0, guard.stderr
    assert guard.json()["verdict"]["ok"], guard.json()["verdict"]  # after its own sync
    alias = env.svc("nvidia-dcgm-exporter")
    assert alias is not None and alias["spec"]["type"] == "NodePort"
    assert all(p.get("nodePort") for p in alias["spec"]["ports"])  # assigned by the API server
    after = env.cli("verify", "-o", "json")
    assert after.code == 0, _failed(after.json())
    assert env.cli("apply", "--phase", "2", "--yes").code == 0  # and apply agrees


def test_a_pod_annotation_gives_a_second_target_and_verify_counts_it(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    assert env.cli("verify").code == 0
    with env.monitor.expected_outage():
        edit_object(env.sim.store, kinds.DAEMONSET, NS, EXPORTER_DRA,
                    lambda d: d["spec"]["template"]["metadata"].setdefault(
                        "annotations", {}).update({"prometheus.io/scrape": "true"}))
        env.sim.wait_for(lambda: all(p["metadata"].get("annotations", {}).get(
            "prometheus.io/scrape") for p in env.pods(EXPORTER_DRA)), 30)
        env.sim.wait_for(lambda: _rolled_out(env, EXPORTER_DRA), 30)
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 1
    detail = _failed(doc.json())["scrape-once/exporters"]
    assert "3 of 3 exporter pods are scraped more than once" in detail
    assert "kubernetes-pods → pod annotation:9400" in detail
    assert "kubernetes-service-endpoints → Service/nvidia-dcgm-exporter-dra:9400" in detail


def test_a_cluster_migrated_by_other_means_verifies_green_with_no_state(
        e2e_factory: Callable[..., E2E]) -> None:
    """Labels and aliases made by hand, never by the tool: no state, no tool marks, green."""
    env = e2e_factory("gpucluster", operator_reconcile_seconds=None)
    keys = {"nvidia-dcgm-dra": "nvidia.com/gpu-operator.dcgm",
            "nvidia-dcgm-exporter-dra": "nvidia.com/gpu-operator.dcgm-exporter"}
    with env.monitor.expected_outage():
        for ds, key in keys.items():
            def label(d: dict[str, Any], k: str = key) -> None:
                d["spec"]["template"]["metadata"]["labels"].update({k: "true"})

            edit_object(env.sim.store, kinds.DAEMONSET, NS, ds, label)
        env.sim.wait_for(lambda: _rolled_out(env, *keys) and all(
            keys[ds] in p["metadata"]["labels"] for ds in keys for p in env.pods(ds)), 60)
    for source, name in (("nvidia-dcgm-dra", "nvidia-dcgm"),
                         ("nvidia-dcgm-exporter-dra", "nvidia-dcgm-exporter")):
        src = env.svc(source)
        assert src is not None
        spec = {k: v for k, v in src["spec"].items() if k not in ("clusterIP", "clusterIPs")}
        spec["selector"] = {keys[source]: "true"}
        env.sim.store.create(kinds.SERVICE, {"apiVersion": "v1", "kind": "Service",
                                             "metadata": {"name": name, "namespace": NS},
                                             "spec": spec})
    env.sim.wait_for(lambda: len([e for s in env.sim.store.list(
        kinds.ENDPOINTSLICE, NS)[0] if s["metadata"]["labels"].get(
        "kubernetes.io/service-name") == "nvidia-dcgm-exporter"
        for e in s.get("endpoints") or []]) == 3, 30)
    doc = env.cli("verify", "-o", "json")
    assert doc.code == 0, _failed(doc.json())
    assert doc.json()["state"] is None and doc.json()["lostState"] == []


def test_the_runbooks_state_backup_restores_with_kubectl_and_rollback_works(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    """docs/runbook.md 'Restoring the state', command for command, with the real kubectl."""
    binary = shutil.which("kubectl")
    assert binary, "kubectl must be on the PATH"
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    kenv = {**os.environ, "KUBECONFIG": env.sim.kubeconfig, "HOME": str(tmp_path)}

    def kubectl(*args: str) -> str:
        done = subprocess.run([binary, "-n", NS, *args], env=kenv, capture_output=True,
                              text=True, timeout=60, check=False, cwd=tmp_path)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    for key in ("state.json", "state.sha256"):  # the backup
        (tmp_path / key).write_text(kubectl(
            "get", "configmap", STATE, "-o", f"go-template={{{{index .data \"{key}\"}}}}"))
    kubectl("delete", "configmap", STATE)
    assert env.cli("rollback", "--phase", "3", "--yes").code == 2  # refused: state lost
    kubectl("create", "configmap", STATE, "--from-file=state.json", "--from-file=state.sha256")
    kubectl("label", "configmap", STATE, "app.kubernetes.io/managed-by=dcgm-migrate")
    assert env.cli("status").code == 0
    res = env.cli("rollback", "--phase", "2", "--yes", "--settle", "0s")
    assert res.code == 0, res.stderr
    assert env.svc("nvidia-dcgm") is None and env.svc("nvidia-dcgm-exporter") is None
