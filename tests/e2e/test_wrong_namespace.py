"""A wrong namespace is refused, never migrated: a namespace that exists but holds none of the
GPU Operator's DCGM DaemonSets (the cluster-scoped ClusterPolicy/GPUCluster exist all the same)
makes plan, apply, rollback, status and verify exit 2 with one sentence naming the namespace
where the DaemonSets do run and zero writes (the sim's request log); preflight shows ✗ for the
namespace (a typo, or the wrong one) and exits 1; an identity that may not list DaemonSets
cluster-wide is told so."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dcgm_sim.cluster import kubeconfig_document
from migrator.model import kinds
from tests.e2e.conftest import E2E, NS
from tests.helpers import cli

REFUSED = [
    ("plan",),
    ("apply", "--phase", "3", "--yes", "--settle", "0s"),
    ("apply", "--phase", "1", "--yes", "--dry-run"),
    ("rollback", "--phase", "1", "--yes", "--settle", "0s"),
    ("status",),
    ("verify",),
]


def _no_state_anywhere(env: E2E) -> None:
    for namespace in ("default", NS):
        assert env.sim.store.find(kinds.CONFIGMAP, namespace, "dcgm-migrate-state") is None


def test_a_namespace_without_the_daemonsets_is_refused_naming_where_they_run(e2e: E2E) -> None:
    crs = e2e.sim.store.list(kinds.CLUSTER_POLICY)[0] + e2e.sim.store.list(kinds.GPU_CLUSTER)[0]
    assert crs, "the cluster-scoped CR must exist: it is what made `default` look right"
    mark = e2e.mark()
    for argv in REFUSED:
        res = e2e.cli(*argv, "-n", "default")
        assert res.code == 2, (argv, res.stdout, res.stderr)
        assert res.stdout == "", (argv, res.stdout)
        error, fix = [line for line in res.stderr.splitlines() if line.strip()][-2:]
        assert error.startswith("error: No GPU Operator DCGM found in namespace 'default'"), error
        assert "they run in namespace 'gpu-operator'." in error, error
        # the option, and the whole command line that passes it (run as written)
        assert fix.startswith(f"fix: pass -n gpu-operator: `dcgm-migrate {argv[0]} "), fix
        assert fix.endswith(" -n gpu-operator`") and " -n default" not in fix, fix
    assert e2e.writes(since=mark) == [], [(w.verb, w.resource, w.name)
                                          for w in e2e.writes(since=mark)]
    dry = [e for e in e2e.sim.server.log.entries() if e.seq > mark and e.dry_run]
    assert dry == [], "a refused dry run still sent its writes"
    _no_state_anywhere(e2e)


def test_the_refusal_is_a_json_error_document(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "-n", "default", "-o", "json")
    assert res.code == 2
    doc = res.json()["error"]  # validated against $defs/error
    assert doc["exitCode"] == 2 and doc["type"] == "UsageError"
    assert "'default'" in doc["message"] and "'gpu-operator'" in doc["message"]
    assert doc["hint"].startswith("pass -n gpu-operator: `dcgm-migrate apply --phase 3 --yes ")
    assert doc["hint"].endswith(" -n gpu-operator`"), doc["hint"]
    assert env.writes(since=mark) == []


def test_a_namespace_that_does_not_exist_names_the_right_one(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    mark = env.mark()
    res = env.cli("apply", "--phase", "1", "--yes", "-n", "gpu-operater")
    assert res.code == 2, res.stderr
    assert "Namespace 'gpu-operater' does not exist" in res.stderr
    assert "DCGM DaemonSets run in namespace 'gpu-operator'" in res.stderr
    assert "fix: pass -n gpu-operator" in res.stderr
    assert env.writes(since=mark) == []


@pytest.mark.parametrize("namespace, says", [
    ("gpu-operater", "Namespace 'gpu-operater' does not exist"),
    ("default", "No GPU Operator DCGM found in namespace 'default'"),
])
def test_preflight_marks_a_wrong_namespace(e2e_factory: Callable[..., E2E], namespace: str,
                                           says: str) -> None:
    env = e2e_factory("gpucluster")
    mark = env.mark()
    res = env.cli("preflight", "-n", namespace)
    assert res.code == 1, res.stdout
    assert f"✗ namespace/{namespace}: {says}" in res.stdout, res.stdout
    doc = env.cli("preflight", "-n", namespace, "-o", "json")
    assert doc.code == 1
    check = next(c for c in doc.json()["checks"] if c["name"] == f"namespace/{namespace}")
    assert not check["ok"] and not doc.json()["ok"]
    assert says in check["detail"] and "run in namespace 'gpu-operator'" in check["detail"]
    assert check["detail"].endswith("Fix: pass -n gpu-operator."), check
    assert env.writes(since=mark) == []


def test_preflight_passes_the_operators_namespace(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("clusterpolicy")
    res = env.cli("preflight")
    assert res.code == 0, res.stdout
    assert ("✓ namespace/gpu-operator: holds DaemonSets nvidia-dcgm, nvidia-dcgm-exporter"
            in res.stdout), res.stdout


RBAC_NAMESPACE_ONLY = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [get]
  - apiGroups: [nvidia.com]
    resources: [clusterpolicies, gpuclusters]
    verbs: [list]
  - apiGroups: [monitoring.coreos.com]
    resources: [servicemonitors, podmonitors]
    verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: reader}
subjects: [{kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader, namespace: default}
rules:
  - apiGroups: ["", apps, discovery.k8s.io]
    resources: [daemonsets, pods, services, endpointslices, configmaps]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects: [{kind: User, name: alice}]
"""


def test_an_identity_that_may_not_list_cluster_wide_is_told_so(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster")
    token = "alice-namespace-reader-7c1d"  # a test credential, for the sim only
    env.sim.server.access.add_token(token, RBAC_NAMESPACE_ONLY)
    kubeconfig = tmp_path / "alice"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_document(env.sim.url, "default", token)))
    mark = env.mark()
    res = cli.run(str(kubeconfig), "plan", "-n", "default", "-o", "json")
    assert res.code == 2, res.stderr
    doc = json.loads(res.stdout)["error"]
    assert "namespace 'default'" in doc["message"], doc
    assert "may not list DaemonSets cluster-wide (403 Forbidden)" in doc["message"], doc
    assert "pass the namespace the GPU Operator runs in with -n" in doc["hint"], doc
    assert env.writes(since=mark) == []


def test_a_state_that_records_steps_keeps_its_namespace_answerable(
        e2e_factory: Callable[..., E2E]) -> None:
    """The DaemonSets are gone (the operator was removed) but the state records phase 1:
    status reports the drift (exit 1) instead of calling the namespace wrong, apply refuses."""
    env = e2e_factory("gpucluster", operator_reconcile_seconds=None)
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    with env.monitor.expected_outage():
        for name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
            env.sim.store.delete(kinds.DAEMONSET, NS, name)
        status = env.cli("status", "-o", "json")
        assert status.code == 1, status.stderr
        gates = {g["name"]: g for g in status.json()["phases"][0]["gates"]}
        assert not gates["labels-hold/nvidia-dcgm-dra"]["ok"]
        mark = env.mark()
        res = env.cli("apply", "--phase", "3", "--yes")
        assert res.code == 2, res.stderr
        assert "No GPU Operator DCGM found in namespace 'gpu-operator'" in res.stderr
        assert env.writes(since=mark) == []
