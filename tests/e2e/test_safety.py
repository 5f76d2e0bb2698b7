"""Safety paths end to end: loss after a switch restores the old selector, OnDelete rolled by
the tool node by node, server-side dry run, components that are absent, a missing
ServiceMonitor CRD, and rollback leaving an alias alone once it is no longer the tool's."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from dcgm_sim.store import Event
from migrator.engine import informer
from migrator.model import kinds
from tests.conftest import edit_object, on_delete
from tests.e2e.conftest import E2E, NS

DCGM = "nvidia.com/gpu-operator.dcgm"
EXPORTER = "nvidia.com/gpu-operator.dcgm-exporter"


def test_endpoint_loss_after_switch_restores_the_old_selector(
        e2e_factory: Callable[..., E2E], monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod loses the common label right after the switch, before the switch's gate looks.

    "Before" is made certain, not left to thread scheduling (on a loaded machine the tool's
    gate could pass first, and the loss then belongs to the next step, which waits it out as a
    dip it did not cause): the switch's answer is held (the sim's `hang_nth_write` hook) until
    the pod has lost the label and the run's cache (engine/informer.py) holds that version.
    """
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    victim = sorted(p["metadata"]["name"] for p in env.pods("nvidia-dcgm-dra"))[0]
    caches: list[informer.Informer] = []
    start = informer.Informer.start

    def started(*args: Any, **kwargs: Any) -> informer.Informer:
        caches.append(start(*args, **kwargs))
        return caches[-1]

    monkeypatch.setattr(informer.Informer, "start", staticmethod(started))
    faults = env.sim.server.faults
    switched = threading.Event()
    errors: list[BaseException] = []

    def cached_without_label() -> bool:
        return any(p.name == victim and DCGM not in p.labels for p in caches[-1].pods())

    def sabotage() -> None:
        try:
            pod = copy.deepcopy(env.sim.store.get(kinds.POD, NS, victim))
            del pod["metadata"]["labels"][DCGM]
            env.sim.store.update(kinds.POD, pod)
            env.sim.wait_for(cached_without_label)
        except BaseException as e:  # reported by the test thread below
            errors.append(e)
        finally:
            faults.release_held()

    def on_event(event: Event) -> None:
        obj = event.object
        if (event.resource.kind == "Service" and obj["metadata"]["name"] == "nvidia-dcgm"
                and obj["spec"].get("selector") == {DCGM: "true"} and not switched.is_set()):
            switched.set()
            faults.update(hang_nth_write=1)  # this write's answer (store writes: no HTTP)
            threading.Thread(target=sabotage, daemon=True).start()

    with env.monitor.expected_outage():
        env.sim.store.subscribe(on_event)
        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
        assert switched.is_set() and not errors, errors
        assert res.code == 1, res.stdout + res.stderr
        assert "restored" in res.stderr, res.stderr
        assert env.service("nvidia-dcgm")["spec"]["selector"] == {"app": "nvidia-dcgm-dra"}
        assert env.phase_status(3) == "failed"


def test_roll_on_delete_rolls_ondelete_pods_one_node_at_a_time(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", nodes=4)
    for name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
        edit_object(env.sim.store, kinds.DAEMONSET, NS, name, on_delete)
    plan = env.cli("plan", "-o", "json").json()
    assert "OnDelete" in (plan["phases"][0]["blocked"] or "")
    refused = env.cli("apply", "--phase", "1", "--yes")
    assert refused.code == 1 and "--roll-on-delete" in refused.stderr
    mark = env.mark()
    res = env.cli("apply", "--phase", "1", "--yes", "--roll-on-delete")
    assert res.code == 0, res.stderr
    for name, key in (("nvidia-dcgm-dra", DCGM), ("nvidia-dcgm-exporter-dra", EXPORTER)):
        assert all(p["metadata"]["labels"].get(key) == "true" for p in env.pods(name))
    deletes = [w for w in env.writes(since=mark) if w.resource == "pods" and w.verb == "delete"]
    assert len(deletes) == 8  # one per node per DaemonSet, no more


def test_dry_run_sends_dry_run_writes_and_changes_nothing(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    before = env.objects()
    mark = env.mark()
    res = env.cli("apply", "--phase", "3", "--yes", "--dry-run", "-o", "json")
    assert res.code == 0, res.stderr
    # Every mutating request, less access reviews (a POST that persists nothing: the reads of
    # Prometheus CRs ask one before listing them).
    entries = [e for e in env.sim.server.log.entries() if e.seq > mark
               and e.verb in ("create", "update", "patch", "delete")
               and not e.path.endswith("accessreviews")]
    assert entries and all(e.dry_run for e in entries), entries
    assert env.writes(since=mark) == []
    assert env.objects() == before
    assert env.sim.store.find(kinds.CONFIGMAP, NS, "dcgm-migrate-state") is None


def test_standalone_dcgm_disabled_skips_the_component(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", gpucluster_dcgm=False)
    plan = env.cli("plan", "-o", "json").json()
    assert plan["components"] == ["gpucluster/dcgm-exporter"]
    assert any("nvidia-dcgm-dra" in w and "skipped" in w for w in plan["warnings"])
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert res.code == 0, res.stderr
    assert env.svc("nvidia-dcgm") is None
    assert env.service("nvidia-dcgm-exporter")["spec"]["selector"] == {EXPORTER: "true"}


def test_missing_servicemonitor_crd_counts_annotations_only(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("clusterpolicy")
    with_sm = env.cli("plan", "-o", "json").json()
    assert any("possible duplicate scraping" in w for w in with_sm["warnings"])
    env.sim.server.faults.update(disabled_groups=["monitoring.coreos.com"])
    res = env.cli("plan", "-o", "json")
    assert res.code == 0, res.stderr
    assert not any("duplicate" in w for w in res.json()["warnings"])


def test_mixed_stack_is_recognised(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4)
    doc = env.cli("plan", "-o", "json").json()
    assert doc["stack"] == "mixed"
    assert len(doc["components"]) == 4


def test_rollback_leaves_an_alias_that_is_no_longer_the_tools(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    # someone adopted it
    edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter",
                lambda svc: svc["metadata"]["labels"].pop("app.kubernetes.io/managed-by"))
    res = env.cli("rollback", "--phase", "2", "--yes", "-o", "json")
    assert res.code == 0, res.stderr
    assert env.svc("nvidia-dcgm-exporter") is not None
    assert env.svc("nvidia-dcgm") is None
    warning = "Service/nvidia-dcgm-exporter is no longer the tool's alias"
    assert warning in res.stderr
    assert any(warning in w and "skipped" in w for w in res.json()["warnings"])


def test_json_output_on_a_gate_failure_is_an_error_document(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    # A Service of the alias name that is nobody's the tool knows: phase 2 refuses to take it.
    env.sim.store.create(kinds.SERVICE, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "nvidia-dcgm", "namespace": NS},
        "spec": {"selector": {"app": "someone-else"}, "ports": [{"port": 5555}]}})
    res = env.cli("apply", "--phase", "2", "--yes", "-o", "json")
    assert res.code == 1
    doc = res.json()  # validated against $defs/error of docs/output.schema.json
    assert doc["error"]["exitCode"] == 1 and "nvidia-dcgm" in doc["error"]["message"]
    assert doc["error"]["hint"]
