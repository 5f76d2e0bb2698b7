"""Clusters running both stacks (docs/runbook.md, "Clusters running both stacks"), end to end with
both operator imitations on, the guard running and the disruption monitor sampling every
Service: after `apply --phase 3` the stable names reach the DCGM / exporter pod of every GPU node
of either stack (per node for Local), and keep doing so through both operators' reconciles, CR
edits of either CR, a node moving from one stack to the other, adding the second CR to a
migrated cluster and deleting either CR; the tool writes nothing an operator owns.

"Reach" is what a consumer gets: where each node's kube-proxy sends the name's cluster-IP traffic,
port by port, as tests/helpers/kubeproxy.py computes it from the Services and EndpointSlices
listed through the API (merged by name, ports matched by name and protocol, duplicates resolved,
internalTrafficPolicy Local kept on the node), never the tool's own slices read back."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from dcgm_sim.controllers.rendering import (
    DEPLOY_LABELS,
    MODE_DEVICE_PLUGIN,
    MODE_DRA,
    MODE_LABEL,
)
from dcgm_sim.seed import seeded_cr
from migrator.kube.client import Kube
from migrator.model import kinds, objects
from tests.conftest import edit_cr, edit_object
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_guard import (
    COEXISTENCE_RULES,
    GUARD_USER,
    Running,
    _guard_kubeconfig,
    running_guard,
)
from tests.helpers import crash
from tests.helpers.kubeproxy import ApiView, Routing
from tests.helpers.oracle import DiscoveryOracle
from tests.helpers.readiness import SERVICE_NAME, ready_by_node

RECONCILE = 2.0  # simulated seconds between the operator imitations' resyncs
STABLE = {"nvidia-dcgm": ("nvidia-dcgm", "nvidia-dcgm-dra"),
          "nvidia-dcgm-exporter": ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra")}
OPERATOR_OWNED = ("nvidia-dcgm", "nvidia-dcgm-exporter", "nvidia-dcgm-dra",
                  "nvidia-dcgm-exporter-dra")


_VIEWS: dict[str, ApiView] = {}


@pytest.fixture(autouse=True)
def _close_views() -> Iterator[None]:
    yield
    while _VIEWS:
        _VIEWS.popitem()[1].close()


def _proxy(env: E2E) -> ApiView:
    """The cluster as kube-proxy lists it, through the sim's API (tests/helpers/kubeproxy.py)."""
    if env.sim.kubeconfig not in _VIEWS:
        _VIEWS[env.sim.kubeconfig] = ApiView(env.sim.kubeconfig)
    return _VIEWS[env.sim.kubeconfig]


def _slices(env: E2E) -> list[dict[str, Any]]:
    return env.sim.store.list(kinds.ENDPOINTSLICE, NS)[0]


def _gpu_nodes(env: E2E, daemonsets: tuple[str, ...]) -> dict[str, set[str]]:
    """Node → the Ready pods of these DaemonSets on it."""
    out: dict[str, set[str]] = {}
    for pod in env.sim.store.list(kinds.POD, NS)[0]:
        owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("name")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        if owner in daemonsets and ready and not pod["metadata"].get("deletionTimestamp"):
            out.setdefault(pod["spec"].get("nodeName", ""), set()).add(pod["metadata"]["name"])
    return out


def _local(env: E2E, name: str) -> bool:
    return ((env.svc(name) or {}).get("spec") or {}).get("internalTrafficPolicy") == "Local"


Routes = dict[str, dict[str, Routing]]  # client node → port → where its kube-proxy sends it


def _stray(name: str, by_client: Routes, live: set[str], skip: tuple[str, ...]) -> list[str]:
    """Routes of `name` that may end at a pod outside `live`."""
    return [f"{name}:{port} from {client} may go to {sorted(r.possible_pods - live)}"
            for client, by_port in by_client.items() for port, r in by_port.items()
            if port not in skip and r.possible_pods - live]


def _missed(name: str, by_client: Routes, want: dict[str, set[str]], local: bool,
            skip: tuple[str, ...]) -> list[str]:
    """Nodes of `want` that some client's kube-proxy does not surely reach for `name`: the
    node itself for a Local name, every client node otherwise."""
    return [f"{name}:{port} from {client} reaches none of {sorted(pods)} on {node} "
            f"(routes to {sorted(r.possible_pods)})"
            for node, pods in want.items() for client in ([node] if local else by_client)
            for port, r in by_client.get(client, {}).items()
            if port not in skip and not r.pods & pods]


def _unreached(env: E2E, skip: tuple[str, ...] = ()) -> list[str]:
    """What a consumer of a stable name misses, as every node's kube-proxy routes it (empty when
    nothing): for every port of the name but those in `skip`, each node running a Ready pod of
    the name's own kind (of either stack) is reached by such a pod on that node — from that
    node itself for an internalTrafficPolicy Local name, from every node otherwise — and no
    node's kube-proxy may route to a pod that is not one of them (gone, terminating, not Ready
    or of the other kind)."""
    routing = _proxy(env).reach(NS, STABLE)  # the slices before the pods: a pod that goes
    out = []  # in between shows up as routed to while gone, never hidden
    for name, daemonsets in STABLE.items():
        want = _gpu_nodes(env, daemonsets)
        if not want or not any(routing[name].values()):
            out.append(f"{name}: Ready pods on {sorted(want)}, kube-proxy rules "
                       f"{any(routing[name].values())}")
            continue
        out += _stray(name, routing[name], set().union(*want.values()), skip)
        out += _missed(name, routing[name], want, _local(env, name), skip)
    return out


def _reaches_every_node(env: E2E) -> bool:
    """Every stable name reaches its own kind's Ready pod on every node that runs one (of
    either stack), per node for Local, and routes to no other pod (`_unreached`)."""
    return not _unreached(env)


def _verify_failures(env: E2E) -> list[str]:
    """`verify`'s failed verdict checks and gates (empty when it exits 0)."""
    res = env.cli("verify", "-o", "json")
    doc = res.json()
    failed = [f"{c['name']}: {c['detail']}" for c in doc["verdict"]["checks"] if not c["ok"]]
    failed += [f"{g['name']}: {g['detail']}" for p in doc["phases"] for g in p["gates"]
               if not g["ok"]]
    assert (res.code == 0) == (not failed), (res.code, failed)
    return failed


def _settled(env: E2E) -> bool:
    """Nothing is rolling or leaving: every DaemonSet rolled out, no pod terminating, and
    the stable names reach every node."""
    pods = env.sim.store.list(kinds.POD, NS)[0]
    daemonsets = [d for ds in STABLE.values() for d in ds
                  if env.sim.store.find(kinds.DAEMONSET, NS, d) is not None]
    return (not any(p["metadata"].get("deletionTimestamp") for p in pods)
            and _rolled(env, *daemonsets) and _reaches_every_node(env))


def _rolled_and_settled(env: E2E, daemonsets: tuple[str, ...]) -> bool:
    return _rolled(env, *daemonsets) and _settled(env)


def _moved(env: E2E, node: str, here: str, gone: str) -> bool:
    """The node runs DaemonSet `here`'s pod, no longer `gone`'s, and the node's kube-proxy
    routes `nvidia-dcgm` there to exactly that pod, on every port."""
    routed = _proxy(env).reach(NS, ["nvidia-dcgm"], [node])["nvidia-dcgm"][node]
    now = _gpu_nodes(env, (here,))
    return (_settled(env) and node in now and node not in _gpu_nodes(env, (gone,))
            and bool(routed) and all(
                {e.pod for e in r.possible if e.node == node} == r.pods == now[node]
                for r in routed.values()))


def _until(env: E2E, predicate: Callable[[], bool], sim_seconds: float, what: str) -> float:
    """`E2E.until`, naming what kube-proxy does not reach when it fails."""
    return env.until(predicate, sim_seconds, what, lambda: f"kube-proxy: {_unreached(env)}")


def _operator_object_writes(env: E2E, since: int) -> list[str]:
    """The tool's writes (CLI and guard) to objects an operator owns, since `since`."""
    out = []
    for e in env.writes(since):
        if e.resource in ("services", "daemonsets") and e.name in (
                *OPERATOR_OWNED, *(d for ds in STABLE.values() for d in ds)):
            svc = env.svc(e.name) if e.resource == "services" else None
            owner = ((svc or {}).get("metadata", {}).get("ownerReferences") or [{}])[0]
            if e.resource == "daemonsets" or owner.get("controller"):
                out.append(f"{e.verb} {e.resource}/{e.name} by {e.user}")
    return out


def _patch_cr(env: E2E, kind: kinds.Kind, edit: Callable[[dict[str, Any]], None]) -> None:
    edit_cr(env.sim.store, kind, lambda cr: edit(cr["spec"]))


def _rolled(env: E2E, *names: str) -> bool:
    for name in names:
        ds = env.sim.store.find(kinds.DAEMONSET, NS, name)
        if ds is None:
            return False
        st = ds.get("status") or {}
        want = st.get("desiredNumberScheduled", 0)
        if not (st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled", 0) == want == st.get("numberAvailable", 0)):
            return False
    return True


MOVED = ("gpu-node-0001", "gpu-node-0002")  # the nodes a test moves to the ClusterPolicy
OTHERS = ("gpu-node-0003", "gpu-node-0004")  # the nodes that stay on the GPUCluster


def _ready_on(env: E2E, services: tuple[str, ...], nodes: tuple[str, ...]) -> list[str]:
    """The Ready endpoints of `services` on `nodes` (as `service@node`)."""
    return [f"{service}@{node}" for sl in _slices(env)
            if (service := sl["metadata"]["labels"].get(SERVICE_NAME)) in services
            for node, ready in ready_by_node(sl).items() if ready and node in nodes]


def _move_node(env: E2E, node_name: str, to: str) -> None:
    """Move one node to the other stack, as an admin relabels it."""
    def move(node: dict[str, Any]) -> None:
        labels = node["metadata"]["labels"]
        other = "clusterpolicy" if to == "gpucluster" else "gpucluster"
        for key in DEPLOY_LABELS[other]:
            labels.pop(key, None)
        labels.update({k: "true" for k in DEPLOY_LABELS[to]})
        labels[MODE_LABEL] = MODE_DRA if to == "gpucluster" else MODE_DEVICE_PLUGIN

    edit_object(env.sim.store, kinds.NODE, None, node_name, move)


def _shared_slices(env: E2E) -> list[dict[str, Any]]:
    return [sl for sl in _slices(env) if sl["metadata"]["labels"].get(
        objects.MANAGED_BY_LABEL) == "dcgm-migrate"]


def _assert_used_under_the_role(env: E2E, rules: set[tuple[str, str, None]]) -> None:
    """The guard ran under the Role of docs/guard.yaml only, nothing was refused, and it used
    these of the Role's coexistence rules (tests/e2e/test_guard.py's COEXISTENCE_RULES)."""
    assert rules <= COEXISTENCE_RULES
    mine = [e for e in env.sim.server.log.entries() if e.user == GUARD_USER]
    assert mine and not [e for e in mine if e.code == 403]
    assert {(e.verb, e.resource, None) for e in mine} >= rules


def test_mixed_stable_names_reach_every_node_through_reconciles_edits_and_node_moves(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    applied = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert applied.code == 0, applied.stdout + applied.stderr
    assert _unreached(env)  # the operator's Services select only their own pods
    kube = Kube.connect(_guard_kubeconfig(env, tmp_path))  # the Role of docs/guard.yaml only
    with running_guard(env, kube=kube):
        took = _until(env, lambda: _reaches_every_node(env), 30, "shared")
        print(f"guard shared the stable names within {took:.1f} simulated s")
        assert _verify_failures(env) == []

        # Ten reconcile periods of both operators: no write to anything they own, and no
        # churn of the shared slices either (steady state writes nothing).
        since = env.mark()
        start = env.sim.clock.now()
        _until(env, lambda: env.sim.clock.now() - start >= 10 * RECONCILE, 60, "ten periods")
        assert _operator_object_writes(env, since) == []
        assert [e for e in env.writes(since) if e.user != "system:kube-controller-manager"
                and e.resource == "endpointslices"] == []
        assert _unreached(env) == []

        # A CR edit of either CR re-renders and rolls its DaemonSets; the stable names follow.
        for kind, daemonsets, edit in (
                (kinds.CLUSTER_POLICY, ("nvidia-dcgm", "nvidia-dcgm-exporter"),
                 lambda s: s["dcgmExporter"].update(version="4.5.2-4.8.1-ubuntu22.04")),
                (kinds.GPU_CLUSTER, STABLE["nvidia-dcgm"][1:] + STABLE["nvidia-dcgm-exporter"][1:],
                 lambda s: s["dcgmExporter"].update(version="4.5.2-4.8.1-distroless"))):
            with env.monitor.rolling():  # the operator's rollout: its maxUnavailable
                _patch_cr(env, kind, edit)
                time.sleep(0.2)
                _until(env, partial(_rolled_and_settled, env, daemonsets), 120,
                       f"{kind.kind} edit")
            # The re-render dropped the common labels: apply puts them back, rolling again,
            # with phase 1's budget (maxUnavailable) until the guard's slices followed the
            # last new pod (they are another controller's: they lag the run's own gates).
            with env.monitor.rolling():
                again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
                assert again.code == 0, again.stdout + again.stderr
                _until(env, lambda: _settled(env), 120, "labelled again")

        # A node moves from the ClusterPolicy stack to the GPUCluster stack and back.
        since = env.mark()
        for to in ("gpucluster", "clusterpolicy"):
            with env.monitor.rolling():  # the node's own pods stop and start
                _move_node(env, "gpu-node-0001", to)
                here, gone = (("nvidia-dcgm-dra", "nvidia-dcgm") if to == "gpucluster"
                              else ("nvidia-dcgm", "nvidia-dcgm-dra"))
                _until(env, partial(_moved, env, "gpu-node-0001", here, gone), 120,
                       f"move to {to}")
            for name in OPERATOR_OWNED:  # the node left one stack's own names for good
                env.monitor.forget(name)
        assert _operator_object_writes(env, since) == []
        failures = _verify_failures(env)
        assert failures == [], "\n".join(failures)
    # The guard stopped (its Lease released): the names depend on it, and verify says so.
    assert [f.split(":")[0] for f in _verify_failures(env)] == ["guard-live/guard"]
    _assert_used_under_the_role(env, {("watch", "endpointslices", None),
                                      ("create", "endpointslices", None),
                                      ("update", "endpointslices", None)})


@pytest.mark.parametrize("stack", ["mixed", "both"])
def test_deleting_either_cr_keeps_the_names_while_a_stack_needs_them(
        e2e_factory: Callable[..., E2E], tmp_path: Path, stack: str) -> None:
    env = e2e_factory(stack, operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with running_guard(env, kube=Kube.connect(_guard_kubeconfig(env, tmp_path))) as g:
        _until(env, lambda: _reaches_every_node(env), 30, "shared")
        # The ClusterPolicy goes: garbage collection takes its Services; the guard creates
        # the aliases again at once and deletes its slices (their owner is its Lease: a name
        # that is the tool's alias again needs none).
        with env.monitor.replacing(*STABLE):
            cp = env.sim.store.list(kinds.CLUSTER_POLICY)[0][0]
            env.sim.store.delete(kinds.CLUSTER_POLICY, None, cp["metadata"]["name"])
            took = _until(env, lambda: all(
                (env.svc(n) or {}).get("metadata", {}).get("labels", {}).get(
                    "app.kubernetes.io/managed-by") == "dcgm-migrate" for n in STABLE)
                and _reaches_every_node(env) and not _shared_slices(env), 60,
                "aliases again")
        print(f"aliases created again within {took:.1f} simulated s; gaps {env.monitor.gaps}")
        assert _shared_slices(env) == []
        for name in STABLE:
            svc = env.svc(name)
            assert svc is not None
            refs = svc["metadata"]["ownerReferences"]
            assert [(r["kind"], r["controller"]) for r in refs] == [("GPUCluster", False)]
        assert any(line.startswith("create Service/nvidia-dcgm") for line in g.log)
        # The stack changed (mixed → gpucluster): apply re-plans and switches the aliases,
        # which phase 3 could not do while the ClusterPolicy owned the names.
        again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
        assert again.code == 0, again.stdout + again.stderr
        for name, (_cp, dra) in STABLE.items():
            assert (env.svc(name) or {})["spec"]["selector"] != {"app": dra}
        failures = _verify_failures(env)
        assert failures == [], "\n".join(failures)
    _assert_used_under_the_role(env, {("create", "services", None)})


def test_deleting_the_gpucluster_removes_only_the_shared_slices(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with running_guard(env, kube=Kube.connect(_guard_kubeconfig(env, tmp_path))):
        _until(env, lambda: _reaches_every_node(env), 30, "shared")
        before = {n: copy.deepcopy(env.svc(n)) for n in STABLE}
        # the GPUCluster nodes leave the names; its -dra Services go with it (its finalizer
        # drains their pods first)
        with env.monitor.replacing(*STABLE, "nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
            gc = env.sim.store.list(kinds.GPU_CLUSTER)[0][0]
            env.sim.store.delete(kinds.GPU_CLUSTER, None, gc["metadata"]["name"])
            _until(env, lambda: not _shared_slices(env) and _reaches_every_node(env), 60,
                   "unshared")
        for name in STABLE:  # the operator's Services, untouched: same uid, clusterIP, spec
            now = env.svc(name)
            was = before[name]
            assert now is not None and was is not None
            assert now["metadata"]["uid"] == was["metadata"]["uid"]
            assert now["spec"] == was["spec"]
    _assert_used_under_the_role(env, {("delete", "endpointslices", None)})


def _clusterpolicy_added(env: E2E, g: Running) -> None:
    """On a migrated GPUCluster cluster, with the guard running: two nodes go to the
    ClusterPolicy stack and the CR is created. Its operator replaces the tool's aliases whole
    (its selector, labels, ownerReference), and the guard shares the -dra pods of the other
    two nodes into them. Prints how long each took."""
    _until(env, lambda: g.guard.passes >= 1, 30, "first pass")
    with env.monitor.replacing(*OPERATOR_OWNED):  # two nodes leave the -dra names
        for node in MOVED:
            _move_node(env, node, "clusterpolicy")
        env.sim.store.create(kinds.CLUSTER_POLICY, seeded_cr("clusterpolicy"))
        taken = _until(env, lambda: all(
            ((env.svc(n) or {}).get("metadata", {}).get("ownerReferences") or [{}])[0]
            .get("kind") == "ClusterPolicy" for n in STABLE), 60, "taken over")
        t0 = env.sim.clock.now()
        _until(env, lambda: _rolled(env, *STABLE) and _reaches_every_node(env), 120,
               "reaches every node")
        reaction = env.sim.clock.now() - t0
        # The window closes once the moved nodes have left the -dra names too: their
        # baselines restart after it, and a -dra pod still Ready there would set them high.
        _until(env, lambda: not _ready_on(env, OPERATOR_OWNED[2:], MOVED), 60, "-dra left")
    print(f"taken over after {taken:.1f} s; every node reached again "
          f"{reaction:.1f} simulated s later; gaps {env.monitor.gaps}")
    assert _shared_slices(env)


def test_a_clusterpolicy_added_to_a_migrated_cluster_takes_the_names_and_the_guard_shares(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE,
                      time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with running_guard(env) as g:
        _clusterpolicy_added(env, g)
        # The stack changed (gpucluster → mixed): apply labels the new DaemonSets.
        again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
        assert again.code == 0, again.stdout + again.stderr
        _until(env, lambda: _settled(env), 120, "labelled")
        failures = _verify_failures(env)
        assert failures == [], "\n".join(failures)
    records = [s for p in env.state()["phases"] for s in p["steps"]
               if s["step"].get("service") in STABLE]
    assert len(records) == 4 and all(r["status"] == "replaced" for r in records), records


def test_a_guard_pass_while_apply_reruns_the_alias_phase_keeps_the_shared_nodes_served(
        e2e_factory: Callable[..., E2E]) -> None:
    """The stack changed (gpucluster → mixed), so `apply` re-runs the alias phase, its record
    in progress meanwhile. A guard pass at that moment (here the run is held right after it
    recorded the phase in progress) keeps the slices it shares: before, it deleted them, and
    the two GPUCluster nodes lost both stable names until the phase completed and the next
    pass shared them again. The run then completes; the disruption monitor holds the names
    to their baselines throughout."""
    env = e2e_factory("gpucluster", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with running_guard(env) as g:
        _clusterpolicy_added(env, g)
    shared = {objects.name(sl) for sl in _shared_slices(env)}
    served = sorted(_ready_on(env, tuple(STABLE), OTHERS))
    assert served == sorted(f"{n}@{node}" for n in STABLE for node in OTHERS), served

    armed = threading.Event()

    def hold_once_the_alias_phase_runs(event: Any) -> None:
        """Within the commit of the state save: the answer of that very save is held."""
        if (event.resource.key == kinds.CONFIGMAP.key
                and objects.name(event.object) == "dcgm-migrate-state"
                and any(p["number"] == 2 and p["status"] == "in-progress" for p in json.loads(
                    event.object["data"]["state.json"])["phases"])):
            env.sim.store.unsubscribe(hold_once_the_alias_phase_runs)
            env.sim.server.faults.update(hang_nth_write=1, hang_write_of="update configmaps")
            armed.set()

    env.sim.store.subscribe(hold_once_the_alias_phase_runs)
    rerun = crash.start(env.sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s")
    try:
        assert armed.wait(60) and env.sim.server.faults.wait_held(10), "no alias phase"
        once = env.cli("guard", "--once", "-o", "json")
        assert once.code == 0, once.stderr
        assert {objects.name(sl) for sl in _shared_slices(env)} == shared
        assert sorted(_ready_on(env, tuple(STABLE), OTHERS)) == served
    finally:
        env.sim.server.faults.release_held()
    code, out, err = crash.finish(rerun)
    assert code == 0, out + err
    assert "phase 2 (alias) drifted: stack changed to mixed" in err


def test_both_stacks_on_every_node_share_nothing_and_warn_of_double_reporting(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("both", operator_release=FUTURE, nodes=3,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    plan = env.cli("plan", "-o", "json")
    assert any("reported twice" in w for w in plan.json()["warnings"])
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with running_guard(env) as g:
        _until(env, lambda: g.guard.passes >= 2, 30, "passes")
        assert _unreached(env) == []  # the ClusterPolicy's pods are on every node
        assert _shared_slices(env) == []
    verify = env.cli("verify", "-o", "json")
    failed = {c["name"]: c for c in verify.json()["verdict"]["checks"] if not c["ok"]}
    assert verify.code == 1 and set(failed) == {"one-exporter-per-node/*"}, failed
    assert "nvidia.com/gpu.deploy.dcgm-exporter" in failed["one-exporter-per-node/*"]["fix"]


def test_conflicting_exporter_service_settings_keep_the_owners_and_are_reported(
        e2e_factory: Callable[..., E2E]) -> None:
    """The rule: the Service that owns the stable name keeps its configuration; a port the
    GPUCluster pods do not serve is left out of the shared slices and reported."""
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4, operator_reconcile_seconds=None)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    def debug_port(svc: dict[str, Any]) -> None:
        svc["spec"]["ports"].append({"name": "debug", "port": 9401, "targetPort": "debug",
                                     "protocol": "TCP"})
        svc["spec"]["sessionAffinity"] = "ClientIP"

    edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter", debug_port)
    once = env.cli("guard", "--once", "-o", "json")
    assert once.code == 0, once.stderr
    shared = {s["name"]: s for s in once.json()["shared"]}
    conflicts = shared["nvidia-dcgm-exporter"]["conflicts"]
    assert any(c.startswith("port debug") for c in conflicts), conflicts
    assert any(c.startswith("sessionAffinity") for c in conflicts), conflicts
    assert shared["nvidia-dcgm"]["conflicts"] == []
    sl = next(s for s in _shared_slices(env)
              if s["metadata"]["labels"][objects.SERVICE_NAME_LABEL] == "nvidia-dcgm-exporter")
    assert [(p["name"], p["port"]) for p in sl["ports"]] == [("gpu-metrics", 9400)]
    # What kube-proxy makes of it: the shared port reaches every node's exporter, and the
    # port the GPUCluster pods do not serve never sends traffic to one of them.
    _until(env, lambda: _unreached(env, skip=("debug",)) == [], 60, "gpu-metrics shared")
    dra = set().union(*_gpu_nodes(env, ("nvidia-dcgm-exporter-dra",)).values())
    routed = _proxy(env).reach(NS, ["nvidia-dcgm-exporter"])["nvidia-dcgm-exporter"]
    assert dra and not [(client, r.possible_pods & dra) for client, by_port in routed.items()
                        if (r := by_port["debug"]).possible_pods & dra]
    kept = env.svc("nvidia-dcgm-exporter")
    assert kept is not None and kept["spec"]["sessionAffinity"] == "ClientIP"  # its own


@pytest.mark.parametrize("stack", ["mixed", "both"])
def test_one_scrape_path_per_exporter_pod_with_both_stacks(
        e2e_factory: Callable[..., E2E],
        discovery_oracle: Callable[..., DiscoveryOracle], stack: str) -> None:
    """VictoriaMetrics' Kubernetes discovery (the Prometheus chart's jobs) against the sim
    after phase 3 with the guard's shared slices in place: every exporter pod is one target
    per mechanism, and the tool's slices (read by `role: endpointslice` only) add none."""
    env = e2e_factory(stack, operator_release=FUTURE, nodes=4, operator_reconcile_seconds=None,
                      tls=True)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    assert env.cli("guard", "--once").code == 0
    oracle = discovery_oracle(env.sim)
    pods = {p["metadata"]["name"] for p in env.sim.store.list(kinds.POD, NS)[0]
            if p["metadata"]["labels"].get("app", "").startswith("nvidia-dcgm-exporter")}
    by_pod = oracle.targets_per_pod(NS)
    for pod in pods:
        jobs = [(t["job"], t["service"]) for t in by_pod.get(pod, [])]
        assert len(jobs) == 1 and jobs[0][0].startswith("kubernetes-"), (pod, jobs)


def test_rolling_phase_2_back_takes_the_sharing_back(e2e_factory: Callable[..., E2E]) -> None:
    """The shared slices exist only while phase 2 is completed: after its rollback the guard's
    next pass deletes them, and nothing else of the operators' changes."""
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4, operator_reconcile_seconds=None)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    assert env.cli("guard", "--once").code == 0
    assert len(_shared_slices(env)) == 2 and _unreached(env) == []
    back = env.cli("rollback", "--phase", "2", "--yes", "--settle", "0s")
    assert back.code == 0, back.stdout + back.stderr
    with env.monitor.replacing(*STABLE):  # the GPUCluster nodes leave the names on purpose
        once = env.cli("guard", "--once", "-o", "json")
    assert once.code == 0 and once.json()["shared"] == []
    assert sorted(w["action"] for w in once.json()["sliceWrites"]) == ["delete", "delete"]
    assert _shared_slices(env) == []
