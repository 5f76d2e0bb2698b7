"""Who holds a stable name and whether it changed hands (`model/guarding.py` `holder`,
`changed_hands`): the one answer the guard's loop uses both to follow a takeover without its
throttle and to count it on `/metrics`. Plain dicts: no API server."""

from __future__ import annotations

import queue
import threading
from typing import Any, cast

from migrator.engine.guard import Guard
from migrator.engine.guardloop import Cadence, Queued
from migrator.kube.client import Kube
from migrator.model.guarding import NOBODY, OTHER, TOOL, changed_hands, holder
from migrator.model.stacks import load_catalog

CATALOG = load_catalog()


def _svc(uid: str = "u1", labels: dict[str, str] | None = None,
         owner: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "nvidia-dcgm-exporter", "uid": uid, "labels": labels or {},
                         "ownerReferences": [owner] if owner else [], **meta},
            "spec": {"selector": {"app": "x"}}}


def _cp(name: str = "cluster-policy", uid: str = "cp1") -> dict[str, Any]:
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": name, "uid": uid,
            "controller": True}


TOOL_LABELS = {"app.kubernetes.io/managed-by": "dcgm-migrate"}


def test_each_kind_of_holder_is_named() -> None:
    assert holder(None, CATALOG) == NOBODY
    assert holder(_svc(deletionTimestamp="2025-01-01T00:00:00Z"), CATALOG) == NOBODY
    assert holder(_svc(labels=TOOL_LABELS), CATALOG) == TOOL
    assert holder(_svc(owner=_cp()), CATALOG) == "ClusterPolicy/cluster-policy"
    other = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "d1",
             "controller": True}
    assert holder(_svc(owner=other), CATALOG) == "Deployment/d"
    assert holder(_svc(), CATALOG) == OTHER


def test_a_takeover_and_a_lost_service_change_hands_a_re_render_does_not() -> None:
    alias, taken = holder(_svc(labels=TOOL_LABELS), CATALOG), holder(_svc(owner=_cp()), CATALOG)
    assert changed_hands(alias, taken)  # the operator took the alias over
    assert changed_hands(taken, NOBODY)  # its ClusterPolicy went and took the Service along
    assert changed_hands(NOBODY, alias)  # the guard created the alias again
    # The operator replacing its own Service whole (a new uid, the same ClusterPolicy) and
    # the garbage collector re-creating it are the same holder.
    again = holder(_svc(uid="u2", owner=_cp(uid="cp1")), CATALOG)
    assert not changed_hands(taken, again)
    assert not changed_hands(None, taken)  # a first look is no change


def test_the_loop_follows_takeovers_and_counts_each_new_holder_once() -> None:
    """The loop's two uses of the answer: no throttle after a change of hands, and
    `dcgm_migrate_takeovers_total` counting each new holder (a lost Service is no takeover)."""
    guard = Guard(cast(Kube, None), "gpu-operator", CATALOG)
    loop = Cadence(guard, lambda: True, guard.health, lambda: 0)
    now = guard.clock.monotonic()
    loop.next_pass, loop.last_pass, loop.last_judged, loop.dirty = float("inf"), now, now, False
    stop = threading.Event()

    def seen(etype: str, svc: dict[str, Any]) -> float:
        events: queue.Queue[Queued] = queue.Queue()
        events.put((etype, {**svc, "kind": "Service"}, guard.clock.monotonic()))
        loop.dirty = False
        loop.tick(events, stop)
        return guard.metrics.registry.get_sample_value(
            "dcgm_migrate_takeovers_total", {"name": "nvidia-dcgm-exporter"}) or 0.0

    assert seen("ADDED", _svc(labels=TOOL_LABELS)) == 0 and loop.hot_until == float("-inf")
    assert seen("MODIFIED", _svc(owner=_cp())) == 1 and loop.hot_until > now
    loop.hot_until = float("-inf")
    assert seen("MODIFIED", _svc(uid="u2", owner=_cp())) == 1  # re-rendered: same holder
    assert loop.hot_until == float("-inf")
    assert seen("DELETED", _svc(uid="u2", owner=_cp())) == 1 and loop.hot_until > now
    assert seen("ADDED", _svc(uid="u3", labels=TOOL_LABELS)) == 2  # created again
