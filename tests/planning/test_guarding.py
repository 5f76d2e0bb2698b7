"""The guard's decisions (model/guarding.py) on plain dicts: hold an alias when its DaemonSet's
template lost the common label, release it once the label is back and rolled out, clear a stale
held mark, re-sync the alias's config with its source; never touch what is not the tool's."""

from __future__ import annotations

from typing import Any

import pytest

from migrator.model import guarding
from migrator.model.guarding import HELD_ANNOTATION, Correction
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import load_catalog
from tests.helpers.builders import COMMON, NS, daemonset, pods, service

CAT = load_catalog()
EXP_DS = "nvidia-dcgm-exporter-dra"
EXP_KEY = COMMON["exporter"]
FORWARD = {EXP_KEY: "true"}
APP = {"app": EXP_DS}
MANAGED = {"app.kubernetes.io/managed-by": "dcgm-migrate",
           "app.kubernetes.io/name": "nvidia-dcgm-exporter"}


def _alias(selector: dict[str, str], *, held: str | None = None,
           source: str = EXP_DS, labels: dict[str, str] | None = None) -> dict[str, Any]:
    ann = {"dcgm-migrate/alias-of": source}
    if held:
        ann[HELD_ANNOTATION] = held
    svc = service("nvidia-dcgm-exporter", selector, owner=None,
                  labels=MANAGED if labels is None else labels, annotations=ann)
    svc["metadata"]["resourceVersion"] = "41"
    return svc


def _snap(alias: dict[str, Any], *, template: dict[str, str] | None = None,
          pod_labels: dict[str, str] | None = None, updated: int | None = None,
          pod_list: list[PodView] | None = None) -> Snapshot:
    ds = daemonset(EXP_DS, labels=template or {}, template_labels=template or {},
                   updated=updated)
    return Snapshot(NS, daemonsets={EXP_DS: ds},
                    services={"nvidia-dcgm-exporter": alias,
                              EXP_DS: service(EXP_DS, APP)},
                    pods=tuple(pod_list if pod_list is not None
                               else pods(EXP_DS, 3, labels=pod_labels)))


# ---- hold ------------------------------------------------------------------------------------

def test_an_alias_on_the_common_label_is_held_when_the_template_loses_it() -> None:
    snap = _snap(_alias(FORWARD), template={}, pod_labels={EXP_KEY: "true"})
    [c] = guarding.holds(snap, CAT)
    assert (c.action, c.service) == ("hold", "nvidia-dcgm-exporter")
    assert dict(c.selector_before) == FORWARD and dict(c.selector_after) == APP
    assert EXP_DS in c.reason and EXP_KEY in c.reason
    assert c.patch() == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
        {"op": "test", "path": "/spec/selector", "value": FORWARD},
        {"op": "replace", "path": "/spec/selector", "value": APP},
        {"op": "add", "path": "/metadata/annotations/dcgm-migrate~1guard-held",
         "value": c.reason}]


def test_no_hold_while_the_template_carries_the_label() -> None:
    snap = _snap(_alias(FORWARD), template={EXP_KEY: "true"}, pod_labels={EXP_KEY: "true"})
    assert guarding.holds(snap, CAT) == []
    assert guarding.decide(snap, CAT, {"nvidia-dcgm-exporter": FORWARD}, {}) == []


def test_an_alias_not_yet_switched_is_not_held() -> None:
    assert guarding.holds(_snap(_alias(APP), template={}), CAT) == []


@pytest.mark.parametrize("labels, source", [
    ({"app": "nvidia-dcgm-exporter"}, EXP_DS),  # no managed-by label: someone else's
    (MANAGED, "something-else"),  # ours, but an alias of another source
])
def test_a_service_the_tool_does_not_own_as_this_alias_is_never_touched(
        labels: dict[str, str], source: str) -> None:
    snap = _snap(_alias(FORWARD, labels=labels, source=source), template={})
    assert guarding.aliases(snap, CAT) == []
    assert guarding.decide(snap, CAT, {"nvidia-dcgm-exporter": FORWARD},
                           {"nvidia-dcgm-exporter": {"spec": {"type": "NodePort"}}}) == []


# ---- release ---------------------------------------------------------------------------------

def test_a_held_alias_is_released_once_the_label_is_back_and_rolled_out() -> None:
    snap = _snap(_alias(APP, held="lost it"), template={EXP_KEY: "true"},
                 pod_labels={EXP_KEY: "true"})
    [c] = guarding.releases(snap, CAT, {"nvidia-dcgm-exporter": FORWARD})
    assert dict(c.selector_before) == APP and dict(c.selector_after) == FORWARD
    assert c.patch()[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert c.patch()[-1] == {"op": "remove",
                             "path": "/metadata/annotations/dcgm-migrate~1guard-held"}


@pytest.mark.parametrize("case", ["template", "rollout", "pods", "not-ready", "not-switched",
                                  "not-held"])
def test_a_held_alias_stays_held_until_every_release_gate_passes(case: str) -> None:
    template = {} if case == "template" else {EXP_KEY: "true"}
    pod_list = pods(EXP_DS, 3, labels={EXP_KEY: "true"})
    if case == "pods":  # one old pod left without the label
        pod_list = [*pod_list[:2], *pods(EXP_DS, 1)]
    if case == "not-ready":  # the common selector would drop a Ready pod
        pod_list = [*pods(EXP_DS, 2, labels={EXP_KEY: "true"}),
                    PodView("old", "u-old", "node-9", {"app": EXP_DS}, True, False,
                            "ReplicaSet", "x")]
    alias = _alias(APP, held=None if case == "not-held" else "lost it")
    snap = _snap(alias, template=template, updated=2 if case == "rollout" else None,
                 pod_list=pod_list)
    switched = {} if case == "not-switched" else {"nvidia-dcgm-exporter": FORWARD}
    assert guarding.releases(snap, CAT, switched) == []
    gates = guarding.release_gates(snap, guarding.aliases(snap, CAT)[0].component, FORWARD)
    assert all(g.ok for g in gates) == (case in ("not-switched", "not-held"))


# ---- clear and sync --------------------------------------------------------------------------

def test_a_held_mark_on_an_alias_that_moved_forward_is_cleared() -> None:
    snap = _snap(_alias(FORWARD, held="old reason"), template={EXP_KEY: "true"},
                 pod_labels={EXP_KEY: "true"})
    [c] = guarding.decide(snap, CAT, {"nvidia-dcgm-exporter": FORWARD}, {})
    assert c.action == "clear"
    assert c.patch() == [{"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
                         {"op": "test", "path": "/spec/selector", "value": FORWARD},
                         {"op": "remove",
                          "path": "/metadata/annotations/dcgm-migrate~1guard-held"}]


def test_config_drift_is_resynced_except_the_selector() -> None:
    alias = _alias(FORWARD)
    alias["spec"]["ports"][0]["nodePort"] = 30001  # API-assigned: never a difference
    want: dict[str, Any] = {"spec": {"selector": APP, "type": "ClusterIP",
                                     "internalTrafficPolicy": "Cluster",
                                     "ports": [{"name": "gpu-metrics", "port": 9400,
                                                "targetPort": 9400, "protocol": "TCP"}]}}
    snap = _snap(alias, template={EXP_KEY: "true"}, pod_labels={EXP_KEY: "true"})
    assert guarding.syncs(snap, CAT, {"nvidia-dcgm-exporter": want}) == []
    want["spec"]["ports"][0]["port"] = 9401
    want["spec"]["sessionAffinity"] = "ClientIP"
    [c] = guarding.syncs(snap, CAT, {"nvidia-dcgm-exporter": want})
    assert sorted(c.fields) == ["ports", "sessionAffinity"]
    assert c.patch()[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "41"}
    assert {"op": "add", "path": "/spec/sessionAffinity", "value": "ClientIP"} in c.patch()
    assert not any(op["path"] == "/spec/selector" for op in c.patch())


def test_satisfied_tells_a_landed_correction_from_a_foreign_change() -> None:
    hold = Correction("hold", "nvidia-dcgm-exporter", "r", FORWARD, APP)
    assert hold.satisfied(_alias(APP))
    assert not hold.satisfied(_alias({"app": "someone-else"}))
    assert not hold.satisfied(None)


def test_a_type_change_is_synced_with_the_sources_annotations() -> None:
    snap = _snap(_alias(FORWARD), template={EXP_KEY: "true"}, pod_labels={EXP_KEY: "true"})
    internal = "service.beta.kubernetes.io/aws-load-balancer-internal"
    want = {"metadata": {"annotations": {internal: "true"}},
            "spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP"}}
    [c] = guarding.syncs(snap, CAT, {"nvidia-dcgm-exporter": want})
    assert sorted(c.fields) == ["annotations", "sessionAffinity", "type"]
    ops = c.patch()
    # the annotation lands in the same patch as the type, and before it
    paths = [op["path"] for op in ops]
    assert paths.index("/metadata/annotations/" + internal.replace("/", "~1")) < paths.index(
        "/spec/type")


@pytest.mark.parametrize("template, updated, pending", [
    ({}, None, False),  # the label is not back yet
    ({EXP_KEY: "true"}, 2, False),  # back, still rolling
    ({EXP_KEY: "true"}, None, True),  # back and rolled out: now the pods are worth a read
])
def test_pods_are_read_only_when_a_release_is_possible(
        template: dict[str, str], updated: int | None, pending: bool) -> None:
    snap = _snap(_alias(APP, held="lost it"), template=template, updated=updated, pod_list=[])
    assert guarding.release_pending(snap, CAT, {"nvidia-dcgm-exporter": FORWARD}) is pending
    assert guarding.release_pending(snap, CAT, {}) is False
