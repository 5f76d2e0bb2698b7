"""Pure handling of objects on their way out and of pods that are not Ready: a Terminating
alias blocks re-creating it and is not deleted twice; a Pending pod is named with its reason
(a DRA claim not allocated) like a NotReady one."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from migrator import phases
from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.discovery import discover
from migrator.model.planning import Options, PlanContext
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import load_catalog
from migrator.model.steps import CreateAlias, DeleteAlias
from tests.helpers import builders as b

CAT = load_catalog()
HOLD = "example.com/hold"


def ctx(snap: Snapshot) -> PlanContext:
    return PlanContext(snap, CAT, discover(snap, CAT).components, Options())


def _with_terminating_alias() -> tuple[Snapshot, CreateAlias]:
    snap = b.gpucluster_snapshot()
    step = next(s for s in phases.alias.plan(ctx(snap)).steps if isinstance(s, CreateAlias))
    live: dict[str, Any] = copy.deepcopy(step.body)
    live["metadata"].update(uid="a-uid", deletionTimestamp="2025-01-01T00:00:00Z",
                            finalizers=[HOLD])
    return replace(snap, services={**snap.services, step.service: live}), step


def test_terminating_alias_blocks_its_recreation() -> None:
    snap, step = _with_terminating_alias()
    plan = phases.alias.plan(ctx(snap))
    assert plan.blocked is not None and f"Service/{step.service} is being deleted" in plan.blocked
    assert HOLD in plan.blocked and "finalizers" in plan.blocked
    assert step.service not in {s.service for s in plan.steps if isinstance(s, CreateAlias)}
    gate = next(r for r in plan.gates if r.name == f"alias-not-terminating/{step.service}")
    assert not gate.ok
    pre = phases.alias.before_write(ctx(snap), step)
    assert any(r.name.startswith("alias-not-terminating/") and not r.ok for r in pre)
    assert not step.satisfied(snap.services[step.service])


def test_terminating_alias_is_not_deleted_again_and_fails_verify() -> None:
    snap, step = _with_terminating_alias()
    live = snap.services[step.service]
    assert DeleteAlias(step.service, step.source).satisfied(live)
    back = phases.alias.rollback(ctx(snap), [step])
    assert back.steps == ()
    assert any("already being deleted" in n and HOLD in n for n in back.notes)
    [result] = [r for r in phases.alias.verify(ctx(snap), [step])
                if r.name == f"alias-holds/{step.service}"]
    assert not result.ok and "being deleted" in result.detail


def test_terminating_reason_names_the_finalizers() -> None:
    assert o.terminating({"metadata": {"name": "x"}}) is None
    assert o.terminating({"metadata": {"deletionTimestamp": "T", "finalizers": ["a", "b"]}}) == \
        "Terminating since T, held by finalizers a, b"


def _pod(phase: str, conditions: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "uid": "u", **meta}, "spec": {"nodeName": "n1"},
            "status": {"phase": phase, "conditions": conditions}}


def test_pod_not_ready_reasons() -> None:
    unallocated = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": "0/3 nodes are available: 1 cannot allocate all claims."}
    ready = {"type": "Ready", "status": "True"}
    assert o.pod_not_ready_reason(_pod("Running", [ready])) == ""
    assert o.pod_not_ready_reason(_pod("Pending", [unallocated])) == \
        "Pending: claim not allocated"
    assert o.pod_not_ready_reason(_pod("Pending", [{**unallocated, "message": "no fit"}])) == \
        "Pending: Unschedulable"
    assert o.pod_not_ready_reason(_pod("Pending", [])) == "Pending"
    assert o.pod_not_ready_reason(_pod("Running", [{**ready, "status": "False"}])) == \
        "Running, not Ready"
    assert o.pod_not_ready_reason(_pod("Running", [ready], deletionTimestamp="T")) == \
        "terminating"


def test_not_ready_where_reports_pending_like_not_ready() -> None:
    unallocated = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": "0/3 nodes are available: 1 cannot allocate all claims."}
    views = [PodView.of(_pod("Pending", [unallocated])),
             replace(PodView.of(_pod("Running", [{"type": "Ready", "status": "True"}])),
                     node="n2"),
             replace(PodView.of(_pod("Running", [])), node="n3")]
    assert g.not_ready_where(views) == ["n1 (Pending: claim not allocated)",
                                        "n3 (Running, not Ready)"]
