"""The simulated DaemonSet controller: pods per node, rolling update budget, OnDelete, status
counters and observedGeneration, placement changes; on a bare Store and through the API server
with the official client."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from kubernetes import client, config

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.kubelet import PODS_READY_ANNOTATION
from dcgm_sim.controllers.rollouts import GENERATION_LABEL, HASH_LABEL
from dcgm_sim.store import Event, Store
from migrator.model import kinds
from tests.conftest import Bare

NS = "gpu-operator"
DCGM = "nvidia-dcgm-dra"
COMMON = "nvidia.com/gpu-operator.dcgm"
Obj = dict[str, Any]


class ReadySampler:
    """After every pod change, how many nodes lack a Ready, non-terminating pod of `app`."""

    def __init__(self, store: Store, app: str, nodes: list[str]) -> None:
        self.store, self.app, self.nodes = store, app, set(nodes)
        self.worst = 0
        self.max_pods_on_a_node = 0
        self.samples = 0

    def __call__(self, event: Event) -> None:
        if event.resource.key != kinds.POD.key:
            return
        pods = [p for p in self.store.list(kinds.POD, NS)[0]
                if (p["metadata"].get("labels") or {}).get("app") == self.app]
        serving = {p["spec"]["nodeName"] for p in pods if _ready(p)
                   and not p["metadata"].get("deletionTimestamp")}
        per_node: dict[str, int] = {}
        for p in pods:
            per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
        self.worst = max(self.worst, len(self.nodes - serving))
        self.max_pods_on_a_node = max([self.max_pods_on_a_node, *per_node.values()])
        self.samples += 1


def _ready(pod: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def rolled_out(store: Store, name: str) -> bool:
    """The `kubectl rollout status` rule."""
    ds = store.get(kinds.DAEMONSET, NS, name)
    st = ds.get("status") or {}
    desired = st.get("desiredNumberScheduled", 0)
    return bool(st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled", 0) == desired
                and st.get("numberAvailable", 0) == desired)


def sample(bare: Bare, app: str) -> ReadySampler:
    nodes = [n["metadata"]["name"] for n in bare.store.list(kinds.NODE)[0]]
    sampler = ReadySampler(bare.store, app, nodes)
    bare.store.subscribe(sampler)
    bare.samplers.append(sampler)
    return sampler


def label_template(key: str, value: str = "true") -> Callable[[Obj], None]:
    def change(ds: Obj) -> None:
        ds["spec"]["template"]["metadata"]["labels"][key] = value
    return change


def test_seeded_cluster_needs_no_controller_writes(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=4, start=False)
    before = bare.store.resource_version
    bare.controllers.start()
    bare.wait_idle()
    assert bare.store.resource_version == before
    assert bare.controllers.errors == 0


def test_pods_carry_template_labels_hash_generation_owner_and_node(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=3)
    ds = bare.get(kinds.DAEMONSET, DCGM)
    revs = [r for r in bare.store.list(kinds.CONTROLLER_REVISION, NS)[0]
            if r["metadata"]["ownerReferences"][0]["uid"] == ds["metadata"]["uid"]]
    assert len(revs) == 1 and revs[0]["revision"] == 1
    hash_ = revs[0]["metadata"]["labels"][HASH_LABEL]
    assert revs[0]["metadata"]["name"] == f"{DCGM}-{hash_}"
    pods = bare.pods(DCGM)
    assert sorted(p["spec"]["nodeName"] for p in pods) == [
        "gpu-node-0001", "gpu-node-0002", "gpu-node-0003"]
    for pod in pods:
        assert re.fullmatch(rf"{DCGM}-[bcdfghjklmnpqrstvwxz2456789]{{5}}", pod["metadata"]["name"])
        labels = pod["metadata"]["labels"]
        assert labels["app"] == DCGM
        assert labels[HASH_LABEL] == hash_
        assert labels[GENERATION_LABEL] == "1"
        ref = pod["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "DaemonSet", DCGM, ds["metadata"]["uid"], True)
        keys = {t.get("key") for t in pod["spec"]["tolerations"]}
        assert {"nvidia.com/gpu", "node.kubernetes.io/unschedulable"} <= keys


def test_metadata_label_change_keeps_generation_and_pods(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    names = sorted(p["metadata"]["name"] for p in bare.pods(DCGM))
    updated = bare.edit(kinds.DAEMONSET, DCGM,
                        lambda ds: ds["metadata"]["labels"].__setitem__(COMMON, "true"))
    assert updated["metadata"]["generation"] == 1
    bare.wait_idle()
    assert sorted(p["metadata"]["name"] for p in bare.pods(DCGM)) == names


def test_template_change_rolls_one_node_at_a_time(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=4)
    sampler = sample(bare, DCGM)
    updated = bare.edit(kinds.DAEMONSET, DCGM, label_template(COMMON))
    assert updated["metadata"]["generation"] == 2
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))
    bare.wait_idle()
    assert sampler.worst == 1  # the default maxUnavailable: one node down at a time
    assert sampler.max_pods_on_a_node == 1  # maxSurge 0: the new pod waits for the old one
    pods = bare.pods(DCGM)
    assert len(pods) == 4 and all(p["metadata"]["labels"][COMMON] == "true" for p in pods)
    assert {p["metadata"]["labels"][GENERATION_LABEL] for p in pods} == {"2"}
    status = bare.get(kinds.DAEMONSET, DCGM)["status"]
    assert status == {"currentNumberScheduled": 4, "numberMisscheduled": 0,
                      "desiredNumberScheduled": 4, "numberReady": 4,
                      "updatedNumberScheduled": 4, "numberAvailable": 4,
                      "observedGeneration": 2}
    revisions = sorted(r["revision"] for r in bare.store.list(kinds.CONTROLLER_REVISION, NS)[0]
                       if r["metadata"]["name"].startswith(f"{DCGM}-"))
    assert revisions == [1, 2]


def test_a_one_node_daemonset_replaces_its_only_pod_once(make_bare: Callable[..., Bare]) -> None:
    """The last pod of a DaemonSet going away empties the controller's index of it: the next
    pod must be counted (status) and not asked for again (no pile-up on the node)."""
    bare = make_bare(nodes=1)
    bare.edit(kinds.DAEMONSET, DCGM, label_template("x", "y"))
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))
    bare.wait_idle()
    for _ in range(3):  # more syncs (status writes, resyncs) create nothing more
        bare.edit(kinds.DAEMONSET, DCGM, lambda d: d["metadata"].setdefault(
            "annotations", {}).update({"touch": str(len(bare.pods(DCGM)))}))
        bare.wait_idle()
    pods = bare.pods(DCGM)
    assert len(pods) == 1 and pods[0]["metadata"]["labels"]["x"] == "y"
    status = bare.get(kinds.DAEMONSET, DCGM)["status"]
    assert (status["currentNumberScheduled"], status["updatedNumberScheduled"],
            status["numberAvailable"]) == (1, 1, 1)


def test_percent_max_unavailable_rolls_in_batches(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=4)
    sampler = sample(bare, DCGM)

    def change(ds: Obj) -> None:
        ds["spec"]["updateStrategy"] = {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": "50%"}}
        label_template(COMMON)(ds)

    bare.edit(kinds.DAEMONSET, DCGM, change)
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))
    assert sampler.worst == 2


def test_max_surge_starts_the_new_pod_before_removing_the_old(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=3)
    sampler = sample(bare, DCGM)

    def change(ds: Obj) -> None:
        ds["spec"]["updateStrategy"] = {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
        label_template(COMMON)(ds)

    bare.edit(kinds.DAEMONSET, DCGM, change)
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))
    bare.wait_idle()
    assert sampler.worst == 0
    assert sampler.max_pods_on_a_node == 2
    assert len(bare.pods(DCGM)) == 3


def test_observed_generation_moves_only_when_the_controller_has_synced(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=2, start=False)
    ds = bare.edit(kinds.DAEMONSET, DCGM, label_template(COMMON))
    assert ds["metadata"]["generation"] == 2
    assert ds["status"]["observedGeneration"] == 1
    bare.controllers.start()
    bare.wait_for(lambda: bare.get(kinds.DAEMONSET, DCGM)["status"]["observedGeneration"] == 2)
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))


def test_a_node_that_never_gets_ready_stalls_the_rollout(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    bare.annotate_node("gpu-node-0002", PODS_READY_ANNOTATION, "false")
    bare.wait_idle()
    assert bare.get(kinds.DAEMONSET, DCGM)["status"]["numberReady"] == 3  # running pods stay
    hash_of = {p["spec"]["nodeName"]: p["metadata"]["labels"][HASH_LABEL] for p in bare.pods(DCGM)}
    bare.edit(kinds.DAEMONSET, DCGM, label_template(COMMON))

    def stalled_on_node_2() -> bool:
        pods = [p for p in bare.pods(DCGM) if p["spec"]["nodeName"] == "gpu-node-0002"]
        return any(p["metadata"]["labels"][HASH_LABEL] != hash_of["gpu-node-0002"]
                   and p["status"].get("phase") == "Running" for p in pods)

    bare.wait_for(stalled_on_node_2)
    bare.wait_idle()
    bare.controllers.clock.sleep(20)  # 20 simulated seconds: nothing more happens
    status = bare.get(kinds.DAEMONSET, DCGM)["status"]
    assert status["updatedNumberScheduled"] == 2  # node 1 rolled, node 2 stuck
    assert status["numberAvailable"] == 2 and status["numberUnavailable"] == 1
    by_node = {p["spec"]["nodeName"]: p for p in bare.pods(DCGM)}
    assert _ready(by_node["gpu-node-0001"]) and not _ready(by_node["gpu-node-0002"])
    assert by_node["gpu-node-0001"]["metadata"]["labels"][COMMON] == "true"
    # Node 3 is untouched: the budget is spent on node 2.
    assert by_node["gpu-node-0003"]["metadata"]["labels"][HASH_LABEL] == hash_of["gpu-node-0003"]
    assert not rolled_out(bare.store, DCGM)
    bare.annotate_node("gpu-node-0002", PODS_READY_ANNOTATION, "true")
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))


def test_on_delete_rolls_nothing_but_recreates_deleted_pods_from_the_new_template(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=3)

    def change(ds: Obj) -> None:
        ds["spec"]["updateStrategy"] = {"type": "OnDelete"}
        label_template(COMMON)(ds)

    bare.edit(kinds.DAEMONSET, DCGM, change)
    bare.wait_for(lambda: bare.get(kinds.DAEMONSET, DCGM)["status"]["observedGeneration"] == 2)
    bare.wait_idle()
    pods = bare.pods(DCGM)
    assert len(pods) == 3 and not any(COMMON in p["metadata"]["labels"] for p in pods)
    assert "updatedNumberScheduled" not in bare.get(kinds.DAEMONSET, DCGM)["status"]
    victim = next(p for p in pods if p["spec"]["nodeName"] == "gpu-node-0001")
    bare.store.mark_deleting(kinds.POD, NS, victim["metadata"]["name"], 30)
    bare.wait_for(lambda: bare.get(kinds.DAEMONSET, DCGM)["status"].get(
        "updatedNumberScheduled") == 1 and bare.get(kinds.DAEMONSET, DCGM)["status"].get(
        "numberAvailable") == 3)
    new = [p for p in bare.pods(DCGM) if p["spec"]["nodeName"] == "gpu-node-0001"]
    assert len(new) == 1 and new[0]["metadata"]["labels"][COMMON] == "true"


def test_pods_follow_node_labels_and_taints(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    bare.edit(kinds.NODE, "gpu-node-0003", lambda n: n["metadata"]["labels"].pop(
        "nvidia.com/gpu.deploy.dcgm-dra"))
    bare.wait_for(lambda: sorted(p["spec"]["nodeName"] for p in bare.pods(DCGM)) == [
        "gpu-node-0001", "gpu-node-0002"])
    gpus = {"capacity": {"nvidia.com/gpu": "8"}}  # DCGM's DRA claim needs a GPU on the node
    new_node = {"metadata": {"name": "gpu-node-0099", "labels": {
        "nvidia.com/gpu.deploy.dcgm-dra": "true"}}, "spec": {}, "status": gpus}
    bare.store.create(kinds.NODE, new_node)
    tainted = {"metadata": {"name": "gpu-node-0098", "labels": {
        "nvidia.com/gpu.deploy.dcgm-dra": "true"}},
        "spec": {"taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]},
        "status": gpus}
    bare.store.create(kinds.NODE, tainted)
    bare.wait_for(lambda: bare.get(kinds.DAEMONSET, DCGM)["status"].get("numberAvailable") == 3)
    bare.wait_idle()
    assert sorted(p["spec"]["nodeName"] for p in bare.pods(DCGM)) == [
        "gpu-node-0001", "gpu-node-0002", "gpu-node-0099"]
    status = bare.get(kinds.DAEMONSET, DCGM)["status"]
    assert status["desiredNumberScheduled"] == 3 and status["numberMisscheduled"] == 0


def test_min_ready_seconds_delays_availability(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2)
    seen_lag: list[bool] = []

    def watch(event: Event) -> None:
        if event.resource.key == kinds.DAEMONSET.key and event.object["metadata"]["name"] == DCGM:
            st = event.object.get("status") or {}
            seen_lag.append(st.get("numberReady", 0) > st.get("numberAvailable", 0))

    bare.store.subscribe(watch)
    bare.samplers.append(watch)

    def change(ds: Obj) -> None:
        ds["spec"]["minReadySeconds"] = 5
        label_template(COMMON)(ds)

    bare.edit(kinds.DAEMONSET, DCGM, change)
    bare.wait_for(lambda: rolled_out(bare.store, DCGM))
    assert any(seen_lag)


def _apps(sim: SimCluster) -> client.AppsV1Api:
    return client.AppsV1Api(config.new_client_from_config(sim.kubeconfig))


def _generation(apps: client.AppsV1Api, name: str) -> int | None:
    meta = apps.read_namespaced_daemon_set(name, NS).metadata
    assert meta is not None
    return meta.generation


def test_official_client_label_patches(sim: SimCluster) -> None:
    apps = _apps(sim)
    nodes = [n["metadata"]["name"] for n in sim.store.list(kinds.NODE)[0]]
    sampler = ReadySampler(sim.store, DCGM, nodes)
    sim.store.subscribe(sampler)
    try:
        apps.patch_namespaced_daemon_set(DCGM, NS, {"metadata": {"labels": {COMMON: "true"}}})
        assert _generation(apps, DCGM) == 1
        apps.patch_namespaced_daemon_set(
            DCGM, NS, {"spec": {"template": {"metadata": {"labels": {COMMON: "true"}}}}})
        assert _generation(apps, DCGM) == 2
        sim.wait_for(lambda: rolled_out(sim.store, DCGM))
    finally:
        sim.store.unsubscribe(sampler)
    status = apps.read_namespaced_daemon_set_status(DCGM, NS).status
    assert status is not None
    assert (status.observed_generation, status.desired_number_scheduled,
            status.updated_number_scheduled, status.number_available,
            status.number_unavailable) == (2, 3, 3, 3, None)
    assert sampler.worst == 1 and sampler.samples > 0
