"""The default operator imitation is the shipped GPU Operator (NVIDIA/gpu-operator a22dbf671,
v26.7.0 on; dcgm_sim/controllers/releases.py), observed through the official client over HTTP:
a ClusterPolicy and a GPUCluster refuse each other with upstream's status and messages, the
refused GPUCluster renders nothing and the ClusterPolicy reconciles no operand until the
GPUCluster is gone; a deleted GPUCluster stays until its DCGM pods are gone (its finalizer);
GPUCluster cleanup spares nothing carrying its state label; each controller
reconciles at upstream's cadence (the ClusterPolicy on events only while ready, the GPUCluster
every minute). Times are simulated seconds from the sim's clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim import kinds
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.store import Event
from dcgm_sim_cli import sim as sim_cmd
from tests.sim.conftest import Raw, make_client

NS = "gpu-operator"
STATE = "nvidia.com/gpu-operator.state"
CP = ("nvidia.com", "v1", "clusterpolicies")
GC = ("nvidia.com", "v1alpha1", "gpuclusters")
# controllers/gpucluster_controller.go `validatePrerequisites` and
# controllers/clusterpolicy_controller.go `Reconcile` at a22dbf671, word for word.
REFUSED = ('A ClusterPolicy CR "gpu-cluster-policy" exists; a ClusterPolicy CR and GPUCluster '
           'CR may not exist at the same time')
CONFLICT = ('conflicting GPUCluster resource "gpu-cluster" detected; ClusterPolicy and '
            'GPUCluster cannot co-exist')
DRA = ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")
FINALIZER = "gpucluster.nvidia.com/dra-resourceclaim"  # gpucluster_controller.go at a22dbf671
SHARED = ("nvidia-dcgm", "nvidia-dcgm-exporter")
Obj = dict[str, Any]
Seen = tuple[str, Any, list[str] | None]  # (event type, name, finalizers) of one commit


class Api:
    """The official client against one sim (default release, upstream's cadence)."""

    def __init__(self, sim: SimCluster, api: client.ApiClient) -> None:
        self.sim = sim
        self.core: Any = client.CoreV1Api(api)  # Any: plain-dict bodies, always-filled fields
        self.apps: Any = client.AppsV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)

    def now(self) -> float:
        return self.sim.clock.now()

    def wait(self, predicate: Callable[[], object], sim_seconds: float, what: str) -> float:
        """Poll until `predicate` holds; the simulated time it took. Fails after `sim_seconds`
        (plus a real-time margin for a loaded machine)."""
        start, deadline = self.now(), time.monotonic() + self.sim.clock.to_real(sim_seconds) + 10
        while not predicate():
            assert time.monotonic() < deadline, f"{what}: not within {sim_seconds} s"
            time.sleep(0.005)
        return self.now() - start

    def hold(self, sim_seconds: float) -> None:
        """Let `sim_seconds` of simulated time pass."""
        end = self.now() + sim_seconds
        while self.now() < end:
            time.sleep(0.005)

    def cr(self, which: tuple[str, str, str], name: str) -> Obj:
        found: Obj = self.custom.get_cluster_custom_object(*which, name)
        return found

    def create_cr(self, which: tuple[str, str, str], stack: str) -> None:
        self.custom.create_cluster_custom_object(*which, R.sample_cr(stack))

    def condition(self, which: tuple[str, str, str], name: str, kind: str) -> Obj | None:
        for cond in (self.cr(which, name).get("status") or {}).get("conditions") or []:
            if cond["type"] == kind:
                return dict(cond)
        return None

    def exists(self, kind: str, name: str) -> bool:
        read = {"DaemonSet": self.apps.read_namespaced_daemon_set,
                "Service": self.core.read_namespaced_service}[kind]
        try:
            read(name, NS)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def selector(self, name: str) -> dict[str, str]:
        return dict(self.core.read_namespaced_service(name, NS).spec.selector or {})

    def set_selector(self, name: str, selector: dict[str, str]) -> None:
        self.core.patch_namespaced_service(name, NS, [
            {"op": "replace", "path": "/spec/selector", "value": selector}])

    def operator(self) -> Obj:
        """What `GET /sim/v1/operator` answers: the imitation's counters and records."""
        code, status, _ = Raw(self.sim.url)("GET", "/sim/v1/operator")
        assert code == 200
        return dict(status)

    def reconciles(self) -> int:
        return int(self.operator()["reconciles"])

    def first_reconcile(self, controller: str, since: float) -> Obj:
        """The first reconcile of `controller` (upstream's name) to start at or after
        simulated time `since`, from the imitation's records: when, and what made it run."""
        return next(r for r in self.operator()["history"]
                    if r["controller"] == controller and r["at"] >= since)

    def error_is(self, which: tuple[str, str, str], name: str, reason: str, message: str) -> bool:
        cond = self.condition(which, name, "Error")
        return cond is not None and (cond["status"], cond["reason"], cond["message"]) == (
            "True", reason, message)


@pytest.fixture
def make_api(make_sim: Callable[..., SimCluster]) -> Iterator[Callable[..., Api]]:
    """`make_api(stack, **SimCluster options)`: a 2-node sim with the operator imitation at
    its defaults (the shipped release, controller-runtime's 10 h resync) and the client."""
    made: list[client.ApiClient] = []

    def make(stack: str, **kw: Any) -> Api:
        kw.setdefault("operator_reconcile_seconds", RESYNC_SECONDS)
        sim = make_sim(nodes=2, stack=stack, **kw)
        api = make_client(sim.url)
        made.append(api)
        return Api(sim, api)

    yield make
    for api in made:
        api.close()


def test_a_gpucluster_beside_a_clusterpolicy_is_refused_and_renders_nothing(
        make_api: Callable[..., Api]) -> None:
    k = make_api("clusterpolicy")
    k.create_cr(GC, R.GPUCLUSTER)
    k.wait(lambda: k.error_is(GC, "gpu-cluster", "PrerequisiteNotMet", REFUSED), 10,
           "the GPUCluster refused")
    status = k.cr(GC, "gpu-cluster")["status"]
    assert (status["state"], status["namespace"]) == ("notReady", NS)
    ready = k.condition(GC, "gpu-cluster", "Ready")
    assert ready is not None and (ready["status"], ready["reason"], ready["message"]) == (
        "False", "Error", "")
    k.wait(lambda: k.error_is(CP, "gpu-cluster-policy", "ReconcileFailed", CONFLICT), 10,
           "the ClusterPolicy stalled")
    assert k.cr(CP, "gpu-cluster-policy")["status"]["state"] == "notReady"
    k.hold(10)
    for name in DRA:
        assert not k.exists("DaemonSet", name) and not k.exists("Service", name)
    claims = k.custom.list_namespaced_custom_object("resource.k8s.io", "v1", NS,
                                                    "resourceclaimtemplates")
    assert claims["items"] == []


def test_the_clusterpolicy_reconciles_no_operand_until_the_gpucluster_is_gone(
        make_api: Callable[..., Api]) -> None:
    k = make_api("clusterpolicy")
    k.create_cr(GC, R.GPUCLUSTER)
    k.wait(lambda: k.error_is(CP, "gpu-cluster-policy", "ReconcileFailed", CONFLICT), 10,
           "the ClusterPolicy stalled")
    k.set_selector("nvidia-dcgm", {R.DCGM_LABEL: "true"})
    k.apps.delete_namespaced_daemon_set("nvidia-dcgm-exporter", NS)
    before = k.reconciles()
    k.hold(30)  # the deletion's event and the rate limiter's retries (at most 3 s apart)
    assert k.reconciles() - before >= 5
    assert k.selector("nvidia-dcgm") == {R.DCGM_LABEL: "true"}
    assert not k.exists("DaemonSet", "nvidia-dcgm-exporter")

    k.custom.delete_cluster_custom_object(*GC, "gpu-cluster")  # its event reconciles at once
    k.wait(lambda: k.exists("DaemonSet", "nvidia-dcgm-exporter")
           and k.selector("nvidia-dcgm") == {"app": "nvidia-dcgm"}, 10, "the operands restored")
    # a new DaemonSet has no status yet, which `isDaemonSetReady` calls ready: wait for its pods
    k.wait(lambda: (k.apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", NS).status
                    .number_available or 0) == 2
           and (k.condition(CP, "gpu-cluster-policy", "Ready") or {}).get("status") == "True",
           300, "the ClusterPolicy ready again")
    ready = k.condition(CP, "gpu-cluster-policy", "Ready")
    assert ready is not None and (ready["reason"], ready["message"]) == (
        "Reconciled", "ClusterPolicy is ready as all resources have been successfully reconciled")
    assert k.cr(CP, "gpu-cluster-policy")["status"]["state"] == "ready"


def test_a_clusterpolicy_beside_a_running_gpucluster_stalls_both_and_deletes_nothing(
        make_api: Callable[..., Api]) -> None:
    """The GPUCluster controller does not watch ClusterPolicies: it notices at its next
    one-minute requeue, and leaves the objects it rendered as they are."""
    k = make_api("gpucluster")
    k.sim.wait_idle()  # the controllers' start reconciles are over
    created = k.now()
    k.create_cr(CP, R.CLUSTERPOLICY)
    k.wait(lambda: k.error_is(CP, "gpu-cluster-policy", "ReconcileFailed", CONFLICT), 10,
           "the ClusterPolicy stalled")
    k.wait(lambda: k.error_is(GC, "gpu-cluster", "PrerequisiteNotMet", REFUSED), 90,
           "the GPUCluster refused")
    # from the imitation's own records, so a loaded machine cannot blur it: the first
    # GPUCluster reconcile to start after the ClusterPolicy came is its one-minute requeue
    first = k.first_reconcile("gpu-cluster-controller", created)
    assert first["by"] == "requeue"
    assert first["due"] - first["setAt"] == pytest.approx(60)
    for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        assert not k.exists("DaemonSet", name) and not k.exists("Service", name)
    for name in DRA:
        assert k.exists("DaemonSet", name) and k.exists("Service", name)


def test_a_deleted_gpucluster_stays_until_its_dcgm_pods_are_gone(
        make_api: Callable[..., Api]) -> None:
    """`reconcileDelete`: the GPUCluster carries its finalizer; deleted, it stays while the
    DaemonSets it controls whose pods claim resources (both DCGM ones) are deleted in the
    foreground, and goes only once they and their pods are gone. Read from the sim's own
    commits, in the order they happened."""
    k = make_api("gpucluster")
    k.wait(lambda: FINALIZER in (k.cr(GC, "gpu-cluster")["metadata"].get("finalizers") or []),
           10, "the finalizer added")
    store, seen, generations = k.sim.store, list[Seen](), []

    def note(event: Event) -> None:
        meta, kind = event.object["metadata"], event.resource.kind
        if kind == "GPUCluster" or (kind == "DaemonSet" and meta["name"] in DRA
                                    and meta.get("deletionTimestamp")):
            seen.append((event.type, meta["name"], meta.get("finalizers") or None))
        if kind == "GPUCluster":
            generations.append(meta.get("generation"))
        if kind == "GPUCluster" and event.type == "DELETED":
            pods = store.list(kinds.POD, NS)[0]  # the store's lock is held: this very instant
            seen.append(("left", sorted(p["metadata"]["name"] for p in pods
                                        if p["metadata"]["name"].startswith(DRA)), None))

    generation = k.cr(GC, "gpu-cluster")["metadata"]["generation"]
    store.subscribe(note)
    try:
        k.custom.delete_cluster_custom_object(*GC, "gpu-cluster")
        k.wait(lambda: ("DELETED", "gpu-cluster", None) in seen, 120, "the GPUCluster gone")
    finally:
        store.unsubscribe(note)
    # marked only, its generation moved (so its controller's predicate lets the event through)
    assert seen[0] == ("MODIFIED", "gpu-cluster", [FINALIZER])
    assert generations[0] == generation + 1
    foreground: list[Seen] = [("MODIFIED", name, ["foregroundDeletion"]) for name in DRA]
    gone: list[Seen] = [("DELETED", name, None) for name in DRA]
    assert sorted(seen[1:-2]) == sorted(foreground + gone)  # each DaemonSet drained, then gone
    assert all(seen.index(marked) < seen.index(deleted)
               for marked, deleted in zip(foreground, gone, strict=True))
    assert seen[-2:] == [("DELETED", "gpu-cluster", None), ("left", [], None)]  # no pod left


@pytest.mark.parametrize(("release", "spared"), [
    ("shipped", False),  # internal/state/state_skel.go deleteStateRelatedObjects at a22dbf671
    ("shared-services-fork", True),  # rahulait/gpu-operator@5746d440 skips the two names
])
def test_gpucluster_cleanup_deletes_everything_with_its_state_label(
        make_api: Callable[..., Api], release: str, spared: bool) -> None:
    """Both states off: their objects go; then `nvidia-dcgm` / `nvidia-dcgm-exporter` carrying
    the state labels (left by anyone) go at the next reconcile too, but for the fork."""
    k = make_api("gpucluster", operator_release=release)
    k.custom.patch_cluster_custom_object(*GC, "gpu-cluster", {"spec": {
        "dcgm": {"enabled": False}, "dcgmExporter": {"enabled": False}}})
    k.wait(lambda: not any(k.exists(kind, name) for name in DRA
                           for kind in ("DaemonSet", "Service")), 30, "the states cleaned up")
    k.wait(lambda: not any(k.exists("Service", name) for name in SHARED), 70,
           "the fork's shared Services gone (nobody needs them)")
    made = k.now()
    for name, state in zip(SHARED, ("state-dcgm", "state-dcgm-exporter"), strict=True):
        k.core.create_namespaced_service(NS, {"metadata": {"name": name, "labels": {
            STATE: state}}, "spec": {"selector": {"app": name}, "ports": [{"port": 5555}]}})
    if spared:
        k.hold(70)  # past the GPUCluster's minute requeue
    else:
        k.wait(lambda: not any(k.exists("Service", name) for name in SHARED), 70,
               "the labelled Services deleted")
        first = k.first_reconcile("gpu-cluster-controller", made)
        assert first["by"] == "requeue" and first["due"] - made <= 60
    labelled = [s.metadata.name for s in k.core.list_namespaced_service(
        NS, label_selector=STATE).items]
    assert sorted(labelled) == (list(SHARED) if spared else [])
    assert k.apps.list_namespaced_daemon_set(NS, label_selector=STATE).items == []


def test_a_ready_gpucluster_reverts_a_hand_edit_at_its_minute_requeue(
        make_api: Callable[..., Api]) -> None:
    k = make_api("gpucluster")
    name = "nvidia-dcgm-exporter-dra"
    before = k.reconciles()
    k.wait(lambda: k.reconciles() > before, 70, "a requeue")  # the minute's phase, known
    k.sim.wait_idle()
    edited = k.now()
    k.set_selector(name, {R.EXPORTER_LABEL: "true"})
    k.hold(5)
    assert k.selector(name) == {R.EXPORTER_LABEL: "true"}  # not within 5 s
    k.wait(lambda: k.selector(name) == {"app": name}, 70, "the revert")
    first = k.first_reconcile("gpu-cluster-controller", edited)
    assert first["by"] == "requeue" and 5 < first["due"] - edited <= 60


def test_a_ready_clusterpolicy_reverts_a_hand_edit_only_on_an_event(
        make_api: Callable[..., Api]) -> None:
    """Ready, the ClusterPolicy controller asks for no requeue: a hand-edited Service stays
    until an event of a DaemonSet it controls (or a node label, or its CR) reconciles it."""
    k = make_api("clusterpolicy")
    k.sim.wait_idle()
    edited = k.now()
    k.set_selector("nvidia-dcgm", {R.DCGM_LABEL: "true"})
    k.hold(120)
    assert k.selector("nvidia-dcgm") == {R.DCGM_LABEL: "true"}
    touched = k.now()
    k.apps.patch_namespaced_daemon_set("nvidia-dcgm", NS, {"metadata": {
        "annotations": {"example.com/touched": "yes"}}})
    k.wait(lambda: k.selector("nvidia-dcgm") == {"app": "nvidia-dcgm"}, 10, "the revert")
    assert k.first_reconcile("clusterpolicy-controller", edited)["at"] >= touched
    assert k.first_reconcile("clusterpolicy-controller", touched)["by"] == "event"


@pytest.mark.parametrize("stack", ["mixed", "both"])
def test_sim_serve_refuses_both_crs_without_a_release_that_allows_them(
        stack: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_cmd.main(["serve", "--stack", stack, "--nodes", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"error: --stack {stack} needs a ClusterPolicy and a GPUCluster at once, which the "
        "shipped GPU Operator release refuses; pass --operator-release future-coexistence (or "
        "shared-services-fork), the releases that let both stacks coexist.")


def _node_labels(k: Api) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in k.sim.store.list(kinds.NODE)[0]}


def _label_node(k: Api, name: str, key: str, value: str) -> None:
    """`kubectl label node` through the API (the raw answer: the generated Node model refuses
    the sim's nodeInfo)."""
    k.core.patch_node(name, {"metadata": {"labels": {key: value}}}, _preload_content=False)


def _deploy_labels(k: Api) -> set[tuple[str, str]]:
    """Every node's DCGM deploy labels, as (key, value)."""
    return {(key, value) for labels in _node_labels(k).values() for key, value in labels.items()
            if key in {*R.DEPLOY_LABELS[R.CLUSTERPOLICY], *R.DEPLOY_LABELS[R.GPUCLUSTER]}}


def test_the_node_labeller_follows_the_cr_that_exists(make_api: Callable[..., Api]) -> None:
    """`NodeLabelingReconciler` (nodelabeling_controller.go, state_manager.go at a22dbf671): a
    hand-set deploy label stays (a deploy label's change is no trigger) until a CR is created
    or deleted; the GPUCluster created, every GPU node gets the DRA stack's DCGM labels and
    loses the ClusterPolicy's, so the new DaemonSets run everywhere with no node labelled by
    hand; a label set "false" is honoured; with no CR the labels stay as they are."""
    k = make_api("clusterpolicy")
    nodes = sorted(_node_labels(k))
    k.sim.wait_idle()  # the controllers' start reconciles (the labeller's first pass) are over
    _label_node(k, nodes[0], "nvidia.com/gpu.deploy.dcgm-dra", "true")
    k.hold(5)
    assert ("nvidia.com/gpu.deploy.dcgm-dra", "true") in _deploy_labels(k)
    k.custom.delete_cluster_custom_object(*CP, "gpu-cluster-policy")
    k.wait(lambda: not k.exists("DaemonSet", "nvidia-dcgm"), 60, "the ClusterPolicy stack gone")
    assert ("nvidia.com/gpu.deploy.dcgm", "true") in _deploy_labels(k)  # no CR: left alone
    _label_node(k, nodes[1], "nvidia.com/gpu.deploy.dcgm-dra", "false")
    k.create_cr(GC, R.GPUCLUSTER)
    want = {(key, "true") for key in R.DEPLOY_LABELS[R.GPUCLUSTER]}
    k.wait(lambda: _deploy_labels(k) == {*want, ("nvidia.com/gpu.deploy.dcgm-dra", "false")},
           10, "the nodes relabelled")
    labels = _node_labels(k)
    assert labels[nodes[1]]["nvidia.com/gpu.deploy.dcgm-dra"] == "false"
    assert all(labels[n]["nvidia.com/gpu.deploy.dcgm-exporter-dra"] == "true" for n in nodes)
    k.wait(lambda: ((k.sim.store.find(kinds.DAEMONSET, NS, DRA[1]) or {}).get("status") or {})
           .get("numberReady") == len(nodes), 120, f"{DRA[1]} on every node")
