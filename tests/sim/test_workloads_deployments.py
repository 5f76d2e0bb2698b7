"""Deployments and ReplicaSets in the simulated cluster, through the real kubectl and the
official client: `kubectl apply` a Deployment → its ReplicaSet `<name>-<pod-template-hash>`
makes the pods, the scheduler binds them, `kubectl rollout status` finishes; a template change
rolls to a new ReplicaSet (revision 2) within maxSurge/maxUnavailable; a deleted pod is
replaced; Recreate stops every old pod before the new ones; the repository's guard manifest
runs its two replicas. Simulated time only: nothing here asserts how long a step took."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dcgm_sim import kinds as simkinds
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import pods as P
from dcgm_sim.store import Event
from migrator.model import kinds
from tests.helpers import workloads as w
from tests.helpers.kubectl import kubectl_for
from tests.sim.conftest import make_client

NS = "gpu-operator"
REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]





@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(nodes=3, stack="none", time_scale=0.01) as cluster:
        yield cluster


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Callable[..., str]:
    return kubectl_for(sim.kubeconfig, tmp_path)


@pytest.fixture
def api(sim: SimCluster) -> Iterator[client.ApiClient]:
    c = make_client(sim.url)
    yield c
    c.close()


def _deployment(name: str, image: str, replicas: int, **spec: Any) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": image}]}},
                     **spec}}



def _ready_pods(core: Any, app: str) -> list[Any]:
    pods = core.list_namespaced_pod(NS, label_selector=f"app={app}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None and any(
        c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]


@contextmanager
def _every_pod_write(sim: SimCluster, seen: Callable[[list[Obj]], None]) -> Iterator[None]:
    """`seen(pods)` with the namespace's pods as they stand after each pod write the store
    commits while the block runs (one call at a time)."""
    lock = threading.Lock()
    live: dict[str, Obj] = {p["metadata"]["name"]: p for p in sim.store.list(kinds.POD, NS)[0]}

    def watch(event: Event) -> None:
        if event.resource.key != kinds.POD.key:
            return
        with lock:
            if event.type == "DELETED":
                live.pop(event.object["metadata"]["name"], None)
            else:
                live[event.object["metadata"]["name"]] = event.object
            seen(list(live.values()))

    sim.store.subscribe(watch)
    try:
        yield
    finally:
        sim.store.unsubscribe(watch)


def test_apply_then_rollout_status_finishes_with_the_pods_ready(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    assert "deployment.apps/web created" in w.apply_object(kubectl, tmp_path,
                                                   _deployment("web", "img:1", 3))
    out = kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert 'deployment "web" successfully rolled out' in out

    apps, core = w.apps(api), w.core(api)
    dep = apps.read_namespaced_deployment("web", NS)
    assert dep.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    assert (dep.status.replicas, dep.status.updated_replicas, dep.status.ready_replicas,
            dep.status.available_replicas) == (3, 3, 3, 3)
    assert dep.status.observed_generation == dep.metadata.generation
    conditions = {c.type: (c.status, c.reason) for c in dep.status.conditions}
    assert conditions == {"Available": ("True", "MinimumReplicasAvailable"),
                          "Progressing": ("True", "NewReplicaSetAvailable")}

    (rs,) = apps.list_namespaced_replica_set(NS).items
    hash_ = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{hash_}"
    assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": hash_}
    assert rs.spec.template.metadata.labels == {"app": "web", "pod-template-hash": hash_}
    (ref,) = rs.metadata.owner_references
    assert (ref.kind, ref.name, ref.uid, ref.controller, ref.block_owner_deletion) == (
        "Deployment", "web", dep.metadata.uid, True, True)
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    assert (rs.status.replicas, rs.status.fully_labeled_replicas, rs.status.ready_replicas,
            rs.status.available_replicas) == (3, 3, 3, 3)

    pods = _ready_pods(core, "web")
    assert len(pods) == 3
    for pod in pods:
        assert pod.metadata.name.startswith(f"web-{hash_}-")
        assert len(pod.metadata.name) == len(f"web-{hash_}-") + 5
        assert pod.metadata.owner_references[0].uid == rs.metadata.uid
        assert pod.spec.node_name  # bound by the scheduler
    # spread: one replica per node
    assert len({p.spec.node_name for p in pods}) == 3
    table = kubectl("-n", NS, "get", "deploy", "web", "--no-headers").split()
    assert table[1:4] == ["3/3", "3", "3"]
    row = kubectl("-n", NS, "get", "rs", "--no-headers").split()
    assert row[:4] == [f"web-{hash_}", "3", "3", "3"]  # NAME DESIRED CURRENT READY


def test_a_template_change_rolls_within_max_surge_and_max_unavailable(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    w.apply_object(kubectl, tmp_path, _deployment("web", "img:1", 4))
    kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    apps = w.apps(api)
    (old,) = apps.list_namespaced_replica_set(NS).items

    # Every pod write from here on: never fewer than 4 - 1 ready pods (maxUnavailable 25%),
    # never more than 4 + 1 pods not being deleted (maxSurge 25%).
    low, high = [4], [4]

    def counted(pods: list[Obj]) -> None:
        running = [p for p in pods if not P.is_deleting(p)]
        low[0] = min(low[0], sum(1 for p in running if P.is_pod_ready(p)))
        high[0] = max(high[0], len(running))

    with _every_pod_write(sim, counted):
        w.apply_object(kubectl, tmp_path, _deployment("web", "img:2", 4))
        kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert low[0] >= 3 and high[0] <= 5, (low, high)

    dep = apps.read_namespaced_deployment("web", NS)
    assert dep.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    rss = {rs.metadata.name: rs for rs in apps.list_namespaced_replica_set(NS).items}
    assert len(rss) == 2
    old_now = rss.pop(old.metadata.name)
    (new,) = rss.values()
    assert old_now.spec.replicas == 0 and (old_now.status.replicas or 0) == 0
    assert new.spec.replicas == 4 and new.status.available_replicas == 4
    assert new.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    assert new.spec.template.spec.containers[0].image == "img:2"
    images = {p.spec.containers[0].image for p in _ready_pods(w.core(api), "web")}
    assert images == {"img:2"}
    sim.wait_for(lambda: len([p for p in sim.store.list(kinds.POD, NS)[0]]) == 4)


def test_a_deleted_pod_is_replaced(sim: SimCluster, kubectl: Callable[..., str],
                                   api: client.ApiClient, tmp_path: Path) -> None:
    w.apply_object(kubectl, tmp_path, _deployment("web", "img:1", 2))
    kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    core = w.core(api)
    victim = _ready_pods(core, "web")[0].metadata.name
    kubectl("-n", NS, "delete", "pod", victim)  # waits until it is gone
    sim.wait_for(lambda: len(_ready_pods(core, "web")) == 2, timeout=30)
    names = {p.metadata.name for p in _ready_pods(core, "web")}
    assert victim not in names
    kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")


def test_scaling_the_deployment_resizes_its_replica_set(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    w.apply_object(kubectl, tmp_path, _deployment("web", "img:1", 2))
    kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    kubectl("-n", NS, "patch", "deploy", "web", "-p", '{"spec":{"replicas":4}}')
    kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    core = w.core(api)
    assert len(_ready_pods(core, "web")) == 4
    (rs,) = w.apps(api).list_namespaced_replica_set(NS).items
    assert rs.metadata.annotations["deployment.kubernetes.io/desired-replicas"] == "4"
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"


def test_recreate_stops_every_old_pod_before_a_new_one(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    recreate = {"strategy": {"type": "Recreate"}}
    w.apply_object(kubectl, tmp_path, _deployment("web", "img:1", 2, **recreate))
    kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    images: list[set[str]] = []
    with _every_pod_write(sim, lambda pods: images.append(
            {p["spec"]["containers"][0]["image"] for p in pods})):
        w.apply_object(kubectl, tmp_path, _deployment("web", "img:2", 2, **recreate))
        kubectl("-n", NS, "rollout", "status", "deploy/web", "--timeout=60s")
    assert {"img:2"} in images
    assert not any(seen == {"img:1", "img:2"} for seen in images)  # never both at once
    assert {p.spec.containers[0].image for p in _ready_pods(w.core(api), "web")} == {
        "img:2"}


def test_the_repository_guard_manifest_runs_its_replicas(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient) -> None:
    kubectl("apply", "-f", str(REPO / "docs" / "rbac.yaml"), "-f",
            str(REPO / "docs" / "guard.yaml"))
    kubectl("-n", NS, "rollout", "status", "deploy/dcgm-migrate-guard", "--timeout=60s")
    (rs,) = w.apps(api).list_namespaced_replica_set(NS).items
    assert rs.metadata.name.startswith("dcgm-migrate-guard-")
    pods = _ready_pods_by(w.core(api), "app.kubernetes.io/name=dcgm-migrate-guard")
    assert len(pods) == 2
    assert all(p.metadata.owner_references[0].name == rs.metadata.name for p in pods)
    assert len({p.spec.node_name for p in pods}) == 2  # the replicas on different nodes
    assert sim.store.get(simkinds.DEPLOYMENT, NS, "dcgm-migrate-guard")["status"][
        "readyReplicas"] == 2


def _ready_pods_by(core: Any, selector: str) -> list[Any]:
    return [p for p in core.list_namespaced_pod(NS, label_selector=selector).items
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
