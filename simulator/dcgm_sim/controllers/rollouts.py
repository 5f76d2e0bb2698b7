"""Pure DaemonSet logic, after kubernetes/pkg/controller/daemon: the pod a DaemonSet creates,
its ControllerRevision, the status counters, and the `manage` / `rollingUpdate` decisions.

No store, no clock: availability comes in as a function, so the controller (simulated time,
minReadySeconds) and the seed (everything Ready) share the exact same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim import admission, kinds
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.scheduling import daemon_tolerations, pin_to_node
from dcgm_sim.jsoncopy import clone
from dcgm_sim.store import TEMPLATE_GENERATION_ANNOTATION

Obj = dict[str, Any]

HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
# Status fields the API omits when zero (`omitempty` in apps/v1 DaemonSetStatus).
_OMIT_WHEN_ZERO = ("observedGeneration", "updatedNumberScheduled", "numberAvailable",
                   "numberUnavailable")


def template_generation(ds: Mapping[str, Any]) -> int | None:
    """`util.GetTemplateGeneration`: the server-owned annotation (`store.template_generation`);
    an object without it (none the store wrote) falls back to `metadata.generation`."""
    meta = ds.get("metadata", {})
    raw = (meta.get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION)
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            return None
    gen = meta.get("generation")
    return int(gen) if gen is not None else None


def ds_hash(ds: Mapping[str, Any]) -> str:
    collisions = int((ds.get("status") or {}).get("collisionCount") or 0)
    return P.template_hash(ds["spec"]["template"], collisions)


def new_pod(ds: Mapping[str, Any], node: str, hash_: str, name: str) -> Obj:
    """The pod `syncNodes` creates for `node`, as the API server stores it (defaulted by
    `admission.admit`). The sim's scheduler binds at once: `spec.nodeName` is set next to the
    node-name affinity, with the PodScheduled condition."""
    template = clone(ds["spec"]["template"])
    meta = template.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    generation = template_generation(ds)
    if generation is not None:
        labels[GENERATION_LABEL] = str(generation)
    labels[HASH_LABEL] = hash_
    spec = template.get("spec") or {}
    spec["tolerations"] = daemon_tolerations(spec)
    spec["affinity"] = pin_to_node(spec.get("affinity"), node)
    spec["nodeName"] = node
    pod_meta: Obj = {
        "name": name,
        "generateName": f"{ds['metadata']['name']}-",
        "namespace": ds["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [P.owner_reference(ds)],
    }
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    pod = admission.admit(kinds.POD, {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
                                      "spec": spec})
    pod.setdefault("status", {})["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
         "lastTransitionTime": P.now_rfc3339()}]
    return pod


class PodFactory:
    """`new_pod` for many nodes at once: admission runs once per DaemonSet revision, then the
    admitted pod is stamped per node (name, nodeName, node affinity, PodScheduled). The result
    shares unchanged sub-objects with the cached pod: hand it to `Store.create` (which copies)
    or copy it before changing it."""

    def __init__(self) -> None:
        self._base: dict[str, tuple[tuple[str, int | None], Obj]] = {}

    def pod(self, ds: Mapping[str, Any], node: str, hash_: str, name: str) -> Obj:
        uid = str(ds["metadata"].get("uid", ""))
        key = (hash_, template_generation(ds))
        cached = self._base.get(uid)
        if cached is None or cached[0] != key:
            cached = (key, new_pod(ds, node, hash_, name))
            self._base[uid] = cached
        base = cached[1]
        affinity = pin_to_node(base["spec"]["affinity"], node)
        spec = dict(base["spec"], nodeName=node, affinity=affinity)
        status = dict(base["status"], conditions=[
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": P.now_rfc3339()}])
        return dict(base, metadata=dict(base["metadata"], name=name), spec=spec, status=status)

    def forget(self, uid: str) -> None:
        self._base.pop(uid, None)


def revision_patch(ds: Mapping[str, Any]) -> Obj:
    """`getPatch`: the ControllerRevision data that restores this template. Shares the
    template's parts with `ds` (stored objects are never mutated; a store write copies)."""
    template = dict(ds["spec"]["template"])
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def new_revision(ds: Mapping[str, Any], hash_: str, revision: int) -> Obj:
    meta = ds["metadata"]
    labels = dict((ds["spec"]["template"].get("metadata") or {}).get("labels") or {})
    labels[HASH_LABEL] = hash_
    rev_meta: Obj = {
        "name": f"{meta['name']}-{hash_}",
        "namespace": meta["namespace"],
        "labels": labels,
        "ownerReferences": [P.owner_reference(ds)],
    }
    if meta.get("annotations"):
        rev_meta["annotations"] = dict(meta["annotations"])
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": rev_meta,
            "data": revision_patch(ds), "revision": revision}


@dataclass(frozen=True, slots=True)
class PodView:
    """What the DaemonSet logic reads of one pod version, extracted once (a 5000-node sync
    reads each pod several times)."""

    obj: Obj
    name: str
    uid: str
    node: str
    ready: bool
    deleting: bool
    terminal: bool
    hash: str | None
    generation: str | None
    sort_key: tuple[int, str, str]

    @classmethod
    def of(cls, pod: Obj) -> PodView:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        return cls(pod, meta["name"], meta.get("uid", ""), P.node_name(pod), P.is_pod_ready(pod),
                   P.is_deleting(pod), P.is_pod_terminal(pod), labels.get(HASH_LABEL),
                   labels.get(GENERATION_LABEL), P.creation_sort_key(pod))

    def updated(self, hash_: str, generation: int | None) -> bool:
        """`util.IsPodUpdated`: the pod carries the current hash. Its second test, the template
        generation, compares the label with `fmt.Sprint(dsTemplateGeneration)`, a `*int64`,
        which prints the pointer (kubernetes pkg/controller/daemon/util/daemonset_util.go at
        05c351a9), so it never matches; the sim does not count it either (`generation` stays
        in the signature, as upstream's)."""
        return bool(hash_) and self.hash == hash_


def is_pod_updated(pod: Obj, hash_: str, generation: int | None) -> bool:
    return PodView.of(pod).updated(hash_, generation)


def group_by_node(pods: Iterable[PodView]) -> dict[str, list[PodView]]:
    """`getNodesToDaemonPods(includeDeletedTerminal=false)`, oldest pod first per node."""
    out: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.terminal and pod.deleting:
            continue
        group = out.get(pod.node)
        if group is None:
            out[pod.node] = [pod]
        else:
            group.append(pod)
            group.sort(key=lambda v: v.sort_key)
    return out


Available = Callable[[PodView], bool]
Fits = Mapping[str, tuple[bool, bool]]
NodePods = Mapping[str, list[PodView]]


def compute_status(
    ds: Mapping[str, Any], fits: Fits, node_pods: NodePods, hash_: str, available: Available,
    *, observe: bool = True,
) -> Obj:
    """`updateDaemonSetStatus`: the counters, from the oldest pod on each node."""
    generation = template_generation(ds)
    totals = NO_COUNTS
    for node, (should_run, _) in fits.items():
        counts = node_counts(should_run, node_pods.get(node), hash_, generation, available)
        if counts is not NO_COUNTS:
            totals = add_counts(totals, counts)
    return status_of(ds, totals, observe=observe)


Counts = tuple[int, int, int, int, int, int]  # desired, current, misscheduled, ready, updated,
NO_COUNTS: Counts = (0, 0, 0, 0, 0, 0)  # available: one node's share of the status counters


def node_counts(should_run: bool, pods: list[PodView] | None, hash_: str,
                generation: int | None, available: Available) -> Counts:
    """One node's contribution to `updateDaemonSetStatus`, from its oldest pod."""
    if not should_run:
        return (0, 0, 1, 0, 0, 0) if pods else NO_COUNTS
    if not pods:
        return (1, 0, 0, 0, 0, 0)
    oldest = pods[0]
    ready = oldest.ready
    return (1, 1, 0, int(ready), int(oldest.updated(hash_, generation)),
            int(ready and available(oldest)))


def add_counts(a: Counts, b: Counts, sign: int = 1) -> Counts:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2], a[3] + sign * b[3],
            a[4] + sign * b[4], a[5] + sign * b[5])


def status_of(ds: Mapping[str, Any], totals: Counts, *, observe: bool = True) -> Obj:
    """The status object from the summed node counts."""
    desired, current, misscheduled, ready, updated, avail = totals
    status: Obj = dict(ds.get("status") or {})
    status.update({
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "desiredNumberScheduled": desired,
        "numberReady": ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": avail,
        "numberUnavailable": desired - avail,
    })
    if observe:
        status["observedGeneration"] = ds["metadata"].get("generation", 0)
    for key in _OMIT_WHEN_ZERO:
        if not status.get(key):
            status.pop(key, None)
    return status


def _rolling_counts(ds: Mapping[str, Any], desired: int) -> tuple[int, int]:
    """`updatedDesiredNodeCounts`: (maxSurge, maxUnavailable) for `desired` nodes."""
    strategy = ds["spec"].get("updateStrategy") or {}
    if (strategy.get("type") or "RollingUpdate") != "RollingUpdate":
        return 0, 0
    rolling = strategy.get("rollingUpdate") or {}
    max_unavailable = P.scaled_value(rolling.get("maxUnavailable"), desired, round_up=True,
                                     default=1)
    max_surge = P.scaled_value(rolling.get("maxSurge"), desired, round_up=True, default=0)
    if desired > 0 and max_unavailable == 0 and max_surge == 0:
        max_unavailable = 1
    return max_surge, max_unavailable


def _allows_surge(ds: Mapping[str, Any]) -> bool:
    """`util.AllowsSurge`: maxSurge scaled against one node is positive."""
    return _rolling_counts(ds, 1)[0] > 0


def _find_updated(
    pods: list[PodView], hash_: str, gen: int | None
) -> tuple[PodView | None, PodView | None, bool]:
    """`findUpdatedPodsOnNode`: (new, old, ok) among the node's non-deleting pods."""
    new = old = None
    for pod in pods:
        if pod.deleting:
            continue
        if pod.updated(hash_, gen):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


def rolling_node(pods: list[PodView] | None, hash_: str, gen: int | None,
                 available: Available) -> tuple[int, str | None, str | None]:
    """One node in the maxSurge == 0 rolling update: (unavailable 0/1, old pod to replace
    because it is unavailable, old available pod that may be deleted within the budget)."""
    new, old, ok = _find_updated(pods or [], hash_, gen)
    if not ok or (new is None) == (old is None):
        return 1, None, None
    if new is not None:
        return (0 if available(new) else 1), None, None
    assert old is not None
    if not available(old):
        return 1, old.name, None
    return 0, None, old.name


@dataclass
class Plan:
    """What one pass decided: pods to delete (names) and nodes that need a new pod."""

    delete: list[str] = field(default_factory=list)
    create: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.delete or self.create)


def manage_plan(
    ds: Mapping[str, Any], fits: Fits, node_pods: NodePods, hash_: str, available: Available,
) -> Plan:
    """`manage` / `podsShouldBeOnNode` (pods on nodes that no longer exist are the pod GC's)."""
    plan = Plan()
    surge = _allows_surge(ds)
    for node, (should_run, should_continue) in fits.items():
        manage_node(plan, node, should_run, should_continue, node_pods.get(node), hash_,
                    available, surge)
    return plan


def manage_node(plan: Plan, node: str, should_run: bool, should_continue: bool,
                pods: list[PodView] | None, hash_: str, available: Available,
                surge: bool) -> None:
    """`podsShouldBeOnNode` for one node: appends its creates and deletes to `plan`."""
    if not pods:
        if should_run:
            plan.create.append(node)
        return
    if not should_continue:
        plan.delete.extend(p.name for p in pods if not p.deleting)
        return
    running = []
    for pod in pods:
        if pod.deleting:
            continue
        if pod.terminal:
            plan.delete.append(pod.name)
        else:
            running.append(pod)
    if not surge:
        plan.delete.extend(p.name for p in running[1:])
        return
    if len(running) <= 1:
        if not running and should_run:
            plan.create.append(node)
        return
    oldest_new = oldest_old = None
    for pod in running:
        if pod.hash == hash_:
            if oldest_new is None:
                oldest_new = pod
                continue
        elif oldest_old is None:
            oldest_old = pod
            continue
        plan.delete.append(pod.name)
    if oldest_new is not None and oldest_old is not None and (
        not oldest_old.ready or available(oldest_new)
    ):
        plan.delete.append(oldest_old.name)


def rolling_update_plan(
    ds: Mapping[str, Any], fits: Fits, node_pods: NodePods, hash_: str, available: Available,
) -> Plan:
    """`rollingUpdate` (update.go), both the maxSurge == 0 and the surge branch. Nodes are
    visited in name order (upstream: Go map order), so the roll order is reproducible."""
    gen = template_generation(ds)
    desired = sum(1 for run, _ in fits.values() if run)
    nodes = sorted({n for n, (run, _) in fits.items() if run} | set(node_pods))
    max_surge, max_unavailable = _rolling_counts(ds, desired)
    plan = Plan()
    if max_surge == 0:
        unavailable = 0
        replace: list[str] = []
        candidates: list[str] = []
        for node in nodes:
            unavail, replace_pod, candidate = rolling_node(node_pods.get(node), hash_, gen,
                                                           available)
            unavailable += unavail
            if replace_pod is not None:
                replace.append(replace_pod)
            elif candidate is not None and unavailable < max_unavailable:
                candidates.append(candidate)
        remaining = min(max(max_unavailable - unavailable, 0), len(candidates))
        plan.delete = replace + candidates[:remaining]
        return plan
    surge = available_count = 0
    allowed: list[str] = []
    candidate_nodes: list[str] = []
    should_not_run: list[str] = []
    for node in nodes:
        new, old, ok = _find_updated(node_pods.get(node) or [], hash_, gen)
        if not ok:
            surge += 1
            continue
        if old is not None:
            available_count += available(old)
        elif new is not None:
            available_count += available(new)
        runs = fits.get(node, (False, False))[0]
        if old is None:
            continue
        if new is None:
            if not available(old):
                if not runs:
                    plan.delete.append(old.name)
                else:
                    allowed.append(node)
            elif not runs:
                should_not_run.append(old.name)
            elif surge < max_surge:
                candidate_nodes.append(node)
        elif not available(new):
            surge += 1
        else:
            plan.delete.append(old.name)
    deletable = min(max(available_count - desired, 0), len(should_not_run))
    plan.delete.extend(should_not_run[:deletable])
    remaining = min(max(max_surge - surge, 0), len(candidate_nodes))
    plan.create = allowed + candidate_nodes[:remaining]
    return plan
