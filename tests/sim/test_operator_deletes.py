"""The GPU Operator imitation deletes the objects of a state its CR disables, as upstream does
(module docstring of dcgm_sim/controllers/operator.py): the ClusterPolicy controller by kind
and name (controllers/object_controls.go), the GPUCluster states by the
`nvidia.com/gpu-operator.state` label (internal/state/state_skel.go `deleteStateRelatedObjects`),
neither checking ownership. Everything here goes through the official client over HTTP; times
are simulated seconds from the sim's clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.operator import OperatorImitation
from tests.sim.conftest import make_client

NS = "gpu-operator"
STATE = "nvidia.com/gpu-operator.state"
PERIOD = 30.0  # the operator's reconcile period, simulated seconds
TIME_SCALE = 0.05  # one period is 1.5 real seconds
# What polling over HTTP and a loaded machine add to a measured reaction, simulated seconds.
SLACK = PERIOD / 4
CP = ("nvidia.com", "v1", "clusterpolicies", "gpu-cluster-policy")
GC = ("nvidia.com", "v1alpha1", "gpuclusters", "gpu-cluster")
RCT = ("resource.k8s.io", "v1", NS, "resourceclaimtemplates")
SMON = ("monitoring.coreos.com", "v1", NS, "servicemonitors")
Obj = dict[str, Any]


class Api:
    """The official client's APIs against one sim, and waits measured on its clock."""

    def __init__(self, sim: SimCluster, api: client.ApiClient) -> None:
        self.sim = sim
        # Typed Any: they take plain dicts as bodies, and the models' Optional fields would
        # need a None check at every step of a path that the sim always fills.
        self.core: Any = client.CoreV1Api(api)
        self.apps: Any = client.AppsV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)  # answers plain dicts

    @property
    def operator(self) -> OperatorImitation:
        op = self.sim.controllers.get("operator")
        assert isinstance(op, OperatorImitation)
        return op

    def now(self) -> float:
        return self.sim.clock.now()

    def set_enabled(self, cr: tuple[str, str, str, str], section: str, on: bool) -> Obj:
        body = {"spec": {section: {"enabled": on}}}
        patched: Obj = self.custom.patch_cluster_custom_object(*cr, body)
        return patched

    def exists(self, what: tuple[str, str]) -> bool:
        kind, name = what
        read: dict[str, Callable[[], object]] = {
            "DaemonSet": lambda: self.apps.read_namespaced_daemon_set(name, NS),
            "Service": lambda: self.core.read_namespaced_service(name, NS),
            "ConfigMap": lambda: self.core.read_namespaced_config_map(name, NS),
            "ResourceClaimTemplate": lambda: self.custom.get_namespaced_custom_object(
                *RCT, name),
            "ServiceMonitor": lambda: self.custom.get_namespaced_custom_object(*SMON, name),
        }
        try:
            read[kind]()
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def wait(self, predicate: Callable[[], bool], sim_seconds: float) -> float:
        """Poll `predicate` for up to `sim_seconds` of simulated time (plus a real-time
        margin, so a slow machine fails on the measured figure, not on a timeout); returns the
        simulated time at which it held."""
        deadline = time.monotonic() + self.sim.clock.to_real(sim_seconds) + 10.0
        while True:
            if predicate():
                return self.now()
            assert time.monotonic() < deadline, "condition never held"
            time.sleep(0.005)

    def wait_reconciles(self, count: int) -> None:
        start = self.operator.reconciles
        self.wait(lambda: self.operator.reconciles >= start + count, count * PERIOD)

    def pods(self, app: str) -> list[Any]:
        return list(self.core.list_namespaced_pod(NS, label_selector=f"app={app}").items)


@pytest.fixture
def make_api(make_sim: Callable[..., SimCluster]) -> Iterator[Callable[[str], Api]]:
    """`make_api(stack)`: a 2-node sim of that stack with the operator reconciling every
    PERIOD simulated seconds, and the official client against it."""
    made: list[client.ApiClient] = []

    def make(stack: str) -> Api:
        sim = make_sim(nodes=2, stack=stack, time_scale=TIME_SCALE,
                       operator_reconcile_seconds=PERIOD)
        api = make_client(sim.url)
        made.append(api)
        return Api(sim, api)

    yield make
    for api in made:
        api.close()


def owner_uid(obj: Any) -> str:
    [ref] = obj.metadata.owner_references
    assert ref.controller is True
    return str(ref.uid)


# ---- ClusterPolicy: by kind and name --------------------------------------------------------


def test_clusterpolicy_dcgm_disabled_deletes_its_daemonset_and_service_and_back(
        make_api: Callable[[str], Api]) -> None:
    k = make_api("clusterpolicy")
    dcgm = [("DaemonSet", "nvidia-dcgm"), ("Service", "nvidia-dcgm")]
    assert all(k.exists(o) for o in dcgm) and len(k.pods("nvidia-dcgm")) == 2

    start = k.now()
    k.set_enabled(CP, "dcgm", False)
    gone = k.wait(lambda: not any(k.exists(o) for o in dcgm), PERIOD)
    assert gone - start <= PERIOD
    k.wait(lambda: not k.pods("nvidia-dcgm"), PERIOD)  # the garbage collector's part
    for other in (("DaemonSet", "nvidia-dcgm-exporter"), ("Service", "nvidia-dcgm-exporter"),
                  ("ServiceMonitor", "nvidia-dcgm-exporter")):
        assert k.exists(other), other
    exporter = k.apps.read_namespaced_daemon_set("nvidia-dcgm-exporter", NS)
    env = {e.name for e in exporter.spec.template.spec.containers[0].env or []}
    assert "DCGM_REMOTE_HOSTENGINE_INFO" not in env  # embedded engine without nvidia-dcgm

    start = k.now()
    cr = k.set_enabled(CP, "dcgm", True)
    back = k.wait(lambda: all(k.exists(o) for o in dcgm), PERIOD)
    assert back - start <= PERIOD
    assert owner_uid(k.apps.read_namespaced_daemon_set("nvidia-dcgm", NS)) == cr["metadata"][
        "uid"]
    assert owner_uid(k.core.read_namespaced_service("nvidia-dcgm", NS)) == cr["metadata"]["uid"]
    k.wait(lambda: len(k.pods("nvidia-dcgm")) == 2, PERIOD)


def test_clusterpolicy_exporter_disabled_deletes_its_servicemonitor_too_and_back(
        make_api: Callable[[str], Api]) -> None:
    k = make_api("clusterpolicy")
    exporter = [("DaemonSet", "nvidia-dcgm-exporter"), ("Service", "nvidia-dcgm-exporter"),
                ("ServiceMonitor", "nvidia-dcgm-exporter")]
    start = k.now()
    k.set_enabled(CP, "dcgmExporter", False)
    gone = k.wait(lambda: not any(k.exists(o) for o in exporter), PERIOD)
    assert gone - start <= PERIOD
    assert k.exists(("DaemonSet", "nvidia-dcgm")) and k.exists(("Service", "nvidia-dcgm"))

    start = k.now()
    k.set_enabled(CP, "dcgmExporter", True)
    back = k.wait(lambda: all(k.exists(o) for o in exporter), PERIOD)
    assert back - start <= PERIOD


def test_clusterpolicy_deletes_a_same_named_service_it_does_not_own(
        make_api: Callable[[str], Api]) -> None:
    """Upstream's `Service()` deletes the asset's name with no ownership check, on every
    reconcile while the state is off: someone else's `nvidia-dcgm` goes too (blunt, but what
    the real operator does); another name stays."""
    k = make_api("clusterpolicy")
    k.set_enabled(CP, "dcgm", False)
    k.wait(lambda: not k.exists(("Service", "nvidia-dcgm")), PERIOD)
    k.wait_reconciles(1)

    def service(name: str) -> Obj:
        return {"metadata": {"name": name, "labels": {"team": "observability"}},
                "spec": {"selector": {"app": "my-dcgm"}, "ports": [{"port": 5555}]}}

    start = k.now()
    mine = k.core.create_namespaced_service(NS, service("nvidia-dcgm"))
    assert not mine.metadata.owner_references
    k.core.create_namespaced_service(NS, service("nvidia-dcgm-mine"))
    gone = k.wait(lambda: not k.exists(("Service", "nvidia-dcgm")), PERIOD + SLACK)
    assert gone - start <= PERIOD + SLACK  # the next periodic reconcile, not a CR event
    k.wait_reconciles(1)
    assert k.exists(("Service", "nvidia-dcgm-mine"))
    assert not k.exists(("DaemonSet", "nvidia-dcgm"))


# ---- GPUCluster: by the state label -----------------------------------------------------------


def test_gpucluster_standalone_dcgm_disabled_deletes_by_state_label_and_back(
        make_api: Callable[[str], Api]) -> None:
    k = make_api("gpucluster")
    dcgm = [("DaemonSet", "nvidia-dcgm-dra"), ("Service", "nvidia-dcgm-dra"),
            ("ResourceClaimTemplate", "nvidia-dcgm-admin")]
    assert all(k.exists(o) for o in dcgm)
    assert k.apps.read_namespaced_daemon_set("nvidia-dcgm-dra", NS).metadata.labels[
        STATE] == "state-dcgm"

    start = k.now()
    k.set_enabled(GC, "dcgm", False)
    gone = k.wait(lambda: not any(k.exists(o) for o in dcgm), PERIOD)
    assert gone - start <= PERIOD
    k.wait(lambda: not k.pods("nvidia-dcgm-dra"), PERIOD)
    for other in (("DaemonSet", "nvidia-dcgm-exporter-dra"),
                  ("Service", "nvidia-dcgm-exporter-dra"),
                  ("ResourceClaimTemplate", "nvidia-dcgm-exporter-admin")):
        assert k.exists(other), other

    start = k.now()
    cr = k.set_enabled(GC, "dcgm", True)
    back = k.wait(lambda: all(k.exists(o) for o in dcgm), PERIOD)
    assert back - start <= PERIOD
    ds = k.apps.read_namespaced_daemon_set("nvidia-dcgm-dra", NS)
    assert ds.metadata.labels[STATE] == "state-dcgm"
    assert owner_uid(ds) == cr["metadata"]["uid"]
    k.wait(lambda: len(k.pods("nvidia-dcgm-dra")) == 2, PERIOD)


def test_gpucluster_cleanup_goes_by_the_label_alone(make_api: Callable[[str], Api]) -> None:
    """`deleteStateRelatedObjects` lists by `nvidia.com/gpu-operator.state` and deletes what it
    finds without an ownership check: a same-named object without the label stays, a labelled
    object nobody owns goes, a labelled `nvidia-dcgm` Service too (upstream spares nothing;
    only the seed author's fork skips it, tests/sim/test_operator_release.py)."""
    k = make_api("gpucluster")
    k.set_enabled(GC, "dcgm", False)
    k.wait(lambda: not k.exists(("DaemonSet", "nvidia-dcgm-dra")), PERIOD)
    k.wait_reconciles(1)

    def service(name: str, labels: dict[str, str]) -> Obj:
        return {"metadata": {"name": name, "labels": labels},
                "spec": {"selector": {"app": "my-dcgm"}, "ports": [{"port": 5555}]}}

    start = k.now()
    k.core.create_namespaced_service(NS, service("nvidia-dcgm-dra", {"team": "obs"}))
    k.core.create_namespaced_service(NS, service("nvidia-dcgm", {STATE: "state-dcgm"}))
    k.core.create_namespaced_config_map(NS, {"metadata": {
        "name": "someone-elses", "labels": {STATE: "state-dcgm"}}, "data": {"a": "b"}})
    gone = k.wait(lambda: not k.exists(("ConfigMap", "someone-elses")), PERIOD + SLACK)
    assert gone - start <= PERIOD + SLACK
    k.wait_reconciles(2)
    assert k.exists(("Service", "nvidia-dcgm-dra"))
    assert not k.exists(("Service", "nvidia-dcgm"))
    assert k.exists(("Service", "nvidia-dcgm-exporter-dra"))  # state-dcgm-exporter is on
