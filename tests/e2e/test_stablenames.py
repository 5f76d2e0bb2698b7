"""What tests/helpers/stablenames.py excuses, on a bare store: only an absence that began when
the collector took a Service its old operator had handed back after the tool kept it; every
other absence (a Service deleted before anyone kept it, a kept Service deleted, one never
created again) counts against the tool."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from dcgm_sim.clock import SimClock
from dcgm_sim.cluster import SimCluster
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.conftest import edit_object
from tests.helpers.stablenames import StableNames, watching

NS = "gpu-operator"
OWNER = [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "gpu-cluster-policy",
          "uid": "cp-uid", "controller": True, "blockOwnerDeletion": True}]


def service(name: str, owners: list[dict[str, Any]] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if owners:
        meta["ownerReferences"] = owners
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 5555}]}}


def owners(store: Store, name: str, refs: list[dict[str, Any]] | None) -> None:
    edit_object(store, kinds.SERVICE, NS, name,
                lambda svc: svc["metadata"].update(ownerReferences=refs or []))


def run(steps: str) -> StableNames:
    """`steps`, one letter each: k keep (owner removed), r the operator's re-render (owner
    back), d the collector's delete, c created again without an owner."""
    store = Store()
    store.create(kinds.SERVICE, service("nvidia-dcgm", OWNER))
    sim = cast(SimCluster, SimpleNamespace(store=store, clock=SimClock(0.01)))
    with watching(sim, NS, ["nvidia-dcgm"]) as seen:
        for step in steps:
            if step == "k":
                owners(store, "nvidia-dcgm", None)
            elif step == "r":
                owners(store, "nvidia-dcgm", OWNER)
            elif step == "d":
                store.delete(kinds.SERVICE, NS, "nvidia-dcgm")
            else:
                store.create(kinds.SERVICE, service("nvidia-dcgm", None))
            sim.clock.sleep(0.05)
    return seen


def test_a_hand_back_after_the_keep_is_the_operators_and_named_by_its_version() -> None:
    seen = run("krdc")
    assert seen.absent_seconds["nvidia-dcgm"] > 0
    assert seen.unexplained_absence() == {}
    assert list(seen.handed_back) == ["nvidia-dcgm"]


def test_every_other_absence_is_the_tools() -> None:
    for steps in ("dc", "kdc", "krd"):  # never kept; kept, then deleted; never back
        seen = run(steps)
        assert seen.unexplained_absence().get("nvidia-dcgm", 0) > 0, steps
    assert run("krk").absent_seconds == {}  # kept again before any delete: never absent
