"""The hand-over to a GPU Operator release that ships shared Services (docs/runbook.md,
"Upgrading to an operator with shared Services"), end to end with the operator imitation on and
the disruption monitor running: the preparation (`--prepare-for`) and what the tool refuses."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from dcgm_sim.controllers.sharedservices import managed
from dcgm_sim.store import Event
from migrator.model import kinds
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_guard import running_guard
from tests.helpers.kubeproxy import RoutedEndpoints

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
    status = env.cli("status", "-o", "json").json()  # said before the upgrade, by status too
    assert any(w.startswith("prepared for GPU Operator release shared-services, which deletes "
                            "Service/nvidia-dcgm-dra") for w in status["warnings"]), status

    back = env.cli("rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert back.code == 0, back.stdout + back.stderr
    for ds in DAEMONSETS:
        labels = env.sim.store.get(kinds.DAEMONSET, NS, ds)["spec"]["template"]["metadata"][
            "labels"]
        assert COMPONENT not in labels and "nvidia.com/gpu-operator.dcgm" not in str(labels)


STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")
SHARED = "nvidia.com/shared-service"


def _daemonsets(env: E2E) -> dict[str, str]:
    """DaemonSet → the component label value the release renders on it."""
    names = (DAEMONSETS if env.sim.stack == "gpucluster" else
             {"nvidia-dcgm": "nvidia-dcgm", "nvidia-dcgm-exporter": "nvidia-dcgm-exporter"})
    return {d: v for d, v in names.items()
            if env.sim.store.find(kinds.DAEMONSET, NS, d) is not None}


def _release_services(env: E2E) -> bool:
    """Both stable names are the release's shared Services and its -dra names are gone."""
    return (all((env.svc(n) or {}).get("metadata", {}).get("labels", {}).get(SHARED) == "true"
                for n in STABLE)
            and all(env.svc(n) is None for n in DAEMONSETS))


def _upgraded(env: E2E) -> bool:
    """The release runs: both stable names are its shared Services, the -dra names are gone,
    and every DaemonSet rolled out its re-rendered template."""
    if not _release_services(env):
        return False
    for ds in _daemonsets(env):
        d = env.ds(ds)
        st = d.get("status") or {}
        want = st.get("desiredNumberScheduled", 0)
        if not (st.get("observedGeneration", 0) >= d["metadata"]["generation"]
                and st.get("updatedNumberScheduled", 0) == want == st.get("numberAvailable", 0)
                and COMPONENT in d["spec"]["template"]["metadata"]["labels"]):
            return False
    return True


@contextmanager
def _overwrites_of_managed(env: E2E) -> Iterator[list[str]]:
    """Every commit an API request (the guard's, any CLI's) made to a stable Service that the
    release's own reconciler managed already (`managedDCGMService`), while the block runs. The
    store tells its subscribers of a commit on the committing thread: the sim's controllers'
    own, or the API server's thread for the request (socketserver names it after
    `process_request_thread`, as `threading.Thread` names a thread after its target)."""
    found: list[str] = []

    def saw(event: Event) -> None:
        name = event.object["metadata"]["name"]
        by_request = threading.current_thread().name.endswith("(process_request_thread)")
        if event.resource.kind == "Service" and name in STABLE and event.old is not None \
                and managed(event.old) and by_request:
            found.append(f"{event.type} Service/{name} at {event.resource_version}")

    env.sim.store.subscribe(saw)
    try:
        yield found
    finally:
        env.sim.store.unsubscribe(saw)


def _upgrade(env: E2E, *, migrated: bool, prepare: bool) -> RoutedEndpoints:
    """Upgrade to the release, the guard running: a migrated cluster (`apply --phase 3`) or
    an unmigrated one, prepared (`--prepare-for`, phase 1 only when unmigrated) or not. The
    answer holds the stable names' fewest endpoints kube-proxy routes them to (and fewest
    nodes hosting one: for Local, nodes whose own kube-proxy reaches one) in any committed
    state of their Services and EndpointSlices over the upgrade (tests/helpers/kubeproxy.py)."""
    args = ("--prepare-for", "shared-services") if prepare else ()
    phase = "3" if migrated else "1"
    if migrated or prepare:
        applied = env.cli("apply", "--phase", phase, "--yes", "--settle", "0s", *args)
        assert applied.code == 0, applied.stdout + applied.stderr
    low = RoutedEndpoints(STABLE, NS)
    with running_guard(env) as g, env.monitor.expected_outage(), low.follow(env.sim.store), \
            _overwrites_of_managed(env) as overwrites:
        env.until(lambda: g.guard.passes >= 1, 30, "guard")
        env.sim.set_operator_release("shared-services-fork")
        env.until(lambda: _upgraded(env), 300, "upgraded")
    # The guard stood down: it wrote nothing the release manages. (Before the release's
    # Service reconciler adopts a stable name, the re-rendered DaemonSets can reach the guard
    # first, which then holds the alias it still owns: a guarded write on the version it read,
    # which the reconciler's next update answers. The release's reconciler is a controller of
    # its own, so no order between the two is given.)
    assert overwrites == [], overwrites
    print(f"{env.sim.stack}, {'migrated' if migrated else 'unmigrated'}, "
          f"{'with' if prepare else 'without'} preparation: {low}")
    return low


CASES = [*((stack, migrated, prepare) for stack in ("gpucluster", "clusterpolicy")
           for migrated, prepare in ((True, False), (True, True), (False, True))),
         # Unmigrated GPUCluster clusters have no stable name before the upgrade to lose.
         ("clusterpolicy", False, False)]


@pytest.mark.parametrize(("stack", "migrated", "prepare"), CASES)
def test_upgrade_to_the_release_with_shared_services(
        e2e_factory: Callable[..., E2E], stack: str, migrated: bool, prepare: bool) -> None:
    """Without preparation the release's reconciler moves the selectors of the stable names
    it adopts to its component label at once, while the DaemonSets are still rolling to it:
    they drain. Prepared, every Ready pod already carries the label: the stable names lose
    only the pod restarts of the release's own rollout (maxUnavailable 1 per DaemonSet)."""
    nodes = 4
    env = e2e_factory(stack, nodes=nodes, operator_reconcile_seconds=2.0)
    low = _upgrade(env, migrated=migrated, prepare=prepare)
    if not prepare:
        assert min(low.lowest_routed.values()) < nodes - 1, low  # the hazard, measured
        return
    if migrated or stack == "clusterpolicy":  # the names existed before the upgrade
        assert low.lowest_routed == {n: nodes - 1 for n in STABLE}, low
        assert low.lowest_nodes["nvidia-dcgm"] == nodes - 1, low
    verify = env.cli("verify", "-o", "json")
    doc = verify.json()
    assert verify.code == 0, ([c for c in doc["verdict"]["checks"] if not c["ok"]],
                              [g for p in doc["phases"] for g in p["gates"] if not g["ok"]])
    if not migrated:
        return
    # After the hand-over: apply has nothing to do; rollback leaves the release's objects
    # alone, saying why, and records the tool's steps on them as handed over; with no state
    # at all the verdict gives the same answer.
    mark = env.mark()
    again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert again.code == 0, again.stdout + again.stderr
    assert env.writes(since=mark) == []
    before = {n: env.svc(n) for n in STABLE}
    back = env.cli("rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert back.code == 0, back.stdout + back.stderr
    assert "handed over to the GPU Operator" in back.stdout + back.stderr, back.stdout
    retired = [h for h in env.state()["history"] if h.get("event") == "retired"]
    assert retired and all("handed over" in h["reason"] for h in retired), retired
    if stack == "gpucluster":  # the aliases' records (phases 2 and 3) and phase 1's labels
        assert {h["step"] for h in retired} >= {"alias/service/nvidia-dcgm",
                                                "labels/daemonset/nvidia-dcgm-dra"}, retired
    assert {n: env.svc(n) for n in STABLE} == before
    for ds, value in _daemonsets(env).items():  # the release's label stays: it selects by it
        assert env.ds(ds)["spec"]["template"]["metadata"]["labels"][COMPONENT] == value
    env.sim.store.delete(kinds.CONFIGMAP, NS, "dcgm-migrate-state")
    verify = env.cli("verify", "-o", "json")
    stateless = verify.json()
    assert stateless["verdict"]["ok"] and [c["name"] for c in stateless["verdict"]["checks"]] == [
        c["name"] for c in doc["verdict"]["checks"]], stateless["verdict"]
    # The Services the release manages are the operator's now, not a lost state's marks.
    assert stateless["lostState"] == [] and verify.code == 0, stateless["warnings"]


# ---- mixed and both clusters (both CRs; their nodes split, or shared) ------------------------

ALL_DAEMONSETS = {**DAEMONSETS, "nvidia-dcgm": "nvidia-dcgm",
                  "nvidia-dcgm-exporter": "nvidia-dcgm-exporter"}
GENERATION = "pod-template-generation"
# The template generation a pod of the current template carries (`util.GetTemplateGeneration`,
# kubernetes pkg/controller/daemon/util/daemonset_util.go): the server bumps it only when the
# pod template changes (`PrepareForUpdate`, pkg/registry/apps/daemonset/strategy.go), while
# `metadata.generation` counts every spec change, phase 1's updateStrategy hold and restore
# included.
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"


def _serving(env: E2E) -> dict[str, set[str]]:
    """Component label value -> the nodes where a Ready pod of its DaemonSet's current template
    carries it (a pod left Pending by the release's anti-affinity serves no node)."""
    out: dict[str, set[str]] = {v: set() for v in ALL_DAEMONSETS.values()}
    for ds_name, value in ALL_DAEMONSETS.items():
        ds = env.sim.store.find(kinds.DAEMONSET, NS, ds_name)
        if ds is None:
            continue
        for pod in env.pods(ds_name):
            labels = pod["metadata"].get("labels") or {}
            ready = any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (pod.get("status") or {}).get("conditions") or [])
            if (ready and labels.get(COMPONENT) == value
                    and labels.get(GENERATION)
                    == ds["metadata"]["annotations"][TEMPLATE_GENERATION]):
                out[value].add(pod["spec"]["nodeName"])
    return out


def _pending(env: E2E) -> list[dict[str, Any]]:
    """Pods the scheduler left Pending (no node, PodScheduled False)."""
    return [p for ds in ALL_DAEMONSETS for p in env.pods(ds) if not p["spec"].get("nodeName")]


def _handed_over(env: E2E, nodes: int) -> bool:
    """The release runs: the stable names are its shared Services, the -dra names are gone,
    every DaemonSet observed its re-rendered template, and on every node a Ready pod of the
    current template carries each component label."""
    if not _release_services(env):
        return False
    for ds_name in ALL_DAEMONSETS:
        ds = env.sim.store.find(kinds.DAEMONSET, NS, ds_name)
        if ds is not None and (
                (ds.get("status") or {}).get("observedGeneration", 0) < ds["metadata"]["generation"]
                or COMPONENT not in ds["spec"]["template"]["metadata"]["labels"]):
            return False
    return all(len(n) == nodes for n in _serving(env).values())


def _hand_over_shared_nodes(env: E2E, nodes: int) -> RoutedEndpoints:
    """Migrate (phases 1-3), prepare, then switch the release on with the guard running; the
    stable names' fewest endpoints kube-proxy routes them to, and nodes hosting one, over the
    upgrade (as `_upgrade`)."""
    for extra in ((), ("--prepare-for", "shared-services")):
        applied = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", *extra)
        assert applied.code == 0, applied.stdout + applied.stderr
    low = RoutedEndpoints(STABLE, NS)
    with running_guard(env) as g, env.monitor.expected_outage(), low.follow(env.sim.store):
        env.until(lambda: g.guard.passes >= 1, 30, "guard")
        env.sim.set_operator_release("shared-services-fork")
        try:
            env.until(lambda: _handed_over(env, nodes), 300, "handed over")
        except AssertionError as err:
            raise AssertionError(f"{err}: nodes served {_serving(env)}, pending "
                                 f"{[p['metadata']['name'] for p in _pending(env)]}") from None
        # Whatever the scheduler left Pending stays so (the release's own anti-affinity):
        # a minute on, every node is still served, every stable name still there.
        settled = env.sim.clock.now()
        env.until(lambda: env.sim.clock.now() - settled > 60, 120, "a minute on")
        assert _handed_over(env, nodes), _serving(env)
        # The release's Services select both stacks' pods: the guard's slices are gone.
        assert not [sl["metadata"]["name"] for sl in env.sim.store.list(
            kinds.ENDPOINTSLICE, NS)[0] if (sl["metadata"].get("labels") or {}).get(
            "endpointslice.kubernetes.io/managed-by") == "dcgm-migrate"]
    print(f"{env.sim.stack}, migrated, prepared: {low}, pending after the upgrade "
          f"{sorted(p['metadata']['name'] for p in _pending(env))}")
    return low


@pytest.mark.parametrize("stack", ["mixed", "both"])
def test_hand_over_on_mixed_and_both_clusters_keeps_every_node_reached(
        e2e_factory: Callable[..., E2E], stack: str) -> None:
    """Mixed: each node runs one stack, both DaemonSets of a component roll at once (each
    within its own maxUnavailable 1), so a stable name may miss one node of each stack. Both:
    the release's required anti-affinity on the component label lets one pod of a component
    run per node, and `--prepare-for` labels only the stack that keeps it, so its pods serve
    the stable names throughout and the other stack's new pods stay Pending."""
    nodes = 4
    env = e2e_factory(stack, operator_release=FUTURE, nodes=nodes, operator_reconcile_seconds=2.0)
    low = _hand_over_shared_nodes(env, nodes)
    lost = 2 if stack == "mixed" else 1  # nodes the release's own rollouts take at once
    assert min(low.lowest_nodes.values()) >= nodes - lost, low.lowest_nodes
    assert min(low.lowest_routed.values()) >= nodes - lost, low
    pending = _pending(env)
    if stack == "mixed":
        assert pending == [], pending
        # Nothing depends on a guard any more: verify is green with none running.
        verify = env.cli("verify", "-o", "json")
        assert verify.code == 0, [c for c in verify.json()["verdict"]["checks"] if not c["ok"]]
        return
    # The GPUCluster stack's new pods, one per component, on the node its rollout reached
    # first; the ClusterPolicy's (prepared) pods serve every node.
    assert sorted(p["metadata"]["labels"]["app"] for p in pending) == sorted(DAEMONSETS), pending
    for pod in pending:
        cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert cond["status"] == "False" and cond["reason"] == "Unschedulable", cond
