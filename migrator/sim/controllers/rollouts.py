"""Pure DaemonSet logic, after kubernetes/pkg/controller/daemon: the pod a DaemonSet creates,
its ControllerRevision, the status counters, and the `manage` / `rollingUpdate` decisions.

No store, no clock: availability comes in as a function, so the controller (simulated time,
minReadySeconds) and the seed (everything Ready) share the exact same code.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.model import kinds
from migrator.sim import admission
from migrator.sim.controllers import pods as P
from migrator.sim.controllers.scheduling import daemon_tolerations, pin_to_node

Obj = dict[str, Any]

HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
# Status fields the API omits when zero (`omitempty` in apps/v1 DaemonSetStatus).
_OMIT_WHEN_ZERO = ("observedGeneration", "updatedNumberScheduled", "numberAvailable",
                   "numberUnavailable")


def template_generation(ds: Mapping[str, Any]) -> int | None:
    """`util.GetTemplateGeneration`; the sim falls back to `metadata.generation` when the
    server did not set the deprecated annotation."""
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


def is_pod_updated(pod: Mapping[str, Any], hash_: str, generation: int | None) -> bool:
    """`util.IsPodUpdated`: the pod carries the current hash or template generation."""
    labels = pod.get("metadata", {}).get("labels") or {}
    by_gen = generation is not None and labels.get(GENERATION_LABEL) == str(generation)
    return (bool(hash_) and labels.get(HASH_LABEL) == hash_) or by_gen


def new_pod(ds: Mapping[str, Any], node: str, hash_: str, name: str) -> Obj:
    """The pod `syncNodes` creates for `node`, as the API server stores it (defaulted by
    `admission.admit`). The sim's scheduler binds at once: `spec.nodeName` is set next to the
    node-name affinity, with the PodScheduled condition."""
    template = copy.deepcopy(ds["spec"]["template"])
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


def revision_patch(ds: Mapping[str, Any]) -> Obj:
    """`getPatch`: the ControllerRevision data that restores this template."""
    template = copy.deepcopy(ds["spec"]["template"])
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


def group_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """`getNodesToDaemonPods(includeDeletedTerminal=false)`, oldest pod first per node."""
    out: dict[str, list[Obj]] = {}
    for pod in pods:
        if P.is_pod_terminal(pod) and P.is_deleting(pod):
            continue
        out.setdefault(P.node_name(pod), []).append(pod)
    for group in out.values():
        group.sort(key=P.creation_sort_key)
    return out


Available = Callable[[Obj], bool]


def compute_status(
    ds: Mapping[str, Any],
    fits: Mapping[str, tuple[bool, bool]],
    node_pods: Mapping[str, list[Obj]],
    hash_: str,
    available: Available,
    *,
    observe: bool = True,
) -> Obj:
    """`updateDaemonSetStatus`: the counters, from the oldest pod on each node."""
    generation = template_generation(ds)
    desired = current = misscheduled = ready = updated = avail = 0
    for node, (should_run, _) in fits.items():
        pods = node_pods.get(node) or []
        if should_run:
            desired += 1
            if not pods:
                continue
            current += 1
            oldest = pods[0]
            if P.is_pod_ready(oldest):
                ready += 1
                if available(oldest):
                    avail += 1
            if is_pod_updated(oldest, hash_, generation):
                updated += 1
        elif pods:
            misscheduled += 1
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


def _find_updated(
    pods: list[Obj], hash_: str, gen: int | None
) -> tuple[Obj | None, Obj | None, bool]:
    """`findUpdatedPodsOnNode`: (new, old, ok) among the node's non-deleting pods."""
    new = old = None
    for pod in pods:
        if P.is_deleting(pod):
            continue
        if is_pod_updated(pod, hash_, gen):
            if new is not None:
                return None, None, False
            new = pod
        else:
            if old is not None:
                return None, None, False
            old = pod
    return new, old, True


@dataclass
class Plan:
    """What one pass decided: pods to delete (names) and nodes that need a new pod."""

    delete: list[str] = field(default_factory=list)
    create: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.delete or self.create)


def manage_plan(
    ds: Mapping[str, Any], fits: Mapping[str, tuple[bool, bool]],
    node_pods: Mapping[str, list[Obj]], hash_: str, available: Available,
) -> Plan:
    """`manage` / `podsShouldBeOnNode`."""
    plan = Plan()
    surge = _allows_surge(ds)
    for node, (should_run, should_continue) in fits.items():
        pods = node_pods.get(node)
        if should_run and not pods:
            plan.create.append(node)
            continue
        if not pods:
            continue
        if should_continue:
            running = []
            for pod in pods:
                if P.is_deleting(pod):
                    continue
                if P.is_pod_terminal(pod):
                    plan.delete.append(pod["metadata"]["name"])
                else:
                    running.append(pod)
            if not surge:
                plan.delete.extend(p["metadata"]["name"] for p in running[1:])
                continue
            if len(running) <= 1:
                if not running and should_run:
                    plan.create.append(node)
                continue
            oldest_new = oldest_old = None
            for pod in running:
                if pod["metadata"].get("labels", {}).get(HASH_LABEL) == hash_:
                    if oldest_new is None:
                        oldest_new = pod
                        continue
                elif oldest_old is None:
                    oldest_old = pod
                    continue
                plan.delete.append(pod["metadata"]["name"])
            if oldest_new is not None and oldest_old is not None and (
                not P.is_pod_ready(oldest_old) or available(oldest_new)
            ):
                plan.delete.append(oldest_old["metadata"]["name"])
        else:
            plan.delete.extend(p["metadata"]["name"] for p in pods if not P.is_deleting(p))
    return plan


def _allows_surge(ds: Mapping[str, Any]) -> bool:
    """`util.AllowsSurge`: maxSurge scaled against one node is positive."""
    return _rolling_counts(ds, 1)[0] > 0


def rolling_update_plan(
    ds: Mapping[str, Any], fits: Mapping[str, tuple[bool, bool]],
    node_pods: Mapping[str, list[Obj]], hash_: str, available: Available,
) -> Plan:
    """`rollingUpdate` (update.go), both the maxSurge == 0 and the surge branch."""
    gen = template_generation(ds)
    nodes: dict[str, list[Obj]] = {n: list(p) for n, p in node_pods.items()}
    desired = 0
    for node, (should_run, _) in fits.items():
        if should_run:
            desired += 1
            nodes.setdefault(node, [])
    max_surge, max_unavailable = _rolling_counts(ds, desired)
    plan = Plan()
    if max_surge == 0:
        unavailable = 0
        replace: list[str] = []
        candidates: list[str] = []
        for node in sorted(nodes):
            new, old, ok = _find_updated(nodes[node], hash_, gen)
            if not ok or (new is None) == (old is None):
                unavailable += 1
            elif new is not None:
                if not available(new):
                    unavailable += 1
            elif old is not None:
                if not available(old):
                    replace.append(old["metadata"]["name"])
                    unavailable += 1
                elif unavailable < max_unavailable:
                    candidates.append(old["metadata"]["name"])
        remaining = min(max(max_unavailable - unavailable, 0), len(candidates))
        plan.delete = replace + candidates[:remaining]
        return plan
    surge = available_count = 0
    allowed: list[str] = []
    candidate_nodes: list[str] = []
    should_not_run: list[str] = []
    for node in sorted(nodes):
        new, old, ok = _find_updated(nodes[node], hash_, gen)
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
                    plan.delete.append(old["metadata"]["name"])
                else:
                    allowed.append(node)
            elif not runs:
                should_not_run.append(old["metadata"]["name"])
            elif surge < max_surge:
                candidate_nodes.append(node)
        elif not available(new):
            surge += 1
        else:
            plan.delete.append(old["metadata"]["name"])
    deletable = min(max(available_count - desired, 0), len(should_not_run))
    plan.delete.extend(should_not_run[:deletable])
    remaining = min(max(max_surge - surge, 0), len(candidate_nodes))
    plan.create = allowed + candidate_nodes[:remaining]
    return plan
