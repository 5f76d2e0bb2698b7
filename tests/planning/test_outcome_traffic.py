"""Where a stable name sends its consumers' traffic (model/traffic.py), on plain data: a Ready
pod outside the DaemonSets behind the name, a port nothing serves; and the one definition of
the traffic-critical checks."""

from __future__ import annotations

import copy
from dataclasses import replace

from migrator import phases
from migrator.model import outcome
from migrator.model.findings import TRAFFIC_CHECKS, traffic_critical
from migrator.model.outcome import Verdict
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import load_catalog
from tests.planning.test_outcome import DCGM, _migrated

CAT = load_catalog()


def verdict(snapshot: Snapshot, allowed: tuple[str, ...] = ()) -> Verdict:
    return outcome.verdict(snapshot, CAT, phases.answers(), allowed_foreign=allowed)


def _with_stray(snap: Snapshot, *, ready: bool = True) -> Snapshot:
    stray = PodView(name="dcgm-debug", uid="u-debug", node="node-1", labels={DCGM: "true"},
                    ready=ready, deleting=False, owner_kind=None, owner_name=None)
    return replace(snap, pods=(*snap.pods, stray))


def test_a_ready_pod_outside_the_daemonsets_behind_a_stable_name_fails_the_verdict() -> None:
    v = verdict(_with_stray(_migrated()))
    bad = {f.name: f for f in v.failures()}
    assert set(bad) == {"no-foreign-endpoints/nvidia-dcgm"}, bad
    found = bad["no-foreign-endpoints/nvidia-dcgm"]
    assert "dcgm-debug on node-1" in found.detail and "Local" in found.detail
    assert "`kubectl label pod dcgm-debug nvidia.com/gpu-operator.dcgm- -n gpu-operator`" \
        in found.fix
    assert not v.ok and found.phase == 0  # no phase's apply answers for it


def test_a_stray_that_is_not_ready_or_allowed_passes() -> None:
    assert verdict(_with_stray(_migrated(), ready=False)).ok
    allowed = verdict(_with_stray(_migrated()), allowed=("nvidia-dcgm",))
    assert allowed.ok
    check = next(f for f in allowed.findings if f.name == "no-foreign-endpoints/nvidia-dcgm")
    assert "allowed by --allow-foreign-pods" in check.detail


def test_a_port_nothing_serves_fails_the_verdict() -> None:
    snap = _migrated()
    alias = copy.deepcopy(snap.services["nvidia-dcgm-exporter"])
    alias["spec"]["ports"][0]["targetPort"] = 9999
    bad = {f.name: f for f in verdict(replace(snap, services={
        **snap.services, "nvidia-dcgm-exporter": alias})).failures()}
    assert set(bad) == {"ports-served/nvidia-dcgm-exporter"}, bad
    assert "targetPort 9999: no container declares it (they declare 9400)" in bad[
        "ports-served/nvidia-dcgm-exporter"].detail
    assert "`dcgm-migrate guard --once`" in bad["ports-served/nvidia-dcgm-exporter"].fix
    alias["spec"]["ports"][0]["targetPort"] = "metrics"  # the container's port name: served
    assert verdict(replace(snap, services={**snap.services, "nvidia-dcgm-exporter": alias})).ok
    alias["spec"]["ports"][0]["targetPort"] = "metricz"
    bad = {f.name: f for f in verdict(replace(snap, services={
        **snap.services, "nvidia-dcgm-exporter": alias})).failures()}
    assert "no container has a port of that name" in bad[
        "ports-served/nvidia-dcgm-exporter"].detail


def test_the_operators_own_name_is_told_to_look_at_its_cr() -> None:
    snap = _migrated()
    dra = copy.deepcopy(snap.services["nvidia-dcgm-dra"])
    dra["spec"]["ports"][0]["targetPort"] = 1
    bad = {f.name: f for f in verdict(replace(snap, services={
        **snap.services, "nvidia-dcgm-dra": dra})).failures()}
    assert "the operator renders this Service" in bad["ports-served/nvidia-dcgm-dra"].fix


def test_the_traffic_critical_checks_are_named_on_the_summary_first() -> None:
    assert all(traffic_critical(f"{c}/x") for c in TRAFFIC_CHECKS)
    assert not traffic_critical("pods-labelled/nvidia-dcgm-dra")
    snap = _with_stray(_migrated())
    pods = tuple(replace(p, labels={"app": p.labels["app"]})
                 if p.owner_name == "nvidia-dcgm-exporter-dra" and p.node == "node-2" else p
                 for p in snap.pods)
    summary = verdict(replace(snap, pods=pods)).summary()
    assert summary.index("no-foreign-endpoints/") < summary.index("pods-labelled/"), summary
