"""What the DaemonSet controller remembers between syncs, so a sync costs the nodes that
changed rather than every node of the fleet.

A full pass of the `rollouts` functions visits every node; at 5000 nodes, with a few syncs per
rolled node, that made the sim (not the tool) the bottleneck of a rollout. `DaemonPods` indexes
one DaemonSet's pods by node as events arrive (oldest first, as `group_by_node`) and notes the
nodes they touched; `NodeShares` remembers each node's share of `manage`, of the maxSurge == 0
rolling update and of the status counters, and recomputes only the touched nodes. The per-node
functions are the ones the full pass sums, so both give the same plan and status; what the
shares do not cover (minReadySeconds, which makes availability depend on time) keeps the full
pass.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from dcgm_sim.controllers.rollouts import (
    NO_COUNTS,
    Available,
    Counts,
    Fits,
    Plan,
    PodView,
    add_counts,
    manage_node,
    node_counts,
    rolling_node,
)

Signature = tuple[object, ...]  # what the shares were computed for


def _essence(v: PodView) -> tuple[object, ...]:
    return (v.uid, v.node, v.ready, v.deleting, v.terminal, v.hash, v.generation, v.sort_key)


class DaemonPods:
    """One DaemonSet's pods: by name, and by node oldest first (terminal deleting pods left
    out, as `group_by_node`); `touched` collects the nodes whose pods changed."""

    def __init__(self) -> None:
        self.by_name: dict[str, PodView] = {}
        self.by_node: dict[str, list[PodView]] = {}
        self.touched: set[str] = set()

    def __len__(self) -> int:
        return len(self.by_name)

    def get(self, name: str) -> PodView | None:
        return self.by_name.get(name)

    def put(self, view: PodView) -> bool:
        """Index a new version of a pod; True when anything the controller reads changed."""
        old = self.by_name.get(view.name)
        self.by_name[view.name] = view
        if old is not None:
            self._unlist(old)
        self._list(view)
        return old is None or _essence(old) != _essence(view)

    def drop(self, name: str) -> bool:
        old = self.by_name.pop(name, None)
        if old is None:
            return False
        self._unlist(old)
        return True

    def _list(self, view: PodView) -> None:
        self.touched.add(view.node)
        if view.terminal and view.deleting:
            return
        group = self.by_node.setdefault(view.node, [])
        bisect.insort(group, view, key=lambda v: v.sort_key)

    def _unlist(self, view: PodView) -> None:
        self.touched.add(view.node)
        group = self.by_node.get(view.node)
        if group is None:
            return
        for i, v in enumerate(group):
            if v.name == view.name:
                del group[i]
                break
        if not group:
            del self.by_node[view.node]


@dataclass
class _Share:
    counts: Counts
    plan: Plan
    unavailable: int
    replace: str | None
    candidate: str | None


class NodeShares:
    """Each node's share of one DaemonSet's sync, valid for one `signature` (the fits, the
    template hash and generation, surge allowed or not); availability is readiness."""

    def __init__(self, signature: Signature, fits: Fits, pods: DaemonPods, hash_: str,
                 generation: int | None, surge: bool) -> None:
        self.signature = signature
        self._fits = fits
        self._pods = pods
        self._hash = hash_
        self._gen = generation
        self._surge = surge
        self._order = {node: i for i, node in enumerate(fits)}
        self._shares: dict[str, _Share] = {}
        self.totals: Counts = NO_COUNTS
        self.unavailable = 0
        self._managed: set[str] = set()
        self._replace: dict[str, str] = {}
        self._candidates: dict[str, str] = {}
        # Candidate nodes as a heap, pruned lazily: a rolling wave asks for the first few in
        # name order, and a scan of all 5,000 (min/nsmallest) on every sync grew each wave's
        # cost with the node count.
        self._heap: list[str] = []
        self._in_heap: set[str] = set()
        pods.touched.clear()
        self._refresh(list(fits) + [n for n in pods.by_node if n not in fits])

    @staticmethod
    def _ready(pod: PodView) -> bool:
        return pod.ready

    def over(self, pods: DaemonPods) -> bool:
        """Are these shares of this index? The controller drops a DaemonSet's index when its
        last pod goes and starts a new one with the next pod; shares of the old index would
        never see that pod and ask for it again on every sync."""
        return self._pods is pods

    def refresh(self) -> None:
        """Recompute the nodes whose pods changed since the last call."""
        if self._pods.touched:
            touched = list(self._pods.touched)
            self._pods.touched.clear()
            self._refresh(touched)

    def _refresh(self, nodes: Iterable[str]) -> None:
        available: Available = self._ready
        for node in nodes:
            old = self._shares.pop(node, None)
            if old is not None:
                self.totals = add_counts(self.totals, old.counts, -1)
                self.unavailable -= old.unavailable
            self._managed.discard(node)
            self._replace.pop(node, None)
            self._candidates.pop(node, None)
            pods = self._pods.by_node.get(node)
            fit = self._fits.get(node)
            counts, plan = NO_COUNTS, Plan()
            if fit is not None:
                counts = node_counts(fit[0], pods, self._hash, self._gen, available)
                manage_node(plan, node, fit[0], fit[1], pods, self._hash, available, self._surge)
            unavailable, replace, candidate = 0, None, None
            if pods or (fit is not None and fit[0]):
                unavailable, replace, candidate = rolling_node(pods, self._hash, self._gen,
                                                               available)
            share = _Share(counts, plan, unavailable, replace, candidate)
            if counts is NO_COUNTS and not plan and not unavailable and not replace \
                    and not candidate:
                continue
            self._shares[node] = share
            self.totals = add_counts(self.totals, counts)
            self.unavailable += unavailable
            if plan:
                self._managed.add(node)
            if replace is not None:
                self._replace[node] = replace
            if candidate is not None:
                self._candidates[node] = candidate
                if node not in self._in_heap:
                    heapq.heappush(self._heap, node)
                    self._in_heap.add(node)

    def manage_plan(self) -> Plan:
        """`manage_plan` over every node, in the fits' order."""
        plan = Plan()
        for node in sorted(self._managed, key=self._order.__getitem__):
            share = self._shares[node].plan
            plan.create.extend(share.create)
            plan.delete.extend(share.delete)
        return plan

    def rolling_plan(self, max_unavailable: int) -> Plan:
        """The maxSurge == 0 branch of `rolling_update_plan`: every unavailable old pod, then
        old available pods in node-name order while the budget lasts."""
        plan = Plan()
        plan.delete = [self._replace[n] for n in sorted(self._replace)]
        remaining = min(max(max_unavailable - self.unavailable, 0), len(self._candidates))
        if remaining:
            plan.delete += [self._candidates[n] for n in self._first_candidates(remaining)]
        return plan

    def _first_candidates(self, count: int) -> list[str]:
        """The `count` candidate nodes first in name order (`heapq.nsmallest` over the
        candidates, without visiting them all)."""
        first: list[str] = []
        while self._heap and len(first) < count:
            node = heapq.heappop(self._heap)
            self._in_heap.discard(node)
            if node in self._candidates:  # else: no longer a candidate, dropped for good
                first.append(node)
        for node in first:
            heapq.heappush(self._heap, node)
            self._in_heap.add(node)
        return first
