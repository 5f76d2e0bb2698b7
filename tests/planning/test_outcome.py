"""The verdict (model/outcome.py) on plain data: per stable name and node, traffic policy, -dra
names on the legacy stack, labels, rollouts and scrape targets, with no state at all."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from migrator import phases
from migrator.model import aliasing, outcome
from migrator.model.outcome import Verdict, tool_marks
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import Catalog, load_catalog
from tests.helpers import builders as b

CAT = load_catalog()


def verdict(snapshot: Snapshot, catalog: Catalog) -> Verdict:
    """The verdict, with the phases' own answer to which phase fixes what."""
    return outcome.verdict(snapshot, catalog, phases.answers())
DCGM, EXP = b.COMMON["dcgm"], b.COMMON["exporter"]


def _migrated(nodes: int = 3) -> Snapshot:
    """A GPUCluster namespace after phase 3: labelled pods, both aliases on the common label."""
    snap = b.gpucluster_snapshot(nodes, labelled=True)
    dcgm = b.service("nvidia-dcgm", {DCGM: "true"}, local=True, port=5555, owner=None,
                     labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    exp = b.service("nvidia-dcgm-exporter", {EXP: "true"}, owner=None,
                    labels={"app.kubernetes.io/managed-by": "dcgm-migrate"})
    eps = {**snap.endpoints,
           "nvidia-dcgm": b.endpoints_for("nvidia-dcgm", list(snap.pods_of("nvidia-dcgm-dra"))),
           "nvidia-dcgm-exporter": b.endpoints_for(
               "nvidia-dcgm-exporter", list(snap.pods_of("nvidia-dcgm-exporter-dra")))}
    return replace(snap, services={**snap.services, "nvidia-dcgm": dcgm,
                                   "nvidia-dcgm-exporter": exp}, endpoints=eps)


def _failed(v: Verdict) -> dict[str, str]:
    return {f.name: f.detail for f in v.findings if not f.ok}


def test_a_migrated_cluster_is_green_with_no_state() -> None:
    v = verdict(_migrated(), CAT)
    assert v.ok, _failed(v)
    names = {f.name for f in v.findings}
    assert {"nodes-covered/nvidia-dcgm", "nodes-covered/nvidia-dcgm-exporter",
            "nodes-covered/nvidia-dcgm-dra", "local-traffic/nvidia-dcgm",
            "pods-labelled/nvidia-dcgm-dra", "scrape-once/exporters"} <= names


def test_an_unmigrated_cluster_fails_on_what_phases_1_and_2_make() -> None:
    v = verdict(b.gpucluster_snapshot(), CAT)
    failed = _failed(v)
    assert set(failed) == {"stable-name/nvidia-dcgm", "stable-name/nvidia-dcgm-exporter",
                           "pods-labelled/nvidia-dcgm-dra",
                           "pods-labelled/nvidia-dcgm-exporter-dra"}
    assert {f.phase for f in v.failures()} == {1, 2}
    assert [f.name for f in v.failures(upto=1)] == [
        "pods-labelled/nvidia-dcgm-dra", "pods-labelled/nvidia-dcgm-exporter-dra"]


def test_a_node_without_a_ready_endpoint_is_named_with_why() -> None:
    snap = _migrated()
    pods = tuple(replace(p, ready=False, why="CrashLoopBackOff")
                 if p.name == "nvidia-dcgm-dra-1" else p for p in snap.pods)
    eps = dict(snap.endpoints)
    for svc in ("nvidia-dcgm", "nvidia-dcgm-dra"):
        eps[svc] = b.endpoints_for(svc, [p for p in pods if p.owner_name == "nvidia-dcgm-dra"])
    v = verdict(replace(snap, pods=pods, endpoints=eps), CAT)
    failed = _failed(v)
    assert "node-1 (nvidia-dcgm-dra-1: CrashLoopBackOff)" in failed["nodes-covered/nvidia-dcgm"]
    assert "1 of 3 nodes" in failed["nodes-covered/nvidia-dcgm-dra"]
    # What helps is the pod and its node, for the alias as for the operator's own name: no
    # phase's apply, which would answer with the same fix.
    for name in ("nodes-covered/nvidia-dcgm", "nodes-covered/nvidia-dcgm-dra"):
        fix = next(f.fix for f in v.failures() if f.name == name)
        assert f"`kubectl describe pod nvidia-dcgm-dra-1 -n {snap.namespace}`" in fix, fix
        assert "`kubectl describe node node-1`" in fix and "apply" not in fix, fix
    assert "rollout-complete/nvidia-dcgm-dra" not in failed  # the DaemonSet's counters say done


def test_a_selector_that_misses_a_node_is_not_green() -> None:
    snap = _migrated()
    eps = dict(snap.endpoints)
    eps["nvidia-dcgm-exporter"] = b.endpoints_for(
        "nvidia-dcgm-exporter", list(snap.pods_of("nvidia-dcgm-exporter-dra"))[:2])
    failed = _failed(verdict(replace(snap, endpoints=eps), CAT))
    assert "no ready endpoint on 1 of 3 nodes" in failed["nodes-covered/nvidia-dcgm-exporter"]


def test_nodes_that_should_run_a_pod_but_have_none_count() -> None:
    snap = _migrated()
    ds = dict(snap.daemonsets)
    ds["nvidia-dcgm-dra"] = b.daemonset("nvidia-dcgm-dra", labels={DCGM: "true"},
                                        template_labels={DCGM: "true"}, desired=4, available=3,
                                        updated=4)
    failed = _failed(verdict(replace(snap, daemonsets=ds), CAT))
    assert "1 of 4 nodes that should run DaemonSet/nvidia-dcgm-dra have no pod" in failed[
        "nodes-covered/nvidia-dcgm"]
    assert "rollout-complete/nvidia-dcgm-dra" in failed


def test_dcgm_names_keep_local_traffic() -> None:
    snap = _migrated()
    svc: dict[str, Any] = dict(snap.services["nvidia-dcgm"])
    svc["spec"] = {**svc["spec"], "internalTrafficPolicy": "Cluster"}
    failed = _failed(verdict(replace(snap, services={**snap.services, "nvidia-dcgm": svc}), CAT))
    assert failed == {"local-traffic/nvidia-dcgm": "internalTrafficPolicy Cluster"}


def test_a_foreign_endpoint_does_not_cover_a_node() -> None:
    """Only a DCGM pod's endpoint covers its node (a stray pod with the common label does not;
    whether a stray may stand behind the name at all is phase 3's `no-foreign-pods`)."""
    snap = _migrated()
    stray = PodView("debug-exporter", "u-x", "node-1", {EXP: "true"}, True, False, None, None)
    own = [p for p in snap.pods_of("nvidia-dcgm-exporter-dra") if p.node != "node-1"]
    eps = dict(snap.endpoints)
    eps["nvidia-dcgm-exporter"] = b.endpoints_for("nvidia-dcgm-exporter", [*own, stray])
    failed = _failed(verdict(replace(snap, pods=(*snap.pods, stray), endpoints=eps), CAT))
    assert "no ready endpoint on 1 of 3 nodes" in failed["nodes-covered/nvidia-dcgm-exporter"]


def test_the_legacy_stack_exposes_no_dra_name() -> None:
    cp_ds = {n: b.daemonset(n, owner="ClusterPolicy", labels={k: "true"}, template_labels={
        k: "true"}) for n, k in (("nvidia-dcgm", DCGM), ("nvidia-dcgm-exporter", EXP))}
    pd = b.pods("nvidia-dcgm", 3, labels={DCGM: "true"})
    pe = b.pods("nvidia-dcgm-exporter", 3, labels={EXP: "true"})
    svcs = {"nvidia-dcgm": b.service("nvidia-dcgm", {"app": "nvidia-dcgm"}, local=True,
                                     port=5555, owner="ClusterPolicy"),
            "nvidia-dcgm-exporter": b.service("nvidia-dcgm-exporter",
                                              {"app": "nvidia-dcgm-exporter"},
                                              owner="ClusterPolicy",
                                              annotations={"prometheus.io/scrape": "true"})}
    cp = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
          "metadata": {"name": "cluster-policy", "uid": "cr-uid"}}
    snap = Snapshot(b.NS, cluster_policies=(cp,), daemonsets=cp_ds, services=svcs,
                    pods=(*pd, *pe), endpoints={"nvidia-dcgm": b.endpoints_for("nvidia-dcgm", pd),
                                                "nvidia-dcgm-exporter": b.endpoints_for(
                                                    "nvidia-dcgm-exporter", pe)})
    assert verdict(snap, CAT).ok
    extra = b.service("nvidia-dcgm-exporter-dra", {"app": "nvidia-dcgm-exporter"}, owner=None)
    failed = _failed(verdict(replace(snap, services={**svcs, "nvidia-dcgm-exporter-dra": extra}),
                             CAT))
    assert "nvidia-dcgm-exporter-dra" in failed["no-dra-names/*-dra"]


def test_a_pod_annotation_beside_the_annotated_service_is_a_certain_duplicate() -> None:
    snap = _migrated()
    pods = tuple(replace(p, scrape_annotations={"prometheus.io/scrape": "true"}, phase="Running")
                 if p.owner_name == "nvidia-dcgm-exporter-dra" else p for p in snap.pods)
    failed = _failed(verdict(replace(snap, pods=pods), CAT))
    assert "3 of 3 exporter pods are scraped more than once" in failed["scrape-once/exporters"]


def test_a_ready_exporter_pod_no_target_reaches_fails() -> None:
    snap = _migrated()
    src: dict[str, Any] = dict(snap.services["nvidia-dcgm-exporter-dra"])
    src["metadata"] = {**src["metadata"], "annotations": {}}
    failed = _failed(verdict(replace(
        snap, services={**snap.services, "nvidia-dcgm-exporter-dra": src}), CAT))
    assert "3 Ready exporter pods are reached by no scrape target" in failed[
        "scrape-once/unscraped"]


def test_a_namespace_without_dcgm_is_never_green() -> None:
    v = verdict(Snapshot(b.NS), CAT)
    assert not v.ok and _failed(v) == {
        "dcgm-found/gpu-operator": "no GPU Operator DCGM DaemonSet runs in this namespace"}


def test_marks_of_a_lost_state_are_the_tools_services_only() -> None:
    assert tool_marks(b.gpucluster_snapshot(labelled=True), CAT) == []
    assert tool_marks(_migrated(), CAT) == ["Service/nvidia-dcgm (the tool's alias)",
                                            "Service/nvidia-dcgm-exporter (the tool's alias)"]


def test_the_alias_owner_is_the_oldest_gpucluster_not_the_first_listed() -> None:
    stray = {"metadata": {"name": "aaa-stray", "creationTimestamp": "2026-11-30T00:00:00Z"}}
    real = {"metadata": {"name": "gpu-cluster", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    going = {"metadata": {"name": "old", "creationTimestamp": "2025-01-01T00:00:00Z",
                          "deletionTimestamp": "2026-12-01T00:00:00Z"}}
    assert aliasing.owner_of([stray, real]) is real
    assert aliasing.owner_of([going, stray, real]) is real  # one being deleted is passed over
    assert aliasing.owner_of([]) is None


def test_a_service_an_operator_release_manages_is_no_mark_of_a_lost_state() -> None:
    """Handed over: the release's reconciler adopted the alias and labels it its own."""
    snap = _migrated()
    adopted = {name: {**svc, "metadata": {
        **svc["metadata"], "labels": {**svc["metadata"]["labels"],
                                      "nvidia.com/shared-service": "true"}}}
        for name, svc in snap.services.items() if name in ("nvidia-dcgm", "nvidia-dcgm-exporter")}
    assert tool_marks(replace(snap, services={**snap.services, **adopted}), CAT) == []
