"""The `shared-services-fork` GPU Operator release (the seed author's fork,
controllers/sharedservices.py) and the choice of release: an upgrade of a
running sim through `PUT /sim/v1/operator`, observed through the official client over HTTP —
DaemonSets gain the component label and roll once, the shared Services are created or adopted
(label, non-controller ownerReferences, selector, clusterIP kept), the `-dra` Services go, a
foreign same-named Service is refused, a conflicting exporter setting is reported and left, a
steady state writes nothing, and deleting the CRs removes their references, then the Services.
The `mixed` clusters run `future-coexistence` before the upgrade: the shipped release refuses a
ClusterPolicy and a GPUCluster at once (tests/sim/test_shipped_operator.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import rendering as R
from dcgm_sim.controllers.operator import OperatorImitation
from dcgm_sim.controllers.sharedservices import SHARED_RESYNC_SECONDS
from dcgm_sim.serve import ServeError, ServeOptions, build
from dcgm_sim.store import Event
from dcgm_sim_cli import sim as sim_cmd
from migrator.model import kinds
from tests.sim.conftest import Raw, make_client

NS = "gpu-operator"
Obj = dict[str, Any]
COMPONENT = "app.kubernetes.io/component"
DS_COMPONENTS = {"nvidia-dcgm": "nvidia-dcgm", "nvidia-dcgm-dra": "nvidia-dcgm",
                 "nvidia-dcgm-exporter": "nvidia-dcgm-exporter",
                 "nvidia-dcgm-exporter-dra": "nvidia-dcgm-exporter"}
SHARED = ("nvidia-dcgm", "nvidia-dcgm-exporter")
DRA = {"nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"}
PERIOD = 5.0  # the informers' resync, shortened (simulated seconds)
FORK, FUTURE = "shared-services-fork", "future-coexistence"
MakeSim = Callable[..., SimCluster]


@pytest.fixture
def make_sim() -> Iterator[MakeSim]:
    started: list[SimCluster] = []

    def make(stack: str, nodes: int = 2, **kw: Any) -> SimCluster:
        sim = SimCluster(nodes=nodes, stack=stack, time_scale=0.01,
                         operator_reconcile_seconds=PERIOD, **kw).start()
        started.append(sim)
        sim.wait_idle(30)
        return sim

    yield make
    for sim in started:
        sim.stop()


def core(sim: SimCluster) -> Any:  # the typed stubs would need a None check per field
    return client.CoreV1Api(make_client(sim.url))


def apps(sim: SimCluster) -> Any:
    return client.AppsV1Api(make_client(sim.url))


def custom(sim: SimCluster) -> Any:
    return client.CustomObjectsApi(make_client(sim.url))


def services(sim: SimCluster) -> dict[str, Any]:
    return {s.metadata.name: s for s in core(sim).list_namespaced_service(NS).items}


def operator(sim: SimCluster) -> OperatorImitation:
    op = sim.controllers.operator
    assert op is not None
    return op


def upgrade(sim: SimCluster) -> None:
    code, status, _ = Raw(sim.url)("PUT", "/sim/v1/operator", {"release": FORK})
    assert code == 200 and status["release"] == FORK


def pods_by_ds(sim: SimCluster) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pod in core(sim).list_namespaced_pod(NS).items:
        for ref in pod.metadata.owner_references or []:
            if ref.kind == "DaemonSet":
                out.setdefault(ref.name, set()).add(pod.metadata.uid)
    return out


def rolled(sim: SimCluster) -> bool:
    """Every DCGM DaemonSet renders the component label and is rolled out with it."""
    pods = core(sim).list_namespaced_pod(NS).items
    for ds in apps(sim).list_namespaced_daemon_set(NS).items:
        if ds.metadata.name not in DS_COMPONENTS:
            continue
        want = DS_COMPONENTS[ds.metadata.name]
        if (ds.metadata.labels or {}).get(COMPONENT) != want:
            return False
        if ds.spec.template.metadata.labels.get(COMPONENT) != want:
            return False
        st = ds.status
        if (st.observed_generation or 0) < ds.metadata.generation or not (
                st.desired_number_scheduled == (st.updated_number_scheduled or 0)
                == (st.number_available or 0) == (st.current_number_scheduled or 0)):
            return False
        mine = [p for p in pods
                if any(r.name == ds.metadata.name for r in p.metadata.owner_references or [])]
        if len(mine) != st.desired_number_scheduled or any(
                p.metadata.labels.get(COMPONENT) != want or p.metadata.deletion_timestamp
                for p in mine):
            return False
    return True


def wait_reconciles(sim: SimCluster, count: int) -> None:
    start = operator(sim).reconciles
    sim.wait_for(lambda: operator(sim).reconciles >= start + count, timeout=30)


def shared_ready(sim: SimCluster, *names: str) -> bool:
    svcs = services(sim)
    return all(n in svcs and svcs[n].spec.selector == {COMPONENT: n} for n in names)


def owners(svc: Any) -> list[tuple[str, str, Any, Any]]:
    return [(r.kind, r.name, r.controller, r.block_owner_deletion)
            for r in svc.metadata.owner_references or []]


def assert_shared(svc: Any, name: str, owner_kinds: list[str]) -> None:
    assert svc.metadata.labels[R.SHARED_SERVICE_LABEL] == "true"
    assert svc.metadata.labels[COMPONENT] == name
    assert R.STATE_LABEL not in svc.metadata.labels
    assert svc.spec.selector == {COMPONENT: name}
    assert [o[0] for o in owners(svc)] == owner_kinds
    assert all(o[2] is None and o[3] is None for o in owners(svc))  # not controller refs


# ---- upgrades --------------------------------------------------------------------------------


def test_upgrade_of_a_gpucluster_sim(make_sim: MakeSim) -> None:
    sim = make_sim("gpucluster")
    before = pods_by_ds(sim)
    generations = {d.metadata.name: d.metadata.generation
                   for d in apps(sim).list_namespaced_daemon_set(NS).items}
    assert set(services(sim)) >= DRA
    upgrade(sim)
    sim.wait_for(lambda: rolled(sim) and shared_ready(sim, *SHARED)
                 and not DRA & set(services(sim)), timeout=60)
    svcs = services(sim)
    assert_shared(svcs["nvidia-dcgm"], "nvidia-dcgm", ["GPUCluster"])
    assert svcs["nvidia-dcgm"].spec.internal_traffic_policy == "Local"
    assert_shared(svcs["nvidia-dcgm-exporter"], "nvidia-dcgm-exporter", ["GPUCluster"])
    assert svcs["nvidia-dcgm-exporter"].metadata.annotations == {"prometheus.io/scrape": "true"}
    after = pods_by_ds(sim)
    for name, uids in before.items():
        assert len(after[name]) == len(uids) and not after[name] & uids  # every pod replaced
    wait_reconciles(sim, 3)
    for d in apps(sim).list_namespaced_daemon_set(NS).items:
        assert d.metadata.generation == generations[d.metadata.name] + 1  # rolled once
    assert pods_by_ds(sim) == after
    # the shared exporter Service's endpoints are the DRA pods, found by the component label
    sim.wait_idle(30)
    eps = core(sim).read_namespaced_endpoints("nvidia-dcgm-exporter", NS)
    addresses = [a for s in eps.subsets or [] for a in s.addresses or []]
    assert {a.target_ref.name for a in addresses} == {
        p.metadata.name for p in core(sim).list_namespaced_pod(
            NS, label_selector="app=nvidia-dcgm-exporter-dra").items}


def test_upgrade_of_a_clusterpolicy_sim_adopts_and_keeps_the_cluster_ip(
        make_sim: MakeSim) -> None:
    sim = make_sim("clusterpolicy")
    old = services(sim)
    assert old["nvidia-dcgm"].metadata.owner_references[0].controller is True
    upgrade(sim)
    sim.wait_for(lambda: rolled(sim) and shared_ready(sim, *SHARED), timeout=60)
    wait_reconciles(sim, 2)  # the ClusterPolicy controller no longer reverts them
    svcs = services(sim)
    for name in SHARED:
        assert_shared(svcs[name], name, ["ClusterPolicy"])
        assert svcs[name].metadata.uid == old[name].metadata.uid
        assert svcs[name].spec.cluster_ip == old[name].spec.cluster_ip
        assert svcs[name].spec.cluster_ips == old[name].spec.cluster_ips
        assert svcs[name].spec.ip_families == old[name].spec.ip_families
        assert svcs[name].metadata.labels["app"] == name
    assert svcs["nvidia-dcgm"].spec.internal_traffic_policy == "Local"


def test_upgrade_of_a_mixed_sim_then_deleting_the_crs(make_sim: MakeSim) -> None:
    sim = make_sim("mixed", operator_release=FUTURE)
    old = services(sim)
    upgrade(sim)
    sim.wait_for(lambda: rolled(sim) and shared_ready(sim, *SHARED)
                 and not DRA & set(services(sim)), timeout=60)
    svcs = services(sim)
    for name in SHARED:
        assert_shared(svcs[name], name, ["ClusterPolicy", "GPUCluster"])
        assert svcs[name].spec.cluster_ip == old[name].spec.cluster_ip
    sim.wait_idle(30)
    eps = core(sim).read_namespaced_endpoints("nvidia-dcgm", NS)
    behind = {a.target_ref.name.rsplit("-", 1)[0] for s in eps.subsets or []
              for a in s.addresses or []}
    assert behind == {"nvidia-dcgm", "nvidia-dcgm-dra"}  # both stacks' pods, one name

    api = custom(sim)
    api.delete_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
    sim.wait_for(lambda: all([o[0] for o in owners(services(sim)[n])] == ["ClusterPolicy"]
                             for n in SHARED), timeout=30)
    assert services(sim)["nvidia-dcgm"].metadata.uid == old["nvidia-dcgm"].metadata.uid

    api.delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "gpu-cluster-policy")
    sim.wait_for(lambda: not set(SHARED) & set(services(sim)), timeout=30)


def test_sim_cluster_started_with_the_release_upgrades_at_its_first_reconcile() -> None:
    with SimCluster(nodes=1, stack="gpucluster", time_scale=0.01,
                    operator_reconcile_seconds=PERIOD, operator_release=FORK) as sim:
        assert sim.operator_release == FORK
        sim.wait_for(lambda: rolled(sim) and shared_ready(sim, *SHARED), timeout=60)
        sim.set_operator_release("shipped")  # a downgrade: the -dra Services come back
        sim.wait_for(lambda: set(services(sim)) >= DRA, timeout=30)
        assert sim.operator_release == "shipped"


# ---- adoption rules --------------------------------------------------------------------------


def _service(name: str, **meta: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NS, **meta},
            "spec": {"selector": {R.EXPORTER_LABEL: "true"},
                     "ports": [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400}]}}


def test_the_tools_alias_is_adopted_and_its_selector_replaced(make_sim: MakeSim) -> None:
    sim = make_sim("gpucluster")
    gc = custom(sim).get_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters",
                                               "gpu-cluster")
    ref = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
           "name": "gpu-cluster", "uid": gc["metadata"]["uid"]}
    alias = core(sim).create_namespaced_service(NS, _service(
        "nvidia-dcgm-exporter", labels={"app.kubernetes.io/managed-by": "dcgm-migrate"},
        ownerReferences=[ref]))
    upgrade(sim)
    sim.wait_for(lambda: shared_ready(sim, "nvidia-dcgm-exporter"), timeout=30)
    svc = services(sim)["nvidia-dcgm-exporter"]
    assert svc.metadata.uid == alias.metadata.uid
    assert svc.spec.cluster_ip == alias.spec.cluster_ip
    assert svc.metadata.labels["app.kubernetes.io/managed-by"] == "dcgm-migrate"
    assert_shared(svc, "nvidia-dcgm-exporter", ["GPUCluster"])


def test_a_foreign_same_named_service_is_not_adopted(
        make_sim: MakeSim, caplog: pytest.LogCaptureFixture) -> None:
    sim = make_sim("gpucluster")
    foreign = core(sim).create_namespaced_service(NS, _service("nvidia-dcgm"))
    caplog.set_level(logging.WARNING, logger="dcgm_sim.controllers.sharedservices")
    upgrade(sim)
    sim.wait_for(lambda: shared_ready(sim, "nvidia-dcgm-exporter"), timeout=30)
    wait_reconciles(sim, 2)
    svc = core(sim).read_namespaced_service("nvidia-dcgm", NS)
    assert svc.metadata.resource_version == foreign.metadata.resource_version
    assert svc.spec.selector == {R.EXPORTER_LABEL: "true"}
    assert "refusing to adopt unmanaged Service nvidia-dcgm" in caplog.text
    assert any("refusing to adopt" in e for e in operator(sim).shared_errors)
    assert "nvidia-dcgm-dra" in services(sim)  # the sync stopped at the error


def test_a_conflicting_exporter_setting_is_reported_and_the_service_left(
        make_sim: MakeSim, caplog: pytest.LogCaptureFixture) -> None:
    sim = make_sim("mixed", operator_release=FUTURE)
    upgrade(sim)
    sim.wait_for(lambda: shared_ready(sim, *SHARED), timeout=30)
    sim.wait_idle(30)
    before = services(sim)["nvidia-dcgm-exporter"]
    caplog.set_level(logging.WARNING, logger="dcgm_sim.controllers.sharedservices")
    node_port = {"spec": {"dcgmExporter": {"service": {"type": "NodePort"}}}}
    custom(sim).patch_cluster_custom_object("nvidia.com", "v1alpha1", "gpuclusters",
                                            "gpu-cluster", node_port)
    sim.wait_for(lambda: "conflicting DCGM Exporter Service settings" in caplog.text,
                 timeout=30)
    code, status, _ = Raw(sim.url)("GET", "/sim/v1/operator")
    assert code == 200 and any("conflicting" in e for e in status["sharedServiceErrors"])
    wait_reconciles(sim, 2)
    after = services(sim)["nvidia-dcgm-exporter"]
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.spec.type == "ClusterIP"
    # both agree again: NodePort, a nodePort allocated and then kept
    custom(sim).patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies",
                                            "gpu-cluster-policy", node_port)
    sim.wait_for(lambda: services(sim)["nvidia-dcgm-exporter"].spec.type == "NodePort",
                 timeout=30)
    port = services(sim)["nvidia-dcgm-exporter"].spec.ports[0].node_port
    assert port
    wait_reconciles(sim, 2)
    assert services(sim)["nvidia-dcgm-exporter"].spec.ports[0].node_port == port
    assert not operator(sim).shared_errors


def test_steady_state_writes_nothing(make_sim: MakeSim) -> None:
    sim = make_sim("mixed", operator_release=FUTURE)
    upgrade(sim)
    sim.wait_for(lambda: rolled(sim) and shared_ready(sim, *SHARED)
                 and not DRA & set(services(sim)), timeout=60)
    sim.wait_idle(30)
    events: list[Event] = []
    watched = {kinds.SERVICE.key, kinds.DAEMONSET.key}

    def record(ev: Event) -> None:
        if ev.resource.key in watched:
            events.append(ev)

    op = operator(sim)
    began, shared, reconciles = sim.clock.now(), op.shared_reconciles, op.reconciles
    sim.store.subscribe(record)
    try:
        sim.wait_for(lambda: sim.clock.now() - began > SHARED_RESYNC_SECONDS + 2 * PERIOD
                     and op.shared_reconciles > shared, timeout=30)
    finally:
        sim.store.unsubscribe(record)
    assert op.reconciles - reconciles >= 5
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == []


# ---- the API ---------------------------------------------------------------------------------


def test_operator_endpoint_and_errors(make_sim: MakeSim) -> None:
    sim = make_sim("gpucluster", nodes=1)
    raw = Raw(sim.url)
    code, status, _ = raw("GET", "/sim/v1/operator")
    assert code == 200 and status["release"] == "shipped"
    assert status["releases"] == ["shipped", "future-coexistence", "shared-services-fork"]
    assert raw("PUT", "/sim/v1/operator", {"release": "nope"})[0] == 400
    assert raw("PUT", "/sim/v1/operator", {})[0] == 400
    assert raw("DELETE", "/sim/v1/operator")[0] == 405
    with pytest.raises(ValueError, match="unknown operator release"):
        sim.set_operator_release("nope")
    with SimCluster(nodes=1) as off:
        assert Raw(off.url)("GET", "/sim/v1/operator")[0] == 404
        with pytest.raises(RuntimeError):
            off.set_operator_release(FORK)
    with pytest.raises(ValueError, match="which the shipped GPU Operator release refuses"):
        SimCluster(nodes=1, stack="mixed")
    with pytest.raises(ValueError, match="unknown operator release 'current'"):
        SimCluster(nodes=1, operator_release="current")
    with SimCluster(nodes=2, stack="both", operator_release=FUTURE) as off:  # no imitation
        assert off.operator_release == FUTURE


def test_serve_option(monkeypatch: pytest.MonkeyPatch) -> None:
    op = build(ServeOptions(nodes=1, operator_release=FORK)).controllers.operator
    assert op is not None and op.release == FORK
    with pytest.raises(ServeError, match="--operator-release must be one of"):
        build(ServeOptions(nodes=1, operator_release="next"))
    with pytest.raises(ServeError, match="pass --operator-release future-coexistence"):
        build(ServeOptions(nodes=1, stack="both"))
    op = build(ServeOptions(nodes=1, stack="both", operator_release=FUTURE)).controllers.operator
    assert op is not None and op.release == FUTURE
    seen: list[ServeOptions] = []

    def fake_serve(options: ServeOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(sim_cmd, "serve", fake_serve)
    assert sim_cmd.main(["serve", "--nodes", "1"]) == 0
    assert sim_cmd.main(["serve", "--nodes", "1", "--operator-release", FORK]) == 0
    assert [o.operator_release for o in seen] == ["shipped", FORK]
