"""The gates (docs/design.md, "Gates") one by one, on hand-built snapshots: when each passes, when
it fails, and that a failure names what is wrong (nodes, pods, Services)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from migrator.model import gates as g
from migrator.model.selectors import for_service
from migrator.model.snapshot import PodView, ServiceEndpoints, Snapshot
from tests.helpers.builders import NS, daemonset, endpoints_for, pods, service

DS = "nvidia-dcgm-dra"
KEY = "nvidia.com/gpu-operator.dcgm"


def snap(*pod_views: PodView, endpoints: dict[str, ServiceEndpoints] | None = None,
         services: dict[str, dict[str, object]] | None = None) -> Snapshot:
    return Snapshot(NS, pods=tuple(pod_views), endpoints=endpoints or {},
                    services=services or {})


# ---- rollout ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("ds", "ok", "detail"), [
    (daemonset(DS, desired=3), True, "updated 3/3, available 3/3"),
    (daemonset(DS, desired=0), True, "updated 0/0, available 0/0"),  # nothing to roll
    (daemonset(DS, desired=3, updated=2), False, "updated 2/3, available 3/3"),
    (daemonset(DS, desired=3, available=2), False, "updated 3/3, available 2/3"),
])
def test_rollout_complete_is_kubectl_rollout_status(ds: dict[str, object], ok: bool,
                                                    detail: str) -> None:
    result = g.rollout_complete(ds)
    assert (result.name, result.ok, result.detail) == (f"rollout-complete/{DS}", ok, detail)


def test_a_rollout_the_controller_has_not_seen_is_not_complete() -> None:
    ds = daemonset(DS, desired=3, generation=2)
    ds["status"]["observedGeneration"] = 1  # counts of the old template
    result = g.rollout_complete(ds)
    assert not result.ok and "has not observed generation 2" in result.detail


def test_an_unhealthy_daemonset_names_the_nodes_whose_pods_are_not_ready() -> None:
    views = pods(DS, 3)
    views[1] = replace(views[1], ready=False)
    result = g.daemonset_healthy(snap(*views), daemonset(DS, desired=3, available=2))
    assert not result.ok and result.detail.endswith("pods not ready on nodes node-1 (not Ready)")
    assert g.daemonset_healthy(snap(*pods(DS, 3)), daemonset(DS)).ok


# ---- labels on pods -----------------------------------------------------------------------------

def test_pods_carry_checks_every_live_pod() -> None:
    labelled = pods(DS, 3, labels={KEY: "true"})
    assert g.pods_carry(snap(*labelled), DS, {KEY: "true"}).ok
    mixed = [*labelled[:2], *pods(DS, 3)[2:]]
    result = g.pods_carry(snap(*mixed), DS, {KEY: "true"})
    assert not result.ok and result.name == f"pods-labelled/{DS}"
    assert result.detail == f"1 of 3 pods lack it: {DS}-2 on nodes node-2"


def test_pods_carry_none_means_the_key_is_absent_and_ignores_deleting_pods() -> None:
    plain = pods(DS, 2)
    assert g.pods_carry(snap(*plain), DS, {KEY: None}, gate="unlabelled").ok
    old = replace(pods(DS, 3, labels={KEY: "true"})[2], deleting=True)
    result = g.pods_carry(snap(*plain, old), DS, {KEY: None}, gate="unlabelled")
    assert result.ok and result.detail == "2 pods"  # a terminating pod is on its way out
    assert not g.pods_carry(snap(*plain, replace(old, deleting=False)), DS, {KEY: None}).ok


def test_a_long_list_is_cut_to_five_names() -> None:
    views = pods(DS, 8)
    result = g.pods_carry(snap(*views), DS, {KEY: "true"})
    assert result.detail.startswith("8 of 8 pods lack it: ")
    assert "and 3 more on nodes" in result.detail and result.detail.endswith("and 3 more")


# ---- endpoints ----------------------------------------------------------------------------------

def test_endpoints_hold_against_the_baseline_with_a_tolerance() -> None:
    views = pods(DS, 4)
    base = g.baseline(snap(endpoints={"svc": endpoints_for("svc", views)}), "svc", local=False)
    # per node too: what a node deleted since took along (`endpoints_hold`), not in the state
    assert base.total == 4 and base.by_node == {p.node: 1 for p in views}
    assert base.as_dict() == {"service": "svc", "total": 4, "by_node": {}, "local": False}
    one_down = snap(endpoints={"svc": endpoints_for("svc", views[:3])})
    assert g.endpoints_hold(snap(endpoints={"svc": endpoints_for("svc", views)}), base).ok
    assert not g.endpoints_hold(one_down, base).ok
    assert g.endpoints_hold(one_down, base, tolerance=1).ok
    assert g.endpoints_hold(one_down, base).detail == "3/4 ready"
    more = snap(endpoints={"svc": endpoints_for("svc", [*views, *pods("x", 1)])})
    assert g.endpoints_hold(more, base).ok  # more than before is never a loss


def test_local_endpoints_hold_per_node() -> None:
    views = pods(DS, 3)
    base = g.baseline(snap(endpoints={"svc": endpoints_for("svc", views)}), "svc", local=True)
    assert base.by_node == {"node-0": 1, "node-1": 1, "node-2": 1}
    # Same total, but node-1's endpoint moved to node-0: node-1 lost its local endpoint.
    moved = [views[0], replace(views[1], name="p", node="node-0"), views[2]]
    result = g.endpoints_hold(snap(endpoints={"svc": endpoints_for("svc", moved)}), base)
    assert not result.ok and result.detail == "3/3 ready, per node; below baseline on node-1"
    assert g.endpoints_hold(snap(endpoints={"svc": endpoints_for("svc", moved)}), base,
                            tolerance=1).ok


def test_a_service_without_endpoints_has_none() -> None:
    base = g.ServiceBaseline("svc", 2)
    assert not g.endpoints_hold(snap(), base).ok
    assert g.ServiceBaseline.from_dict(base.as_dict()) == base


def test_endpoints_are_exactly_the_pods() -> None:
    views = pods(DS, 3)
    s = snap(endpoints={"svc": endpoints_for("svc", views[:2] + pods("other", 1))})
    want = frozenset(p.name for p in views)
    result = g.endpoints_are(s, "svc", want)
    assert not result.ok and result.name == "endpointslices/svc"
    assert result.detail == f"missing {DS}-2; unexpected other-0"
    assert g.endpoints_are(s, "svc", frozenset({f"{DS}-0", f"{DS}-1", "other-0"})).ok
    # With the pods read too, each is named with its node: a pod of a deleted node waits
    # there for the pod garbage collector, and the node says why.
    listed = snap(*views, endpoints=dict(s.endpoints))
    assert g.endpoints_are(listed, "svc", want).detail == (
        f"missing {DS}-2 on {views[2].node}; unexpected other-0")


def test_pods_on_a_deleted_node_count_neither_way_once_the_nodes_are_known() -> None:
    """A deleted node's pods stay Ready until the pod garbage collector (40 to 60 s); the
    EndpointSlice controller leaves them out at the Service's next sync and keeps them until
    their own next event, so either way holds once the Nodes were read (never before)."""
    views = pods(DS, 3)
    gone = views[2].node
    want = frozenset(p.name for p in views)
    left_out = snap(*views, endpoints={"svc": endpoints_for("svc", views[:2])})
    assert not g.endpoints_are(left_out, "svc", want).ok  # the Nodes not read: waited for
    nodes = frozenset(p.node for p in views[:2] if p.node)
    known = replace(left_out, nodes=nodes)
    assert known.on_deleted_nodes() == {f"{DS}-2"}
    result = g.endpoints_are(known, "svc", want)
    assert result.ok and result.detail == "2 ready endpoints, 1 pod on deleted nodes left aside"
    kept = replace(known, endpoints={"svc": endpoints_for("svc", views)})
    assert g.endpoints_are(kept, "svc", want - {f"{DS}-2"}).ok  # still listed: fine too
    # a node that exists is no excuse
    assert not g.endpoints_are(replace(left_out, nodes=nodes | {gone or ""}), "svc", want).ok


def test_a_node_deleted_since_the_baseline_is_left_aside_once_the_nodes_are_known() -> None:
    """What a deleted node had at the baseline is owed no more (its pods, if still there, may
    be listed or not): per node for Local, else in total; a loss on a node that exists still
    counts, and nothing is excused before the Nodes were read."""
    views = pods(DS, 3)
    nodes = [p.node or "" for p in views]
    base_snap = snap(*views, endpoints={"svc": endpoints_for("svc", views)})
    flat, local = (g.baseline(base_snap, "svc", local=False),
                   g.baseline(base_snap, "svc", local=True))
    assert flat.by_node == local.by_node == {n: 1 for n in nodes} and flat.total == 3
    after = snap(*views, endpoints={"svc": endpoints_for("svc", views[:2])})
    known = replace(after, nodes=frozenset(nodes[:2]))
    for base in (flat, local):
        assert not g.endpoints_hold(after, base).ok  # the Nodes not read
        held = g.endpoints_hold(known, base)
        assert held.ok and held.detail.endswith(f"; deleted since, left aside: {nodes[2]}")
        still_listed = replace(known, endpoints={"svc": endpoints_for("svc", views)})
        assert g.endpoints_hold(still_listed, base).ok
        worse = replace(known, endpoints={"svc": endpoints_for("svc", views[:1])})
        assert not g.endpoints_hold(worse, base).ok
        assert not g.endpoints_hold(replace(known, nodes=frozenset(nodes)), base).ok
    # the state keeps per-node counts for Local only: a resumed run's excuses nothing else
    assert g.ServiceBaseline.from_dict(local.as_dict()) == local
    resumed = g.ServiceBaseline.from_dict(flat.as_dict())
    assert resumed.by_node == {} and not g.endpoints_hold(known, resumed).ok


def test_the_nodes_are_needed_only_when_slices_leave_out_a_ready_pod() -> None:
    views = pods(DS, 2)
    services = {"svc": service("svc", {"app": DS})}
    listed = snap(*views, endpoints={"svc": endpoints_for("svc", views)}, services=services)
    assert listed.lists_every_ready_pod()
    assert not replace(listed, endpoints={"svc": endpoints_for("svc", views[:1])}
                       ).lists_every_ready_pod()
    unready = replace(views[1], ready=False)  # a pod not Ready is not owed an endpoint
    assert snap(views[0], unready, endpoints={"svc": endpoints_for("svc", views[:1])},
                services=services).lists_every_ready_pod()


def test_unready_endpoints_do_not_count() -> None:
    views = pods(DS, 2)
    views[1] = replace(views[1], ready=False)
    s = snap(endpoints={"svc": endpoints_for("svc", views)})
    assert g.endpoints_are(s, "svc", frozenset({f"{DS}-0"})).ok
    assert g.baseline(s, "svc", local=False).total == 1


# ---- selector switch ----------------------------------------------------------------------------

OLD = {"app": DS}
NEW = {KEY: "true"}


def test_the_new_selector_must_keep_every_ready_pod() -> None:
    labelled = pods(DS, 3, labels={KEY: "true"})
    result, strays = g.selector_superset(snap(*labelled), "svc", OLD, NEW, False, [DS])
    assert result.ok and strays == [] and result.detail == "new 3 ⊇ old 3 ready pods"
    half = [*labelled[:2], *pods(DS, 3)[2:]]
    result, _ = g.selector_superset(snap(*half), "svc", OLD, NEW, False, [DS])
    assert not result.ok and result.detail == f"pods the new selector would drop: {DS}-2"


def test_local_services_need_the_superset_on_every_node() -> None:
    labelled = pods(DS, 3, labels={KEY: "true"})
    # Still 3 ready pods under the new selector, but node-2's is not among them.
    shifted = [*labelled[:2], replace(pods(DS, 3)[2], name="x"),
               replace(labelled[0], name="y", uid="y")]
    result, _ = g.selector_superset(snap(*shifted), "svc", OLD, NEW, True, [DS])
    assert not result.ok and result.detail == "nodes that would lose their local endpoint: node-2"
    assert g.selector_superset(snap(*labelled), "svc", OLD, NEW, True, [DS])[0].ok


def test_pods_outside_the_daemonsets_are_strays_not_a_veto() -> None:
    stray = replace(pods("someone-else", 1, labels={KEY: "true"})[0], owner_name="other")
    views = [*pods(DS, 2, labels={KEY: "true"}), stray]
    result, strays = g.selector_superset(snap(*views), "svc", OLD, NEW, False, [DS])
    assert result.ok and strays == ["someone-else-0"]


def test_a_service_without_a_selector_had_no_pods_to_keep() -> None:
    """A selector-less Service has no controller-managed endpoints (EndpointSlice controller),
    so switching it can drop nothing; it does not stand for every pod of the namespace."""
    views = [*pods(DS, 2, labels={KEY: "true"}), *pods("unrelated", 2)]
    result, _ = g.selector_superset(snap(*views), "svc", {}, NEW, False, [DS])
    assert result.ok and result.detail == "new 2 ⊇ old 0 ready pods"


def test_services_selecting_a_label_key() -> None:
    svcs = {"a": service("a", {KEY: "true"}), "b": service("b", {"app": DS}),
            "c": service("c", {})}
    assert g.services_selecting(snap(services=svcs), KEY) == ["a"]


@pytest.mark.parametrize(("selector", "labels", "ok"), [
    ({"app": DS}, {"app": DS, KEY: "true"}, True),
    ({"app": DS, KEY: "true"}, {"app": DS}, False),
    ({}, {"app": DS}, False),  # no selector: no pods
])
def test_service_selects(selector: dict[str, str], labels: dict[str, str], ok: bool) -> None:
    svc = service("svc", selector)
    assert for_service(svc["spec"].get("selector")).matches(labels) is ok
