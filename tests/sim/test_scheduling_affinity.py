"""Required inter-pod (anti-)affinity of DaemonSet pods, as the default scheduler filters it
(`dcgm_sim/controllers/interpod.py`): through the API server with the official client on a
cluster without GPU stacks, and the filter's rules on plain dicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from kubernetes import client, config

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import interpod as I
from migrator.model import kinds

NS = "gpu-operator"
NODES = ["gpu-node-0001", "gpu-node-0002", "gpu-node-0003"]
HOST = "kubernetes.io/hostname"
Obj = dict[str, Any]


def _term(labels: dict[str, str], **extra: Any) -> Obj:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": HOST, **extra}


def _daemonset(name: str, *, anti: Obj | None = None, affinity: Obj | None = None,
               labels: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "img:1"}]}
    if anti is not None:
        spec.setdefault("affinity", {})["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [anti]}
    if affinity is not None:
        spec.setdefault("affinity", {})["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [affinity]}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name, **(labels or {})}},
                                  "spec": spec}}}


def _pod(name: str, node: str, labels: dict[str, str], *, anti: Obj | None = None) -> Obj:
    spec: Obj = {"nodeName": node, "containers": [{"name": "c", "image": "img:1"}]}
    if anti is not None:
        spec["affinity"] = {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [anti]}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels}, "spec": spec}


@pytest.fixture
def cluster(make_sim: Callable[..., SimCluster]) -> SimCluster:
    return make_sim(nodes=3, stack="none")


def _apis(sim: SimCluster) -> tuple[client.CoreV1Api, client.AppsV1Api]:
    api = config.new_client_from_config(sim.kubeconfig)
    return client.CoreV1Api(api), client.AppsV1Api(api)


def _pods(sim: SimCluster, app: str) -> list[Obj]:
    return [p for p in sim.store.list(kinds.POD, NS)[0]
            if (p["metadata"].get("labels") or {}).get("app") == app
            and not p["metadata"].get("deletionTimestamp")]


def _ready(pod: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _settled(sim: SimCluster, app: str, ready: int, pending: int) -> list[Obj]:
    """Wait until `app` has `ready` Ready pods and `pending` unbound ones; the unbound ones."""
    def done() -> list[Obj]:
        pods = _pods(sim, app)
        unbound = [p for p in pods if not p["spec"].get("nodeName")]
        if sum(map(_ready, pods)) == ready and len(unbound) == pending:
            return unbound or [{}]
        return []
    return [p for p in sim.wait_for(done, timeout=20) if p]


def _scheduled(pod: Obj) -> Obj:
    return next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")


def _message(reason: str) -> str:
    victims = ("3 Preemption is not helpful for scheduling" if reason == I.AFFINITY_RULES else
               "1 No preemption victims found for incoming pod, 2 Preemption is not helpful for "
               "scheduling")
    return (f"0/3 nodes are available: 1 {reason}, 2 node(s) didn't satisfy plugin(s) "
            f"[NodeAffinity]. preemption: 0/3 nodes are available: {victims}.")


def test_a_daemonset_pod_anti_affine_to_a_pod_on_its_node_stays_pending_until_it_goes(
        cluster: SimCluster) -> None:
    core, apps = _apis(cluster)
    core.create_namespaced_pod(NS, cast(client.V1Pod, _pod(
        "holder", NODES[0], {"app.kubernetes.io/component": "nvidia-dcgm"})))
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, _daemonset(
        "dcgm", anti=_term({"app.kubernetes.io/component": "nvidia-dcgm"}),
        labels={"app.kubernetes.io/component": "nvidia-dcgm"})))
    [pending] = _settled(cluster, "dcgm", ready=2, pending=1)
    cond = _scheduled(pending)
    assert (pending["status"]["phase"], cond["status"], cond["reason"]) == (
        "Pending", "False", "Unschedulable")
    assert cond["message"] == _message(I.ANTI_AFFINITY_RULES)
    assert I.target_node(pending) == NODES[0]
    def counts() -> tuple[int | None, int | None, int | None]:
        status = apps.read_namespaced_daemon_set_status("dcgm", NS).status
        assert status is not None
        return (status.desired_number_scheduled, status.current_number_scheduled,
                status.number_ready)

    # The pending pod is counted on its node, as upstream does (once the controller has
    # written the status of what the kubelets reported).
    assert cluster.wait_for(lambda: counts() == (3, 3, 2), timeout=20), counts()

    core.delete_namespaced_pod("holder", NS, grace_period_seconds=0)
    _settled(cluster, "dcgm", ready=3, pending=0)
    bound = next(p for p in _pods(cluster, "dcgm") if p["metadata"]["name"]
                 == pending["metadata"]["name"])
    assert bound["spec"]["nodeName"] == NODES[0] and _scheduled(bound)["status"] == "True"


def test_an_existing_pods_anti_affinity_keeps_a_matching_pod_off_its_node(
        cluster: SimCluster) -> None:
    """The symmetric rule: the incoming pod has no affinity of its own."""
    core, apps = _apis(cluster)
    core.create_namespaced_pod(NS, cast(client.V1Pod, _pod(
        "holder", NODES[1], {"app": "holder"}, anti=_term({"app": "exporter"}))))
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, _daemonset("exporter")))
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, _daemonset("other")))
    [pending] = _settled(cluster, "exporter", ready=2, pending=1)
    assert I.target_node(pending) == NODES[1]
    assert _scheduled(pending)["message"] == _message(I.EXISTING_ANTI_AFFINITY_RULES)
    _settled(cluster, "other", ready=3, pending=0)  # not matched by the term: unaffected

    core.delete_namespaced_pod("holder", NS, grace_period_seconds=0)
    _settled(cluster, "exporter", ready=3, pending=0)


def test_required_pod_affinity_places_pods_only_beside_a_matching_pod(
        cluster: SimCluster) -> None:
    core, apps = _apis(cluster)
    core.create_namespaced_pod(NS, cast(client.V1Pod, _pod("engine", NODES[2],
                                                           {"role": "engine"})))
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, _daemonset(
        "sidecar", affinity=_term({"role": "engine"}))))
    pending = _settled(cluster, "sidecar", ready=1, pending=2)
    assert {I.target_node(p) for p in pending} == set(NODES[:2])
    assert all(_scheduled(p)["message"] == _message(I.AFFINITY_RULES) for p in pending)


def test_pods_without_pod_affinity_are_bound_at_once_as_before(cluster: SimCluster) -> None:
    core, apps = _apis(cluster)
    core.create_namespaced_pod(NS, cast(client.V1Pod, _pod("holder", NODES[0],
                                                           {"role": "plain"})))
    apps.create_namespaced_daemon_set(NS, cast(client.V1DaemonSet, _daemonset(
        "plain", labels={"role": "plain"})))
    _settled(cluster, "plain", ready=3, pending=0)
    for pod in _pods(cluster, "plain"):
        assert pod["spec"]["nodeName"] and _scheduled(pod)["status"] == "True"


# ---- the filter on plain dicts ---------------------------------------------------------------


def _node(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": {HOST: name, **labels}}}


def _placed(name: str, node: str, labels: dict[str, str], ns: str = NS,
            anti: Obj | None = None) -> Obj:
    pod = _pod(name, node, labels, anti=anti)
    pod["metadata"].update(namespace=ns, uid=f"uid-{name}")
    return pod


def _incoming(labels: dict[str, str], *, anti: Obj | None = None,
              affinity: Obj | None = None) -> Obj:
    pod = _daemonset("x", anti=anti, affinity=affinity, labels=labels)["spec"]["template"]
    pod["metadata"]["namespace"] = NS
    return cast(Obj, pod)


def _placement(*pods: Obj, nodes: list[Obj] | None = None,
               namespaces: dict[str, dict[str, str]] | None = None) -> I.Placement:
    nodes = nodes or [_node(n, zone="a" if n != NODES[2] else "b") for n in NODES]
    placement = I.Placement({n["metadata"]["name"]: n for n in nodes},
                            lambda ns: (namespaces or {}).get(ns))
    for pod in pods:
        placement.put(pod)
    return placement


def test_terms_default_to_the_pods_namespace_and_a_namespace_selector_widens_them() -> None:
    elsewhere = _placed("p", NODES[0], {"k": "v"}, ns="monitoring")
    placement = _placement(elsewhere, namespaces={"monitoring": {"team": "obs"}})
    assert placement.check(_incoming({}, anti=_term({"k": "v"})), NODES[0]) is None
    wide = _term({"k": "v"}, namespaceSelector={})
    assert placement.check(_incoming({}, anti=wide), NODES[0]) == I.ANTI_AFFINITY_RULES
    picked = _term({"k": "v"}, namespaceSelector={"matchLabels": {"team": "obs"}})
    assert placement.check(_incoming({}, anti=picked), NODES[0]) == I.ANTI_AFFINITY_RULES
    named = _term({"k": "v"}, namespaces=["monitoring"])
    assert placement.check(_incoming({}, anti=named), NODES[0]) == I.ANTI_AFFINITY_RULES


def test_topology_keys_other_than_the_hostname_span_their_domain() -> None:
    placement = _placement(_placed("p", NODES[0], {"k": "v"}))
    zone = {"labelSelector": {"matchLabels": {"k": "v"}}, "topologyKey": "zone"}
    assert placement.check(_incoming({}, anti=zone), NODES[1]) == I.ANTI_AFFINITY_RULES
    assert placement.check(_incoming({}, anti=zone), NODES[2]) is None
    assert placement.check(_incoming({}, affinity=zone), NODES[1]) is None
    assert placement.check(_incoming({}, affinity=zone), NODES[2]) == I.AFFINITY_RULES
    missing = {"labelSelector": {"matchLabels": {"k": "v"}}, "topologyKey": "rack"}
    assert placement.check(_incoming({}, anti=missing), NODES[0]) is None
    assert placement.check(_incoming({}, affinity=missing), NODES[0]) == I.AFFINITY_RULES


def test_match_label_keys_and_the_first_pod_of_a_self_affine_group() -> None:
    old = _placed("old", NODES[0], {"app": "dcgm", "rev": "1"})
    placement = _placement(old)
    by_rev = _term({"app": "dcgm"}, matchLabelKeys=["rev"])
    assert placement.check(_incoming({"app": "dcgm", "rev": "2"}, anti=by_rev), NODES[0]) is None
    assert placement.check(_incoming({"app": "dcgm", "rev": "1"}, anti=by_rev),
                           NODES[0]) == I.ANTI_AFFINITY_RULES
    self_affine = _term({"group": "g"})
    assert _placement().check(_incoming({"group": "g"}, affinity=self_affine), NODES[1]) is None
    assert _placement().check(_incoming({}, affinity=self_affine), NODES[1]) == I.AFFINITY_RULES


def test_terminal_pods_do_not_count_and_terminating_ones_do() -> None:
    done = _placed("done", NODES[0], {"k": "v"})
    done["status"] = {"phase": "Succeeded"}
    leaving = _placed("leaving", NODES[1], {"k": "v"})
    leaving["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    placement = _placement(done, leaving)
    anti = _term({"k": "v"})
    assert placement.check(_incoming({}, anti=anti), NODES[0]) is None
    assert placement.check(_incoming({}, anti=anti), NODES[1]) == I.ANTI_AFFINITY_RULES
