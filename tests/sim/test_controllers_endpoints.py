"""The simulated endpoints controller, read over HTTP through the official client: seeded
Endpoints equal the controller's, ready / not-ready / terminating / terminal / no-IP pods,
publishNotReadyAddresses, named target ports and repacking, selector changes, Services deleted
or without a selector, the 1000-address cap (the pure parts: test_controllers_endpointsubsets)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import endpointsobject as O
from dcgm_sim.controllers.endpoints import EndpointsController
from dcgm_sim.kinds import ENDPOINTS
from dcgm_sim.seed import seed
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, make_client

Obj = dict[str, Any]
WHEN = "2025-01-01T00:00:00Z"


def wait_idle(controller: EndpointsController, timeout: float = 10.0) -> None:
    deadline, streak = time.monotonic() + timeout, 0
    while time.monotonic() < deadline and streak < 2:
        streak = streak + 1 if controller.idle() else 0
        time.sleep(0.005)
    assert streak >= 2, "endpoints controller still busy"


@pytest.fixture
def controller(store: Store) -> Iterator[EndpointsController]:
    c = EndpointsController(store, SimClock(0.01))
    c.start()
    yield c
    c.stop()


@pytest.fixture
def settle(controller: EndpointsController) -> Callable[[], None]:
    return lambda: wait_idle(controller)


def _pod(name: str, app: str = "web", *, node: str = "node-1",
         ports: list[Obj] | None = None) -> Any:
    container: Obj = {"name": "c", "image": "img:1"}
    if ports:
        container["ports"] = ports
    return {"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": node, "containers": [container]}}


def _status(ip: str | None, *, ready: bool = True, phase: str = "Running") -> Any:
    status: Obj = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": WHEN}]}
    if ip:
        status |= {"podIP": ip, "podIPs": [{"ip": ip}]}
    return {"status": status}


def _service(name: str = "web", app: str = "web", **spec: Any) -> Any:
    body: Obj = {"selector": {"app": app}, "ports": [{"name": "http", "port": 80,
                                                      "targetPort": 8080}]}
    body.update(spec)
    return {"metadata": {"name": name, "labels": {"team": "gpu"}}, "spec": body}


def _start(core: client.CoreV1Api, name: str, ip: str | None, app: str = "web",
           **status: Any) -> None:
    core.create_namespaced_pod(NS, _pod(name, app))
    core.patch_namespaced_pod_status(name, NS, _status(ip, **status))


def _endpoints(core: client.CoreV1Api, name: str = "web") -> Any:
    return _plain(core, core.read_namespaced_endpoints(name, NS))


def _plain(core: client.CoreV1Api, model: Any) -> Any:
    """A client model as the JSON dict it came from."""
    return core.api_client.sanitize_for_serialization(model)


def _uid(core: client.CoreV1Api, pod: str) -> str:
    return str(_plain(core, core.read_namespaced_pod(pod, NS))["metadata"]["uid"])


def _body(patch: Obj) -> Any:
    return patch


def _names(ep: Obj, field: str = "addresses") -> list[str]:
    return [a["targetRef"]["name"] for s in ep.get("subsets") or [] for a in s.get(field) or []]


def test_seeded_endpoints_equal_what_the_controller_writes() -> None:
    store = Store()
    seed(store, nodes=4, stack="mixed", release="future-coexistence")
    seeded = {o["metadata"]["name"]: o for o in store.list(ENDPOINTS, NS)[0]}
    assert set(seeded) == {"nvidia-dcgm", "nvidia-dcgm-exporter", "nvidia-dcgm-dra",
                           "nvidia-dcgm-exporter-dra"}
    for name in seeded:
        store.delete(ENDPOINTS, NS, name)
    c = EndpointsController(store, SimClock(0.01))
    with ApiServer(store) as server, make_client(server.url) as api:
        c.start()
        try:
            wait_idle(c)
            core = client.CoreV1Api(api)
            for name, want in seeded.items():
                got = _endpoints(core, name)
                assert got["subsets"] == want["subsets"]
                for field in ("labels", "annotations"):
                    assert got["metadata"][field] == want["metadata"][field]
                assert "ownerReferences" not in got["metadata"]
        finally:
            c.stop()


def test_pod_states(core: client.CoreV1Api, settle: Callable[[], None]) -> None:
    core.create_namespaced_service(NS, _service())
    _start(core, "ready", "10.0.0.3")
    _start(core, "unready", "10.0.0.2", ready=False)
    _start(core, "pending", None, ready=False, phase="Pending")
    _start(core, "failed", "10.0.0.4", phase="Failed")
    _start(core, "leaving", "10.0.0.1")
    core.delete_namespaced_pod("leaving", NS)  # graceful: Terminating (no kubelet here)
    settle()
    ep = _endpoints(core)
    assert ep["metadata"]["labels"] == {"team": "gpu"}
    assert ep["subsets"] == [{
        "addresses": [{"ip": "10.0.0.3", "nodeName": "node-1", "targetRef": {
            "kind": "Pod", "namespace": NS, "name": "ready", "uid": _uid(core, "ready")}}],
        "notReadyAddresses": [{"ip": "10.0.0.2", "nodeName": "node-1", "targetRef": {
            "kind": "Pod", "namespace": NS, "name": "unready",
            "uid": _uid(core, "unready")}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}]
    core.patch_namespaced_pod_status("pending", NS, _status("10.0.0.5"))  # gets an IP, Ready
    core.patch_namespaced_pod_status("unready", NS, _status("10.0.0.2"))
    settle()
    ep = _endpoints(core)
    assert _names(ep) == ["unready", "ready", "pending"]  # by IP
    assert _names(ep, "notReadyAddresses") == []


def test_last_change_trigger_time(store: Store, core: client.CoreV1Api,
                                  settle: Callable[[], None]) -> None:
    core.create_namespaced_service(NS, _service())
    settle()

    def trigger() -> str | None:
        return (_endpoints(core)["metadata"].get("annotations") or {}).get(
            O.TRIGGER_TIME_ANNOTATION)

    assert trigger() == store.get(kinds.SERVICE, NS, "web")["metadata"]["creationTimestamp"]
    _start(core, "a", "10.0.0.1")  # Ready since WHEN
    settle()
    assert trigger() == WHEN
    later: Any = {"status": {"conditions": [{"type": "Ready", "status": "False",
                                        "lastTransitionTime": "2025-01-01T00:05:00Z"}]}}
    core.patch_namespaced_pod_status("a", NS, later)
    settle()
    assert trigger() == "2025-01-01T00:05:00Z"
    core.delete_namespaced_pod("a", NS)  # a change without a new trigger time: cleared
    settle()
    assert trigger() is None and "subsets" not in _endpoints(core)


def test_publish_not_ready_addresses(core: client.CoreV1Api, settle: Callable[[], None]) -> None:
    core.create_namespaced_service(NS, _service(publishNotReadyAddresses=True, clusterIP="None"))
    _start(core, "a", "10.0.0.1")
    _start(core, "b", "10.0.0.2", ready=False)
    _start(core, "c", "10.0.0.3")
    _start(core, "d", None, ready=False, phase="Pending")
    core.delete_namespaced_pod("c", NS)
    settle()
    ep = _endpoints(core)
    assert _names(ep) == ["a", "b", "c"]  # not ready and terminating too
    assert _names(ep, "notReadyAddresses") == []
    assert ep["metadata"]["labels"] == {"team": "gpu", O.HEADLESS_LABEL: ""}


def test_named_target_port_and_repacking(core: client.CoreV1Api,
                                         settle: Callable[[], None]) -> None:
    core.create_namespaced_service(NS, _service(ports=[
        {"name": "metrics", "port": 9400, "targetPort": "metrics"},
        {"name": "http", "port": 80, "targetPort": 8080}]))
    core.create_namespaced_pod(NS, _pod("named", ports=[
        {"name": "metrics", "containerPort": 9401}]))
    core.patch_namespaced_pod_status("named", NS, _status("10.0.0.1"))
    _start(core, "plain", "10.0.0.2")  # no container port named metrics
    settle()
    ep = _endpoints(core)
    by_ports = {tuple(p["name"] for p in s["ports"]): [a["targetRef"]["name"]
                                                        for a in s["addresses"]]
                for s in ep["subsets"]}
    assert by_ports == {("http",): ["named", "plain"], ("metrics",): ["named"]}
    metrics = next(s for s in ep["subsets"] if s["ports"][0]["name"] == "metrics")
    assert metrics["ports"] == [{"name": "metrics", "port": 9401, "protocol": "TCP"}]


def test_selector_change_moves_addresses(core: client.CoreV1Api,
                                         settle: Callable[[], None]) -> None:
    core.create_namespaced_service(NS, _service())
    _start(core, "old", "10.0.0.1", app="web")
    _start(core, "new", "10.0.0.2", app="web-v2")
    settle()
    assert _names(_endpoints(core)) == ["old"]
    core.patch_namespaced_service("web", NS, _body({"spec": {"selector": {"app": "web-v2"}}}))
    settle()
    assert _names(_endpoints(core)) == ["new"]
    core.patch_namespaced_pod("old", NS, _body({"metadata": {"labels": {"app": "web-v2"}}}))
    settle()
    assert _names(_endpoints(core)) == ["old", "new"]


def test_deleted_service_takes_its_endpoints(core: client.CoreV1Api,
                                             settle: Callable[[], None]) -> None:
    core.create_namespaced_service(NS, _service())
    _start(core, "a", "10.0.0.1")
    settle()
    core.delete_namespaced_endpoints("web", NS)  # onEndpointsDelete: written again
    settle()
    assert _names(_endpoints(core)) == ["a"]
    core.delete_namespaced_service("web", NS)
    settle()
    assert not core.list_namespaced_endpoints(NS).items


def test_selectorless_service_endpoints_are_left_alone(core: client.CoreV1Api,
                                                        settle: Callable[[], None]) -> None:
    svc = _service()
    del svc["spec"]["selector"]
    core.create_namespaced_service(NS, svc)
    manual: Any = {"metadata": {"name": "web"}, "subsets": [
        {"addresses": [{"ip": "192.0.2.1"}], "ports": [{"port": 8080}]}]}
    core.create_namespaced_endpoints(NS, manual)
    _start(core, "a", "10.0.0.1")
    core.patch_namespaced_service("web", NS, _body({"metadata": {"labels": {"x": "y"}}}))
    settle()
    ep = _endpoints(core)
    assert ep["subsets"] == [{"addresses": [{"ip": "192.0.2.1"}],
                              "ports": [{"port": 8080, "protocol": "TCP"}]}]  # defaulted
    assert "labels" not in ep["metadata"]
    core.delete_namespaced_service("web", NS)  # deleted with the Service all the same
    settle()
    assert not core.list_namespaced_endpoints(NS).items


def test_truncated_at_1000_addresses_ready_ones_first() -> None:
    store = Store()
    seed(store, nodes=1005, stack="clusterpolicy")
    seeded = copy.deepcopy(store.get(ENDPOINTS, NS, "nvidia-dcgm"))
    assert len(seeded["subsets"][0]["addresses"]) == 1000
    assert seeded["metadata"]["annotations"][O.OVER_CAPACITY_ANNOTATION] == "truncated"
    c = EndpointsController(store, SimClock(0.01))
    with ApiServer(store) as server, make_client(server.url) as api:
        c.start()
        try:
            wait_idle(c)
            assert store.get(ENDPOINTS, NS, "nvidia-dcgm") == seeded  # nothing to fix
            core = client.CoreV1Api(api)
            pods = [p for p in store.list(kinds.POD, NS)[0]
                    if p["metadata"]["labels"]["app"] == "nvidia-dcgm"]
            for p in pods[:10]:
                body: Any = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
                core.patch_namespaced_pod_status(p["metadata"]["name"], NS, body)
            wait_idle(c)
            [subset] = _endpoints(core, "nvidia-dcgm")["subsets"]
            assert len(subset["addresses"]) == 995  # every ready one, and room for 5 more
            assert len(subset["notReadyAddresses"]) == 5
            for p in pods[:5]:
                core.delete_namespaced_pod(p["metadata"]["name"], NS, grace_period_seconds=0)
            wait_idle(c)
            ep = _endpoints(core, "nvidia-dcgm")
            assert [len(ep["subsets"][0][f]) for f in ("addresses", "notReadyAddresses")] == [
                995, 5]
            assert O.OVER_CAPACITY_ANNOTATION not in ep["metadata"].get("annotations", {})
        finally:
            c.stop()
