"""Phases 2 and 3 and rollback end to end (docs/design.md, "Phases"): aliases, selector switch, the
upgrade transitions (old pods with a labelled template, a mixed rollout, all new), coexistence, and
a rollback that restores the cluster."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from migrator.model import kinds
from migrator.model.gates import rollout_complete
from tests.conftest import edit_object, pods_ready_on
from tests.e2e.conftest import E2E, NS

DCGM = "nvidia.com/gpu-operator.dcgm"
EXPORTER = "nvidia.com/gpu-operator.dcgm-exporter"


def _slice_pods(env: E2E, service: str) -> set[str]:
    items, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    return {ep["targetRef"]["name"] for sl in items
            if sl["metadata"]["labels"].get("kubernetes.io/service-name") == service
            for ep in sl.get("endpoints") or []
            if (ep.get("conditions") or {}).get("ready") is not False}


def test_gpucluster_full_migration_exposes_four_names(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    assert [p["status"] for p in res.json()["phases"]] == ["completed"] * 3
    names = ("nvidia-dcgm", "nvidia-dcgm-dra", "nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra")
    found = {n: env.svc(n) for n in names}
    assert all(found.values()), [n for n, s in found.items() if s is None]
    svcs = {n: s for n, s in found.items() if s is not None}
    assert svcs["nvidia-dcgm"]["spec"]["internalTrafficPolicy"] == "Local"
    assert svcs["nvidia-dcgm-dra"]["spec"]["internalTrafficPolicy"] == "Local"
    assert svcs["nvidia-dcgm"]["spec"]["selector"] == {DCGM: "true"}
    assert svcs["nvidia-dcgm-exporter"]["spec"]["selector"] == {EXPORTER: "true"}
    # operator-owned sources keep their app selectors
    assert svcs["nvidia-dcgm-dra"]["spec"]["selector"] == {"app": "nvidia-dcgm-dra"}
    for alias, source in (("nvidia-dcgm", "nvidia-dcgm-dra"),
                          ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra")):
        meta = svcs[alias]["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "dcgm-migrate"
        assert meta["annotations"]["dcgm-migrate/alias-of"] == source
        refs = meta["ownerReferences"]
        assert [r["kind"] for r in refs] == ["GPUCluster"] and not refs[0]["controller"]
        assert svcs[alias]["spec"]["clusterIP"] != svcs[source]["spec"]["clusterIP"]
        assert _slice_pods(env, alias) == _slice_pods(env, source) != set()
    # exactly one scrape path per exporter pod
    status = env.cli("status", "-o", "json")
    assert status.code == 0, status.stdout + status.stderr
    assert not [w for w in status.json()["warnings"] if "duplicate" in w]


def test_clusterpolicy_full_migration_never_exposes_dra_names(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("clusterpolicy")
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    items, _ = env.sim.store.list(kinds.SERVICE, NS)
    assert not [s["metadata"]["name"] for s in items if s["metadata"]["name"].endswith("-dra")]
    doc = res.json()
    assert any("owned by ClusterPolicy" in w for w in doc["warnings"])
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {"app": "nvidia-dcgm"}


def test_rollback_after_phase3_restores_the_starting_objects(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    start = env.objects()
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    assert env.objects() != start
    # The settle is counted from phase 2's recorded finish (whole seconds): 3 s leaves a
    # countdown to see however long the undo of phases 3 and 2 took on a loaded machine.
    res = env.cli("rollback", "--phase", "1", "--yes", "--settle", "3s", "-o", "json")
    assert res.code == 0, res.stderr
    assert "settling" in res.stderr, "labels were removed without the settle countdown"
    end = env.objects()
    assert set(end) == set(start), set(end) ^ set(start)
    for key in start:
        assert end[key] == start[key], key
    assert [p["status"] for p in res.json()["phases"]] == ["rolled-back"] * 3


def test_coexistence_shares_the_legacy_names_and_never_writes_them(
        e2e_factory: Callable[..., E2E]) -> None:
    """With both stacks, phase 2 takes no stable name the ClusterPolicy renders: it completes
    with the name marked shared (the guard adds the GPUCluster pods through its own
    EndpointSlices) and writes no Service."""
    env = e2e_factory("both", operator_release=FUTURE)
    legacy_before = copy.deepcopy(env.svc("nvidia-dcgm"))
    plan = env.cli("plan", "-o", "json").json()
    alias = next(p for p in plan["phases"] if p["number"] == 2)
    assert alias["changes"] == []
    gate = next(g for g in alias["gates"] if g["name"] == "alias-name-free/nvidia-dcgm")
    assert gate["ok"] and gate["detail"].startswith("shared: Service/nvidia-dcgm belongs to "
                                                    "ClusterPolicy/"), gate
    mark = env.mark()
    res = env.cli("apply", "--phase", "2", "--yes")
    assert res.code == 0, res.stdout + res.stderr
    after = env.svc("nvidia-dcgm")
    assert after == legacy_before, "the ClusterPolicy Service was touched"
    svc_writes = [w for w in env.writes(since=mark) if w.resource == "services"]
    assert svc_writes == []


def _rolled_out(env: E2E, name: str) -> bool:
    return rollout_complete(env.ds(name)).ok


def _edit_ds(env: E2E, ds_name: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the DaemonSet as a client would: again on a conflict (its controller's status
    write may land between the read and the write)."""
    edit_object(env.sim.store, kinds.DAEMONSET, NS, ds_name, change, attempts=10)


def _label_template(env: E2E, ds_name: str, key: str, strategy: str | None = None) -> None:
    def change(ds: dict[str, Any]) -> None:
        ds["spec"]["template"]["metadata"]["labels"][key] = "true"
        ds["metadata"]["labels"][key] = "true"
        if strategy:
            ds["spec"]["updateStrategy"] = {"type": strategy}

    _edit_ds(env, ds_name, change)


def test_old_pods_with_new_template_refuse_the_switch(e2e_factory: Callable[..., E2E]) -> None:
    """Transition (a): a new operator renders the labels into an OnDelete template, old pods
    keep running without them: the switch is refused, naming the pods."""
    env = e2e_factory("gpucluster")
    for name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
        _edit_ds(env, name, lambda ds: ds["spec"].update(updateStrategy={"type": "OnDelete"}))
    _label_template(env, "nvidia-dcgm-dra", DCGM)
    _label_template(env, "nvidia-dcgm-exporter-dra", EXPORTER)
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert res.code == 1, res.stdout + res.stderr
    for ds_name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
        old = sorted(p["metadata"]["name"] for p in env.pods(ds_name))
        assert all(name in res.stderr for name in old), res.stderr
    assert [w for w in env.writes(since=mark) if w.resource == "services"] == []


def test_mixed_rollout_refuses_the_switch(e2e_factory: Callable[..., E2E]) -> None:
    """Transition (b): mid-rollout (one node stalled), some pods carry the label, some not."""
    env = e2e_factory("gpucluster")
    pods_ready_on(env.sim.store, "gpu-node-0003", False)
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--rolling", "--yes", "--timeout", "3s",
                  "--settle", "0s")
    assert res.code == 1, res.stdout + res.stderr
    assert "gpu-node-0003" in res.stderr
    assert [w for w in env.writes(since=mark) if w.resource == "services"] == []


def test_all_pods_labelled_switch_succeeds(e2e_factory: Callable[..., E2E]) -> None:
    """Transition (c): the operator already rolled labelled pods; the switch goes through."""
    env = e2e_factory("gpucluster")
    with env.monitor.rolling():  # the operator's own rollout, within its budget
        _label_template(env, "nvidia-dcgm-dra", DCGM)
        _label_template(env, "nvidia-dcgm-exporter-dra", EXPORTER)
        env.sim.wait_for(lambda: _rolled_out(env, "nvidia-dcgm-dra")
                         and _rolled_out(env, "nvidia-dcgm-exporter-dra"), 30)
        env.sim.wait_idle(30)
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {DCGM: "true"}
