"""The hand-over to an operator release that manages the stable names itself
(`plans/releases.yaml`), as pure data: a Service carrying the release's shared label is the
operator's — never written, its records retired as handed over, judged like any operator
Service — and `--prepare-for` puts the release's component labels on the templates first."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from migrator import phases
from migrator.engine.state.document import PhaseRecord
from migrator.model import guarding, outcome
from migrator.model.discovery import discover
from migrator.model.planning import Options, PlanContext
from migrator.model.retiring import HANDED_OVER, retired
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import CreateAlias, SetLabels, SetSelector, to_record
from tests.helpers import builders as b

CATALOG = load_catalog()
RELEASE = CATALOG.release("shared-services")
COMPONENT = b.COMPONENT


def _ctx(snap: Snapshot, **options: Any) -> PlanContext:
    return PlanContext(snap, CATALOG, discover(snap, CATALOG).components, Options(**options))


def test_the_release_is_data_and_names_what_it_deletes() -> None:
    assert RELEASE.shared_label.key == "nvidia.com/shared-service"
    assert RELEASE.component_labels["dcgm-exporter"].value == "nvidia-dcgm-exporter"
    assert set(RELEASE.deletes_services) == {"nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"}
    assert CATALOG.managed_by_release(b.shared_service("nvidia-dcgm", "nvidia-dcgm")) is RELEASE
    assert CATALOG.managed_by_release(b.service("nvidia-dcgm", {"app": "x"})) is None


def test_the_tools_records_on_handed_over_objects_retire_as_handed_over() -> None:
    c = _ctx(b.handed_over_snapshot())
    create = CreateAlias("nvidia-dcgm", "nvidia-dcgm-dra", {})
    switch = SetSelector("nvidia-dcgm", {"app": "nvidia-dcgm-dra"},
                         {"nvidia.com/gpu-operator.dcgm": "true"}, True)
    labels = SetLabels("nvidia-dcgm-dra", {"nvidia.com/gpu-operator.dcgm": "true"},
                       {"nvidia.com/gpu-operator.dcgm": "true"},
                       {"nvidia.com/gpu-operator.dcgm": None},
                       {"nvidia.com/gpu-operator.dcgm": None})
    for step in (create, switch, labels):
        verdict = retired(c, step)
        assert verdict is not None and verdict[0] == HANDED_OVER, step
        assert "handed over" in verdict[1]


def test_nothing_writes_a_handed_over_name() -> None:
    c = _ctx(b.handed_over_snapshot())
    assert guarding.aliases(c.snapshot, CATALOG) == []  # the guard stands down
    alias = phases.alias.plan(c)
    assert alias.steps == () and alias.blocked is None
    assert all(g.ok for g in alias.gates)
    switch = phases.switch.plan(c)
    assert switch.steps == ()
    assert any("handed over" in n for n in switch.notes)


def test_the_verdict_judges_the_release_services_as_the_tools_and_wants_no_dra_name() -> None:
    found = outcome.verdict(b.handed_over_snapshot(), CATALOG, phases.answers())
    failed = [f"{f.name}: {f.detail}" for f in found.findings if not f.ok]
    assert failed == []
    assert not any("-dra" in f.subject and f.check == "stable-name" for f in found.findings)
    labelled = [f for f in found.findings if f.check == "pods-labelled"]
    assert labelled and all(COMPONENT in f.detail for f in labelled)
    # A pod that lacks the label the release's Service selects by is red.
    snap = b.handed_over_snapshot()
    odd = snap.pods[0]
    stray = PodView(odd.name, odd.uid, odd.node, {"app": odd.owner_name or ""}, True, False,
                    "DaemonSet", odd.owner_name)
    found = outcome.verdict(replace(snap, pods=(stray, *snap.pods[1:])), CATALOG,
                            phases.answers())
    assert any(f.check == "pods-labelled" and not f.ok for f in found.findings)


def test_prepare_for_adds_the_release_labels_and_extends_a_completed_phase_1() -> None:
    snap = b.gpucluster_snapshot(labelled=True)  # phase 1 ran before, without preparing
    earlier = SetLabels("nvidia-dcgm-dra", {"nvidia.com/gpu-operator.dcgm": "true"},
                        {"nvidia.com/gpu-operator.dcgm": "true"},
                        {"nvidia.com/gpu-operator.dcgm": None},
                        {"nvidia.com/gpu-operator.dcgm": None})
    c = replace(_ctx(snap, prepare_for="shared-services"),
                recorded={earlier.id: to_record(earlier)})
    plan = phases.label.plan(c)
    step = next(s for s in plan.steps if isinstance(s, SetLabels)
                and s.daemonset == "nvidia-dcgm-dra")
    assert step.template_after == {"nvidia.com/gpu-operator.dcgm": "true",
                                   COMPONENT: "nvidia-dcgm"}
    assert step.template_before == {"nvidia.com/gpu-operator.dcgm": None, COMPONENT: None}
    assert any("deletes Service/nvidia-dcgm-dra" in w for w in plan.warnings)
    # The completed phase is drift until the templates carry the release label.
    gates = phases.label.verify(c, [earlier])
    assert any(g.name == "prepared/nvidia-dcgm-dra" and not g.ok for g in gates)
    # The state keeps the extended step (its rollback removes both labels).
    record = PhaseRecord(1)
    record.mark(earlier, "done")
    record.mark(step, "intent")
    assert [r.step["template_after"] for r in record.steps] == [dict(step.template_after)]
    assert step.inverse().template_after == {"nvidia.com/gpu-operator.dcgm": None,
                                             COMPONENT: None}


def _both(cp_nodes: int = 3) -> Snapshot:
    """Both stacks: the GPUCluster's on three nodes, the ClusterPolicy's (whose own Services
    are the stable names) on the first `cp_nodes` of them."""
    snap = b.gpucluster_snapshot()
    daemonsets, pods, services = dict(snap.daemonsets), list(snap.pods), dict(snap.services)
    for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
        ds = b.daemonset(name, owner="ClusterPolicy", desired=cp_nodes)
        ds["metadata"]["ownerReferences"][0].update(apiVersion="nvidia.com/v1",
                                                    name="cluster-policy", uid="cp-uid")
        daemonsets[name] = ds
        pods += b.pods(name, cp_nodes)
        services[name] = b.service(name, {"app": name}, owner="ClusterPolicy",
                                   local=name == "nvidia-dcgm",
                                   port=5555 if name == "nvidia-dcgm" else 9400)
    cp = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
          "metadata": {"name": "cluster-policy", "uid": "cp-uid", "generation": 1}}
    endpoints = {n: b.endpoints_for(n, [p for p in pods if p.owner_name == n])
                 for n in services}
    return replace(snap, daemonsets=daemonsets, pods=tuple(pods), services=services,
                   endpoints=endpoints, cluster_policies=(cp,))


def test_prepare_for_labels_one_stack_where_both_run_a_component_on_the_same_nodes() -> None:
    """The release's required anti-affinity on its component label runs one pod of a
    component per node: a labelled old pod of the other stack would keep the new pods of both
    DaemonSets Pending, so only the stack whose own Service is the stable name is prepared."""
    c = _ctx(_both(), prepare_for="shared-services")
    plan = phases.label.plan(c)
    assert plan.blocked is None, plan.blocked
    after = {s.daemonset: s.template_after for s in plan.steps if isinstance(s, SetLabels)}
    assert after["nvidia-dcgm"][COMPONENT] == "nvidia-dcgm"
    assert after["nvidia-dcgm-exporter"][COMPONENT] == "nvidia-dcgm-exporter"
    assert COMPONENT not in after["nvidia-dcgm-dra"]
    assert COMPONENT not in after["nvidia-dcgm-exporter-dra"]
    said = [n for n in plan.notes if "only DaemonSet/nvidia-dcgm is prepared" in n]
    assert len(said) == 1 and "stay Pending" in said[0], plan.notes
    gates = phases.label.verify(c, [s for s in plan.steps if isinstance(s, SetLabels)])
    assert not any(g.name == "prepared/nvidia-dcgm-dra" for g in gates)


def test_prepare_for_is_refused_where_the_stacks_share_only_some_nodes() -> None:
    plan = phases.label.plan(_ctx(_both(cp_nodes=2), prepare_for="shared-services"))
    assert plan.blocked is not None and "share 2 of their nodes but not all" in plan.blocked
    assert "nvidia.com/gpu.deploy" in plan.blocked


def test_prepare_for_labels_both_stacks_when_their_nodes_are_apart() -> None:
    snap = _both()
    moved = tuple(replace(p, node=f"cp-{p.node}") if p.owner_name in ("nvidia-dcgm",
                                                                      "nvidia-dcgm-exporter")
                  else p for p in snap.pods)
    plan = phases.label.plan(_ctx(replace(snap, pods=moved), prepare_for="shared-services"))
    assert plan.blocked is None
    labelled = {s.daemonset for s in plan.steps
                if isinstance(s, SetLabels) and COMPONENT in s.template_after}
    assert labelled == {"nvidia-dcgm", "nvidia-dcgm-exporter", "nvidia-dcgm-dra",
                        "nvidia-dcgm-exporter-dra"}
