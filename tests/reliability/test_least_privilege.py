"""Least privilege (`preflight`, docs/runbook.md "1. Preflight"): docs/rbac.yaml grants exactly
`permissions.REQUIRED`; a whole migration and rollback run with a token holding only those rules
and are never refused; a token missing one write permission exits 3 naming it before any write,
and `preflight` lists it; one revoked mid-run stops the run (exit 3) with no pod restarted for
it; no write ever touches an object outside the plan's allow-list."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.cluster import kubeconfig_document
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from migrator.engine.permissions import REQUIRED, RUN_REQUIRED, Permission
from migrator.model import kinds
from migrator.model.objects import HELD_STRATEGY
from tests.helpers import crash
from tests.helpers.stackprep import label_nodes, manifest
from tests.reliability.conftest import APPLY, NS, ROLLBACK, Env

RBAC = Path(crash.REPO) / "docs" / "rbac.yaml"
SA_USER = "system:serviceaccount:gpu-operator:dcgm-migrate"
TOKEN = "dcgm-migrate-sa-token-9f3c"  # a test credential, for the sim only
Grant = tuple[str, str, str, str | None, str]  # verb, group, resource, name, scope


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _granted(docs: list[dict[str, Any]]) -> Iterator[Grant]:
    """Each (verb, group, resource, name, scope) the bound roles allow; scope is "cluster" for a
    ClusterRole bound cluster-wide, else the RoleBinding's namespace."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs
             if d["kind"] in ("Role", "ClusterRole")}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        role = roles[(ref["kind"], ref["name"])]
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else (
            binding["metadata"]["namespace"])
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            yield verb, group, resource, name, scope


def _required(p: Permission) -> Grant:
    return (p.verb, p.kind.group, p.kind.plural, p.name, NS if p.namespaced else "cluster")


def test_rbac_yaml_grants_exactly_what_the_tool_requires() -> None:
    docs = _docs(RBAC.read_text())
    granted = list(_granted(docs))
    assert len(granted) == len(set(granted)), "a permission is granted twice"
    wanted = {_required(p) for p in REQUIRED}
    assert set(granted) - wanted == set(), "docs/rbac.yaml grants more than REQUIRED"
    assert wanted - set(granted) == set(), "docs/rbac.yaml misses a REQUIRED permission"
    text = RBAC.read_text()
    assert "'*'" not in text and '"*"' not in text and "[*]" not in text, "wildcards"
    for verb, _group, resource, name, _scope in granted:
        if verb not in ("get", "list", "watch", "create") and resource != "pods":
            # pods: generated names (deleted with --roll-on-delete, patched in place)
            assert name, f"{verb} {resource} is not narrowed by resourceNames"
    subjects = [s for d in docs if d["kind"].endswith("Binding") for s in d["subjects"]]
    assert subjects and all(s == {"kind": "ServiceAccount", "name": "dcgm-migrate",
                                  "namespace": NS} for s in subjects), subjects
    namespaced = [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    assert all(d["metadata"]["namespace"] == NS for d in namespaced)


def _kubeconfig(env: Env, rbac_text: str, tmp_path: Path, token: str = TOKEN) -> str:
    policy = env.sim.server.access.add_token(token, rbac_text)
    assert policy.user == SA_USER
    path = tmp_path / f"kubeconfig-{token}"
    path.write_text(yaml.safe_dump(kubeconfig_document(env.sim.url, NS, token)))
    return str(path)


def _service_names(env: Env) -> set[str]:
    return {s["metadata"]["name"] for s in env.sim.store.list(kinds.SERVICE, NS)[0]}


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy"])
def test_a_whole_migration_and_rollback_need_nothing_more(
        fresh: Callable[..., Env], tmp_path: Path, stack: str) -> None:
    env = fresh(stack, insecure_port=False)
    services_before = _service_names(env)
    kubeconfig = _kubeconfig(env, RBAC.read_text(), tmp_path)
    pre = crash.run(kubeconfig, "preflight", "-o", "json")
    assert pre.code == 0, pre.stdout
    plan = crash.run(kubeconfig, "plan", "-o", "json")
    assert plan.code == 0, plan.stderr
    allowed = crash.allow_list(json.loads(plan.stdout))
    for argv in (APPLY, ("status",), ROLLBACK, ("unlock",)):
        done = crash.run(kubeconfig, *argv)
        assert done.code == 0, f"{argv}: {done.stderr[-1500:]}"
    entries = env.sim.server.log.entries()
    refused = [(r.verb, r.resource, r.name, r.code) for r in entries if r.code in (401, 403)]
    assert refused == [], f"the tool needed more than docs/rbac.yaml: {refused}"
    assert {r.user for r in entries} == {SA_USER}
    assert env.writes(), "nothing was written: the test proves nothing"
    outside = crash.outside(env.writes(), allowed)
    assert outside == [], f"writes outside the plan's allow-list {sorted(allowed)}: {outside}"
    assert _service_names(env) == services_before  # the rollback deleted what phase 2 created
    assert not env.finish()


def _without(rbac_text: str, verb: str, resource: str, name: str) -> str:
    """docs/rbac.yaml minus one (verb, resource, name) grant."""
    docs = _docs(rbac_text)
    for doc in docs:
        for rule in doc.get("rules") or []:
            if verb in rule["verbs"] and resource in rule["resources"] and name in (
                    rule.get("resourceNames") or []):
                rule["resourceNames"] = [n for n in rule["resourceNames"] if n != name]
    return yaml.safe_dump_all(copy.deepcopy(docs))


def test_a_missing_write_permission_is_named_by_preflight_and_by_apply(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    env = fresh(insecure_port=False)
    narrow = _without(RBAC.read_text(), "patch", "daemonsets", "nvidia-dcgm-exporter-dra")
    kubeconfig = _kubeconfig(env, narrow, tmp_path, token="narrow-token-1")
    mark = env.mark()
    pre = crash.run(kubeconfig, "preflight")
    assert pre.code == 1, pre.output
    assert "✗ rbac/patch daemonsets.apps/nvidia-dcgm-exporter-dra: not allowed" in pre.stdout
    assert f"rbac: {len(REQUIRED) - 1}/{len(REQUIRED)} permissions" in pre.stdout
    assert env.writes(mark) == [], "preflight wrote something"
    done = crash.run(kubeconfig, *APPLY)
    assert done.code == 3, done.output
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "Traceback" not in done.stderr
    assert "may not patch daemonsets.apps/nvidia-dcgm-exporter-dra in namespace" in error[0], \
        error
    assert env.writes(mark) == [], "a refused run wrote"
    assert "fix: " in done.stderr and "preflight" in done.stderr
    ds = env.sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-exporter-dra")
    assert "nvidia.com/gpu-operator.dcgm-exporter" not in ds["metadata"]["labels"]
    assert not env.finish()


def _without_rules(drop: Callable[[dict[str, Any]], bool]) -> str:
    """docs/rbac.yaml without the rules `drop` picks."""
    docs = _docs(RBAC.read_text())
    for doc in docs:
        if "rules" in doc:
            doc["rules"] = [r for r in doc["rules"] if not drop(r)]
    return yaml.safe_dump_all(docs)


def test_preflight_names_the_in_place_path_s_permissions(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """Phase 1 in place patches pods and reads ControllerRevisions: docs/rbac.yaml without
    those rules fails preflight, which names each."""
    env = fresh(insecure_port=False)
    narrow = _without_rules(lambda r: r["resources"] == ["controllerrevisions"] or _pod_patch(r))
    kubeconfig = _kubeconfig(env, narrow, tmp_path, token="narrow-token-2")
    pre = crash.run(kubeconfig, "preflight")
    assert pre.code == 1, pre.output
    missing = sorted(line.strip() for line in pre.stdout.splitlines() if "not allowed" in line)
    assert missing == ["✗ rbac/list controllerrevisions.apps: not allowed",
                       "✗ rbac/patch pods: not allowed",
                       "✗ rbac/watch controllerrevisions.apps: not allowed"], pre.stdout
    assert not env.finish()


def _pod_patch(rule: dict[str, Any]) -> bool:
    """docs/rbac.yaml's `patch pods` rule (phase 1 in place's relabels)."""
    return (rule["resources"], rule["verbs"]) == (["pods"], ["patch"])


def _pod_uids(env: Env) -> set[str]:
    return {p["metadata"]["uid"] for p in env.sim.store.list(kinds.POD, NS)[0]}


def test_a_missing_pod_patch_permission_is_named_before_any_write(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """A run checks every permission it may use before its lock and its first write: without
    `patch pods`, apply exits 3 naming it and writes nothing (no DaemonSet held on OnDelete,
    as a refusal at the first pod's relabel would leave it)."""
    env = fresh(insecure_port=False)
    kubeconfig = _kubeconfig(env, _without_rules(_pod_patch), tmp_path, token="narrow-token-3")
    pods, mark = _pod_uids(env), env.mark()
    done = crash.run(kubeconfig, *APPLY)
    assert done.code == 3, done.output
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "may not patch pods in namespace" in error[0], done.stderr
    assert env.writes(mark) == [], "a refused run wrote"
    assert env.sim.wait_idle() and _pod_uids(env) == pods


def test_a_pod_patch_permission_revoked_mid_relabel_stops_the_run_and_restarts_no_pod(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """RBAC's 403 on a pod's relabel (the permission revoked after the run's check) is no
    admission refusal: the run stops with exit 3 naming it, and no pod is left to a rollout
    for it; the DaemonSet it was relabelling stays held on OnDelete for the rerun."""
    env = fresh(insecure_port=False)
    kubeconfig = _kubeconfig(env, RBAC.read_text(), tmp_path, token="revoked-token-4")
    pods = _pod_uids(env)
    env.sim.server.faults.update(hang_nth_write=1, hang_write_of="patch pods")
    proc = crash.start(kubeconfig, *APPLY)
    crash.until(lambda: bool(env.sim.server.faults.snapshot()["write_held"]), proc)
    env.sim.server.access.add_token("revoked-token-4", _without_rules(_pod_patch))
    env.sim.server.faults.update(hang_nth_write=None)
    code, out, err = crash.finish(proc)
    assert code == 3, out + err
    assert 'cannot patch resource "pods"' in err and "left to its rollout" not in out + err
    assert env.sim.wait_idle() and _pod_uids(env) == pods
    held = [d["metadata"]["name"] for d in env.sim.store.list(kinds.DAEMONSET, NS)[0]
            if HELD_STRATEGY in (d["metadata"].get("annotations") or {})]
    assert held, "no DaemonSet held: the run did not stop at a relabel"


def _cr_delete(resource: str) -> Callable[[dict[str, Any]], bool]:
    """docs/rbac.yaml's rule deleting `resource` by name (dropped whole: an emptied
    resourceNames would grant every name)."""
    return lambda rule: (rule["resources"], rule["verbs"]) == ([resource], ["delete"])


def test_a_stack_change_and_its_rollback_name_a_missing_cr_delete_before_any_write(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """`change-stack` asks every permission it and the phases it runs use before its question
    and lock: without deleting the old ClusterPolicy it exits 3 naming that, writing nothing
    (found at the delete, its Services would already be out of the old CR's reach); so does
    `--rollback` without deleting the GPUCluster the change created."""
    env = fresh("clusterpolicy", insecure_port=False, monitor=False,  # the change's own gap
                operator_reconcile_seconds=RESYNC_SECONDS)
    label_nodes(env.sim, "gpucluster")
    change = ("change-stack", "--to", "gpucluster", "-f", str(manifest(tmp_path, "gpucluster")),
              "--delete-cr", "gpu-cluster-policy", "--yes", "--settle", "0s")
    refusals = [
        (change, _cr_delete("clusterpolicies"),
         "may not delete clusterpolicies.nvidia.com/gpu-cluster-policy in namespace"),
        (("change-stack", "--rollback", "--yes"), _cr_delete("gpuclusters"),
         "may not delete gpuclusters.nvidia.com/gpu-cluster in namespace")]
    for n, (argv, drop, named) in enumerate(refusals):
        mark = env.mark()
        narrow = _kubeconfig(env, _without_rules(drop), tmp_path, token=f"narrow-stack-{n}")
        done = crash.run(narrow, *argv)
        assert done.code == 3, done.output
        error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        assert len(error) == 1 and named in error[0], done.stderr
        assert env.writes(mark) == [], "a refused stack change wrote"
        assert [o["metadata"]["name"] for o in env.sim.store.list(
            kinds.CLUSTER_POLICY if n == 0 else kinds.GPU_CLUSTER)[0]] != []
        granted = _kubeconfig(env, RBAC.read_text(), tmp_path)
        mark = env.mark()
        done = crash.run(granted, *argv)  # docs/rbac.yaml whole: the same command goes through
        assert done.code == 0, done.output[-2000:]
        reviews = [r for r in env.sim.server.log.entries()[mark:]
                   if r.resource == "selfsubjectaccessreviews"]
        if n == 0:  # each permission asked once: the run's and the change's 3 up front (not
            # again by the phases it runs), and `list prometheuses` by the plan's read and
            # the run's cache
            assert len(reviews) == len(RUN_REQUIRED) + 3 + 2, len(reviews)
    assert [c["metadata"]["name"] for c in env.sim.store.list(kinds.CLUSTER_POLICY)[0]] == [
        "gpu-cluster-policy"]
    assert env.sim.store.list(kinds.GPU_CLUSTER)[0] == []


def _nodes_rule(rule: dict[str, Any]) -> bool:
    return "nodes" in rule["resources"]


def test_a_deleted_nodes_pods_are_left_aside_only_where_nodes_may_be_listed(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """A GPU node deleted before phase 3, its pods not yet collected (simulated time stands
    still: PodGC never comes), so the switched selector's slices leave them out: with
    docs/rbac.yaml phase 3 completes and `status` reads the Nodes' names and finds every stable
    name on every node left; with a token that may not list Nodes `status` asks once, is never
    refused a request, and its verdict says what it sees, as before."""
    env = fresh("gpucluster", nodes=3, insecure_port=False, monitor=False)
    granted = _kubeconfig(env, RBAC.read_text(), tmp_path)
    assert crash.run(granted, "apply", "--phase", "2", "--yes", "--settle", "0s").code == 0
    narrow = _kubeconfig(env, _without_rules(_nodes_rule), tmp_path, token="no-nodes")
    with env.sim.controllers.clock.held():
        env.sim.store.delete(kinds.NODE, None, "gpu-node-0003")
        done = crash.run(granted, "apply", "--phase", "3", "--yes", "--timeout", "30s",
                         "--settle", "0s")
        assert done.code == 0, done.output[-2000:]
        mark = env.mark()
        seen = crash.run(granted, "status", "-o", "json")
        assert seen.code == 0, seen.stdout[-2000:]
        lists = [r for r in env.sim.server.log.entries()[mark:] if r.resource == "nodes"]
        assert [(r.verb, r.code) for r in lists] == [("list", 200)]
        mark = env.mark()
        blind = crash.run(narrow, "status", "-o", "json")
        entries = env.sim.server.log.entries()[mark:]
    assert blind.code == 1, blind.stdout[-2000:]
    failed = {c["name"] for c in json.loads(blind.stdout)["verdict"]["checks"] if not c["ok"]}
    assert failed == {"nodes-covered/nvidia-dcgm", "nodes-covered/nvidia-dcgm-exporter"}
    assert [r for r in entries if r.code in (401, 403)] == []
    assert [r for r in entries if r.resource == "nodes"] == []
