"""The endpoints controller's pure parts: `truncateEndpoints` (1001 addresses, proportional
shares, ready ones first) and `RepackSubsets` (ports grouped by the addresses offering them)."""

from __future__ import annotations

from typing import Any

from dcgm_sim.controllers import endpointsubsets as S

NS = "gpu-operator"
Obj = dict[str, Any]


def _names(subset: Obj, field: str = "addresses") -> list[str]:
    return [a["targetRef"]["name"] for a in subset.get(field) or []]


def _address(i: int) -> Obj:
    return {"ip": f"10.0.{i // 250}.{i % 250}", "targetRef": {"uid": str(i)}}


def test_truncation_of_1001_ready_addresses() -> None:
    subsets = [{"addresses": [_address(i) for i in range(1001)], "ports": [{"port": 80}]}]
    out, truncated = S.truncate_subsets(subsets)
    assert truncated and out == [{"addresses": subsets[0]["addresses"][:1000],
                                  "ports": [{"port": 80}]}]
    assert S.truncate_subsets([{"addresses": subsets[0]["addresses"][:1000]}])[1] is False


def test_truncation_shares_room_by_proportion() -> None:
    assert S.truncation([(600, 300), (0, 200)]) == [(600, 240), (0, 160)]  # not ready cut
    assert S.truncation([(700, 5), (400, 0)]) == [(637, 0), (363, 0)]  # ready cut, the rest go
    assert S.truncation([(1000, 0), (0, 1)]) == [(1000, 0), (0, 0)]
    assert S.truncation([(999, 1)]) is None


def test_repack_groups_ports_by_the_addresses_offering_them() -> None:
    svc: Obj = {"metadata": {"name": "web", "namespace": NS}, "spec": {
        "clusterIP": "10.96.0.1", "ports": [
            {"name": "a", "port": 1, "targetPort": "a", "protocol": "TCP"},
            {"name": "b", "port": 2, "targetPort": 20, "protocol": "TCP"},
            {"name": "c", "port": 3, "targetPort": 30, "protocol": "TCP"}]}}

    def pod(name: str, ip: str, named: bool, ready: bool) -> Obj:
        ports = [{"name": "a", "containerPort": 10}] if named else []
        return {"metadata": {"name": name, "namespace": NS, "uid": name},
                "spec": {"nodeName": "n", "containers": [{"name": "c", "ports": ports}]},
                "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                           "conditions": [{"type": "Ready", "status": str(ready)}]}}

    pods = [pod("x", "10.0.0.2", True, True), pod("y", "10.0.0.1", False, False),
            pod("z", "10.0.0.3", True, False)]
    book = S.Book((p["metadata"]["name"], S.member(svc, p)) for p in pods)
    subsets = book.subsets(book.repack(), None)
    assert [([p["name"] for p in s["ports"]], _names(s), _names(s, "notReadyAddresses"))
            for s in subsets] == [
        (["a"], ["x"], ["z"]), (["b", "c"], ["x"], ["y", "z"])]
    book.put("z", None)
    assert [len(s.get("notReadyAddresses") or []) for s in book.subsets(book.repack(), None)
            ] == [0, 1]


def _pod(name: str, ips: list[str], **spec: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"},
            "spec": {"nodeName": "n", "containers": [{"name": "c"}], **spec},
            "status": {"phase": "Running", "podIP": ips[0], "podIPs": [{"ip": i} for i in ips],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def test_headless_service_without_ports_gets_one_portless_subset() -> None:
    svc: Obj = {"metadata": {"name": "db", "namespace": NS},
                "spec": {"clusterIP": "None", "selector": {"app": "db"}}}
    book = S.Book((n, S.member(svc, _pod(n, [ip]))) for n, ip in (("b", "10.0.0.2"),
                                                                  ("a", "10.0.0.1")))
    assert [_names(s) for s in book.subsets(book.repack(), None)] == [["a", "b"]]
    assert "ports" not in book.subsets(book.repack(), None)[0]
    with_cluster_ip: Obj = {**svc, "spec": {"clusterIP": "10.96.0.9"}}
    assert S.member(with_cluster_ip, _pod("a", ["10.0.0.1"])) is None  # no ports, not headless


def test_address_family_and_hostname() -> None:
    svc: Obj = {"metadata": {"name": "db", "namespace": NS}, "spec": {
        "clusterIP": "None", "ipFamilies": ["IPv6"], "ports": [{"port": 5, "protocol": "TCP"}]}}
    pod = _pod("a", ["10.0.0.1", "fd00::1"], hostname="a-0", subdomain="db")
    m = S.member(svc, pod)
    assert m is not None and m.address["ip"] == "fd00::1" and m.address["hostname"] == "a-0"
    other: Obj = {**svc, "metadata": {"name": "web", "namespace": NS}}
    m = S.member(other, pod)
    assert m is not None and "hostname" not in m.address  # subdomain names another Service
    v4_only: Obj = {**svc, "spec": {**svc["spec"], "ipFamilies": ["IPv4"]}}
    assert S.member(v4_only, _pod("b", ["fd00::2"])) is None  # no IP of the Service's family
