"""The DaemonSet controller's remembered per-node shares (`daemonindex`) decide exactly what
the full pass of the pure `rollouts` functions decides: manage, the maxSurge 0 rolling update
and the status counters, after any sequence of pod changes."""

from __future__ import annotations

import random
from typing import Any

import pytest

from dcgm_sim.controllers import rollouts as R
from dcgm_sim.controllers.daemonindex import DaemonPods, NodeShares

NEW, OLD = "newhash", "oldhash"


def _ds(max_unavailable: Any, max_surge: Any = 0) -> dict[str, Any]:
    return {"metadata": {"name": "ds", "namespace": "ns", "generation": 2},
            "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "maxUnavailable": max_unavailable, "maxSurge": max_surge}}}}


def _view(rng: random.Random, i: int, node: str) -> R.PodView:
    terminal = rng.random() < 0.05
    return R.PodView(obj={"spec": {}}, name=f"pod-{i}", uid=f"uid-{i}", node=node,
                     ready=rng.random() < 0.8, deleting=rng.random() < 0.1, terminal=terminal,
                     hash=rng.choice([NEW, OLD]), generation=None,
                     sort_key=(0, f"2026-01-01T00:00:{rng.randrange(60):02d}Z", f"pod-{i}"))


def _fits(rng: random.Random, nodes: list[str]) -> dict[str, tuple[bool, bool]]:
    out = {}
    for n in nodes:
        run = rng.random() < 0.9
        out[n] = (run, run or rng.random() < 0.5)
    return out


def _ready(p: R.PodView) -> bool:
    return p.ready


def _agree(ds: dict[str, Any], fits: dict[str, tuple[bool, bool]], pods: DaemonPods,
           shares: NodeShares) -> None:
    full_manage = R.manage_plan(ds, fits, pods.by_node, NEW, _ready)
    assert (shares.manage_plan().create, shares.manage_plan().delete) == (
        full_manage.create, full_manage.delete)
    full_status = R.compute_status(ds, fits, pods.by_node, NEW, _ready)
    assert R.status_of(ds, shares.totals) == full_status
    _, max_unavailable = R._rolling_counts(ds, shares.totals[0])
    full_roll = R.rolling_update_plan(ds, fits, pods.by_node, NEW, _ready)
    assert shares.rolling_plan(max_unavailable).delete == full_roll.delete


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_unavailable", [1, 3, "20%"])
def test_shares_match_the_full_pass_through_random_changes(seed: int,
                                                           max_unavailable: Any) -> None:
    rng = random.Random(seed)
    nodes = [f"node-{i:03d}" for i in range(40)]
    fits = _fits(rng, nodes)
    ds = _ds(max_unavailable)
    pods = DaemonPods()
    counter = 0
    for node in [*nodes, "gone-node"]:
        for _ in range(rng.choice([0, 1, 1, 1, 2])):
            counter += 1
            pods.put(_view(rng, counter, node))
    shares = NodeShares(("sig",), fits, pods, NEW, None, R._allows_surge(ds))
    _agree(ds, fits, pods, shares)
    for _ in range(150):
        if pods.by_name and rng.random() < 0.4:
            pods.drop(rng.choice(sorted(pods.by_name)))
        elif pods.by_name and rng.random() < 0.5:
            old = pods.by_name[rng.choice(sorted(pods.by_name))]
            fresh = _view(rng, int(old.name.split("-")[1]), old.node)
            pods.put(fresh)
        else:
            counter += 1
            pods.put(_view(rng, counter, rng.choice(nodes)))
        shares.refresh()
        _agree(ds, fits, pods, shares)


def test_an_unchanged_pod_version_is_not_a_change() -> None:
    rng = random.Random(1)
    pods = DaemonPods()
    view = _view(rng, 1, "node-1")
    assert pods.put(view) is True
    same = R.PodView(**{f: getattr(view, f) for f in R.PodView.__slots__})
    assert pods.put(same) is False
    assert pods.drop("pod-1") is True and pods.drop("pod-1") is False
    assert pods.by_node == {}
