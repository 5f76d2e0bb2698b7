"""The deployment controller's decisions, as pure functions on raw Deployment and ReplicaSet
dicts (the I/O is `deployments.py`).

After kubernetes/pkg/controller/deployment: `util/deployment_util.go` (`ResolveFenceposts`,
`MaxUnavailable`, `MaxSurge`, `FindNewReplicaSet`, `EqualIgnoreHash`, `MaxRevision`,
`SetNewReplicaSetAnnotations`, `SetReplicasAnnotations`, `NewRSNewReplicas`, `IsSaturated`,
`FindActiveOrLatest`, `GetReplicaSetProportion`, `DeploymentComplete`,
`DeploymentProgressing`, `DeploymentTimedOut`, `SetDeploymentCondition`), `rolling.go`
(`reconcileNewReplicaSet`, `reconcileOldReplicaSets`, `cleanupUnhealthyReplicas`,
`scaleDownOldReplicaSetsForRollingUpdate`), `sync.go` (`getNewReplicaSet`'s new ReplicaSet,
`isScalingEvent`, `scale`, `cleanupDeployment`, `calculateStatus`) and `progress.go`
(`syncRolloutStatus`).

Left out: the revision-history annotation's length limit (always appended), `rollbackTo`,
the ReplicaFailure condition (no quota here), `terminatingReplicas` (a 1.33 alpha field).
`pod-template-hash` is the sim's `controller.ComputeHash` (fnv32a of the template's canonical
JSON, safe-encoded): the same shape as upstream's, not the same value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dcgm_sim.controllers import pods as P
from dcgm_sim.jsoncopy import clone

Obj = dict[str, Any]

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
_NOT_COPIED = frozenset({"kubectl.kubernetes.io/last-applied-configuration", REVISION,
                         REVISION_HISTORY, DESIRED_REPLICAS, MAX_REPLICAS,
                         "deprecated.deployment.rollback.to"})

# Condition reasons (deployment_util.go)
NEW_RS_CREATED = "NewReplicaSetCreated"
FOUND_NEW_RS = "FoundNewReplicaSet"
RS_UPDATED = "ReplicaSetUpdated"
NEW_RS_AVAILABLE = "NewReplicaSetAvailable"
TIMED_OUT = "ProgressDeadlineExceeded"
MIN_AVAILABLE = "MinimumReplicasAvailable"
MIN_UNAVAILABLE = "MinimumReplicasUnavailable"
NO_DEADLINE = 2147483647


# ---- accessors -------------------------------------------------------------------------------


def replicas(obj: Mapping[str, Any]) -> int:
    """`*spec.replicas` (defaulted to 1 by admission)."""
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def status_int(obj: Mapping[str, Any], field: str) -> int:
    return int((obj.get("status") or {}).get(field) or 0)


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def is_rolling(d: Mapping[str, Any]) -> bool:
    return ((d["spec"].get("strategy") or {}).get("type") or "RollingUpdate") == "RollingUpdate"


def has_progress_deadline(d: Mapping[str, Any]) -> bool:
    deadline = d["spec"].get("progressDeadlineSeconds")
    return deadline is not None and int(deadline) != NO_DEADLINE


def sum_replicas(rss: Iterable[Mapping[str, Any]]) -> int:
    """`GetReplicaCountForReplicaSets`."""
    return sum(replicas(rs) for rs in rss)


def sum_status(rss: Iterable[Mapping[str, Any]], field: str) -> int:
    """`GetActualReplicaCountForReplicaSets` and friends: a status counter summed."""
    return sum(status_int(rs, field) for rs in rss)


def active(rss: Iterable[Obj]) -> list[Obj]:
    """`FilterActiveReplicaSets`: those with replicas wanted."""
    return [rs for rs in rss if replicas(rs) > 0]


def by_creation(rss: Iterable[Obj]) -> list[Obj]:
    """`ReplicaSetsByCreationTimestamp`: oldest first, then by name."""
    return sorted(rss, key=lambda rs: (str(rs["metadata"].get("creationTimestamp") or ""),
                                       str(rs["metadata"]["name"])))


# ---- fenceposts ------------------------------------------------------------------------------


def fenceposts(d: Mapping[str, Any]) -> tuple[int, int]:
    """`ResolveFenceposts`: (maxSurge rounded up, maxUnavailable rounded down), never both 0."""
    rolling = (d["spec"].get("strategy") or {}).get("rollingUpdate") or {}
    desired = replicas(d)
    surge = P.scaled_value(rolling.get("maxSurge", 0), desired, round_up=True, default=0)
    unavailable = P.scaled_value(rolling.get("maxUnavailable", 0), desired, round_up=False,
                                 default=0)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable(d: Mapping[str, Any]) -> int:
    if not is_rolling(d) or replicas(d) == 0:
        return 0
    return min(fenceposts(d)[1], replicas(d))


def max_surge(d: Mapping[str, Any]) -> int:
    return fenceposts(d)[0] if is_rolling(d) else 0


# ---- the new ReplicaSet ----------------------------------------------------------------------


def without_hash(template: Mapping[str, Any]) -> Obj:
    out = clone(dict(template))
    labels = (out.get("metadata") or {}).get("labels")
    if labels:
        labels.pop(HASH_LABEL, None)
    return out


def equal_ignore_hash(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """`EqualIgnoreHash`: the templates but for the `pod-template-hash` label."""
    return P.canonical_json(without_hash(a)) == P.canonical_json(without_hash(b))


def find_new(d: Mapping[str, Any], rss: Sequence[Obj]) -> Obj | None:
    """`FindNewReplicaSet`: the oldest ReplicaSet whose template is the Deployment's."""
    template = d["spec"].get("template") or {}
    for rs in by_creation(rss):
        if equal_ignore_hash(rs["spec"].get("template") or {}, template):
            return rs
    return None


def revision(obj: Mapping[str, Any]) -> int:
    """`Revision`: the revision annotation (0 when absent or unparsable)."""
    try:
        return int(annotations_of(obj).get(REVISION, "0"))
    except ValueError:
        return 0


def template_hash(d: Mapping[str, Any]) -> str:
    collisions = int((d.get("status") or {}).get("collisionCount") or 0)
    return P.template_hash(d["spec"].get("template") or {}, collisions)


def new_replica_set(d: Mapping[str, Any], hash_: str) -> Obj:
    """`getNewReplicaSet`'s object: `<deployment>-<hash>`, the hash label on itself, its
    selector and its template, controlled by the Deployment; 0 replicas (the caller sizes it
    and sets its annotations)."""
    template = clone(dict(d["spec"].get("template") or {}))
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = dict(tmeta.get("labels") or {}, **{HASH_LABEL: hash_})
    selector = clone(dict(d["spec"].get("selector") or {}))
    selector["matchLabels"] = dict(selector.get("matchLabels") or {}, **{HASH_LABEL: hash_})
    meta = d["metadata"]
    spec: Obj = {"replicas": 0, "minReadySeconds": int(d["spec"].get("minReadySeconds") or 0),
                 "selector": selector, "template": template}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{meta['name']}-{hash_}", "namespace": meta["namespace"],
                         "labels": dict(tmeta["labels"]),
                         "ownerReferences": [P.owner_reference(d)]},
            "spec": spec}


def replicas_annotations(rs_annotations: dict[str, str], desired: int, maximum: int) -> bool:
    """`SetReplicasAnnotations` (in place); True when one changed."""
    changed = False
    for key, value in ((DESIRED_REPLICAS, str(desired)), (MAX_REPLICAS, str(maximum))):
        if rs_annotations.get(key) != value:
            rs_annotations[key] = value
            changed = True
    return changed


def new_rs_annotations(d: Mapping[str, Any], rs_annotations: dict[str, str], new_revision: int,
                       exists: bool) -> bool:
    """`SetNewReplicaSetAnnotations` (in place): the Deployment's annotations but the skipped
    ones, the revision raised to `new_revision` (the old one kept in the revision history),
    and on a new ReplicaSet the replicas annotations. True when one changed."""
    changed = False
    for key, value in annotations_of(d).items():
        if key in _NOT_COPIED or rs_annotations.get(key) == value:
            continue
        rs_annotations[key] = value
        changed = True
    old = rs_annotations.get(REVISION)
    try:
        old_int = int(old) if old else 0
    except ValueError:
        return changed
    if old_int < new_revision:
        rs_annotations[REVISION] = str(new_revision)
        changed = True
        if old:
            history = rs_annotations.get(REVISION_HISTORY)
            rs_annotations[REVISION_HISTORY] = f"{history},{old}" if history else old
    if not exists and replicas_annotations(rs_annotations, replicas(d),
                                           replicas(d) + max_surge(d)):
        changed = True
    return changed


def new_rs_new_replicas(d: Mapping[str, Any], all_rss: Sequence[Obj], new_rs: Obj) -> int:
    """`NewRSNewReplicas`: how far the new ReplicaSet may grow now."""
    current = replicas(new_rs)
    if not is_rolling(d):
        return replicas(d)
    total = sum_replicas(all_rss)
    ceiling = replicas(d) + P.scaled_value(
        ((d["spec"].get("strategy") or {}).get("rollingUpdate") or {}).get("maxSurge", 0),
        replicas(d), round_up=True, default=0)
    if total >= ceiling:
        return current
    return current + min(ceiling - total, replicas(d) - current)


# ---- rolling update: scaling old ReplicaSets down --------------------------------------------


def reconcile_old(d: Mapping[str, Any], old_rss: Sequence[Obj],
                  new_rs: Obj) -> dict[str, int]:
    """`reconcileOldReplicaSets`: the new sizes of the old ReplicaSets (name → replicas), the
    unhealthy replicas cleaned up first, then the available ones within maxUnavailable."""
    old_active = active(old_rss)
    if sum_replicas(old_active) == 0:
        return {}
    all_count = sum_replicas([*old_active, new_rs])
    min_available = replicas(d) - max_unavailable(d)
    new_unavailable = replicas(new_rs) - status_int(new_rs, "availableReplicas")
    max_scaled_down = all_count - min_available - new_unavailable
    if max_scaled_down <= 0:
        return {}
    sizes: dict[str, int] = {}
    # cleanupUnhealthyReplicas
    cleaned = 0
    for rs in by_creation(old_active):
        if cleaned >= max_scaled_down:
            break
        size, avail = replicas(rs), status_int(rs, "availableReplicas")
        if size == 0 or size == avail:
            continue
        down = min(max_scaled_down - cleaned, size - avail)
        sizes[rs["metadata"]["name"]] = size - down
        cleaned += down
    # scaleDownOldReplicaSetsForRollingUpdate (the cleaned sizes, the same availability)
    available = sum_status([*old_active, new_rs], "availableReplicas")
    if available <= min_available:
        return sizes
    budget = available - min_available
    done = 0
    for rs in by_creation(old_active):
        if done >= budget:
            break
        size = sizes.get(rs["metadata"]["name"], replicas(rs))
        if size == 0:
            continue
        down = min(size, budget - done)
        sizes[rs["metadata"]["name"]] = size - down
        done += down
    return sizes


# ---- scaling events (`sync`) -----------------------------------------------------------------


def is_scaling_event(d: Mapping[str, Any], rss: Sequence[Obj]) -> bool:
    """`isScalingEvent`: an active ReplicaSet's desired-replicas annotation is not the
    Deployment's replicas."""
    for rs in active(rss):
        desired = annotations_of(rs).get(DESIRED_REPLICAS)
        if desired is not None and desired.isdigit() and int(desired) != replicas(d):
            return True
    return False


def _is_saturated(d: Mapping[str, Any], rs: Obj | None) -> bool:
    if rs is None:
        return False
    desired = annotations_of(rs).get(DESIRED_REPLICAS, "")
    return (desired.isdigit() and int(desired) == replicas(d) == replicas(rs)
            == status_int(rs, "availableReplicas"))


def _proportion(rs: Obj, d: Mapping[str, Any], to_add: int, added: int) -> int:
    """`GetReplicaSetProportion` / `getReplicaSetFraction`."""
    if replicas(rs) == 0 or to_add == 0 or to_add == added:
        return 0
    if replicas(d) == 0:
        fraction = -replicas(rs)
    else:
        deployment_replicas = replicas(d) + max_surge(d)
        raw = annotations_of(rs).get(MAX_REPLICAS, "")
        annotated = int(raw) if raw.isdigit() else status_int(d, "replicas")
        fraction = (round(replicas(rs) * deployment_replicas / annotated) - replicas(rs)
                    if annotated else 0)
    allowed = to_add - added
    return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)


def scale(d: Mapping[str, Any], new_rs: Obj | None, old_rss: Sequence[Obj]) -> dict[str, int]:
    """`scale`: the new sizes (name → replicas) for a scaling event or a paused Deployment."""
    everyone = [rs for rs in [*old_rss, new_rs] if rs is not None]
    live = active(everyone)
    if len(live) <= 1:  # FindActiveOrLatest
        target = live[0] if live else (new_rs or (by_creation(old_rss)[-1] if old_rss else None))
        if target is None or replicas(target) == replicas(d):
            return {}
        return {target["metadata"]["name"]: replicas(d)}
    if _is_saturated(d, new_rs):
        return {rs["metadata"]["name"]: 0 for rs in active(old_rss)}
    if not is_rolling(d):
        return {}
    allowed = replicas(d) + max_surge(d) if replicas(d) > 0 else 0
    to_add = allowed - sum_replicas(live)
    newest_first = sorted(live, key=lambda rs: str(rs["metadata"].get("creationTimestamp")),
                          reverse=to_add > 0)
    ordered = sorted(newest_first, key=replicas, reverse=True)  # by size, stable on age
    sizes: dict[str, int] = {}
    added = 0
    for rs in ordered:
        share = _proportion(rs, d, to_add, added) if to_add else 0
        sizes[rs["metadata"]["name"]] = replicas(rs) + share
        added += share
    if to_add and ordered:
        first = ordered[0]["metadata"]["name"]
        sizes[first] = max(0, sizes[first] + to_add - added)
    return sizes


def cleanup_victims(d: Mapping[str, Any], old_rss: Sequence[Obj]) -> list[str]:
    """`cleanupDeployment`: old ReplicaSets beyond `revisionHistoryLimit`, oldest first, that
    have no pods left and are not already being deleted."""
    limit = d["spec"].get("revisionHistoryLimit")
    if limit is None or int(limit) == NO_DEADLINE:
        return []
    candidates = [rs for rs in old_rss if not P.is_deleting(rs)]
    excess = len(candidates) - int(limit)
    out: list[str] = []
    for rs in by_creation(candidates):
        if excess <= 0:
            break
        if status_int(rs, "replicas") != 0 or replicas(rs) != 0 or status_int(
                rs, "observedGeneration") < int(rs["metadata"].get("generation") or 0):
            continue
        out.append(rs["metadata"]["name"])
        excess -= 1
    return out


# ---- status ----------------------------------------------------------------------------------


def condition(status: Mapping[str, Any], ctype: str) -> Obj | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def new_condition(ctype: str, status: str, reason: str, message: str, now: str) -> Obj:
    return {"type": ctype, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


def set_condition(status: Obj, cond: Obj) -> None:
    """`SetDeploymentCondition` (in place): same status and reason keeps the old one; same
    status keeps its lastTransitionTime; the new one goes last."""
    current = condition(status, cond["type"])
    if current is not None and current.get("status") == cond["status"] and current.get(
            "reason") == cond["reason"]:
        return
    if current is not None and current.get("status") == cond["status"]:
        cond = dict(cond, lastTransitionTime=current.get("lastTransitionTime"))
    status["conditions"] = [c for c in status.get("conditions") or []
                            if c.get("type") != cond["type"]] + [cond]


def remove_condition(status: Obj, ctype: str) -> None:
    status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != ctype]
    if not status["conditions"]:
        del status["conditions"]


def calculate_status(all_rss: Sequence[Obj], new_rs: Obj | None, d: Mapping[str, Any],
                     now: str) -> Obj:
    """`calculateStatus`: the counters summed over the ReplicaSets, and Available."""
    available = sum_status(all_rss, "availableReplicas")
    unavailable = max(0, sum_replicas(all_rss) - available)
    old = d.get("status") or {}
    status: Obj = {"observedGeneration": int(d["metadata"].get("generation") or 0)}
    for field, value in (("replicas", sum_status(all_rss, "replicas")),
                         ("updatedReplicas", status_int(new_rs, "replicas") if new_rs else 0),
                         ("readyReplicas", sum_status(all_rss, "readyReplicas")),
                         ("availableReplicas", available),
                         ("unavailableReplicas", unavailable)):
        if value:
            status[field] = value  # omitempty
    if old.get("collisionCount") is not None:
        status["collisionCount"] = old["collisionCount"]
    if old.get("conditions"):
        status["conditions"] = [dict(c) for c in old["conditions"]]
    if available >= replicas(d) - max_unavailable(d):
        set_condition(status, new_condition("Available", "True", MIN_AVAILABLE,
                                            "Deployment has minimum availability.", now))
    else:
        set_condition(status, new_condition("Available", "False", MIN_UNAVAILABLE,
                                            "Deployment does not have minimum availability.",
                                            now))
    return status


def complete(d: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """`DeploymentComplete`."""
    want = replicas(d)
    return (int(status.get("updatedReplicas") or 0) == want
            and int(status.get("replicas") or 0) == want
            and int(status.get("availableReplicas") or 0) == want
            and int(status.get("observedGeneration") or 0)
            >= int(d["metadata"].get("generation") or 0))


def progressing(d: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """`DeploymentProgressing`: more updated, ready or available pods, or fewer old ones."""
    old = d.get("status") or {}

    def get(s: Mapping[str, Any], field: str) -> int:
        return int(s.get(field) or 0)

    return (get(status, "updatedReplicas") > get(old, "updatedReplicas")
            or get(status, "replicas") - get(status, "updatedReplicas")
            < get(old, "replicas") - get(old, "updatedReplicas")
            or get(status, "readyReplicas") > get(old, "readyReplicas")
            or get(status, "availableReplicas") > get(old, "availableReplicas"))


def rollout_status(all_rss: Sequence[Obj], new_rs: Obj | None, d: Mapping[str, Any], now: str,
                   since_progress: float) -> Obj:
    """`syncRolloutStatus`: `calculateStatus` plus the Progressing condition
    (NewReplicaSetAvailable, ReplicaSetUpdated, or ProgressDeadlineExceeded after
    `progressDeadlineSeconds` without progress: `since_progress` simulated seconds)."""
    status = calculate_status(all_rss, new_rs, d, now)
    if not has_progress_deadline(d):
        if "conditions" in status:
            remove_condition(status, "Progressing")
        return status
    current = condition(d.get("status") or {}, "Progressing")
    done = (int(status.get("replicas") or 0) == int(status.get("updatedReplicas") or 0)
            and current is not None and current.get("reason") == NEW_RS_AVAILABLE)
    if done:
        return status
    subject = f'ReplicaSet "{new_rs["metadata"]["name"]}"' if new_rs else (
        f'Deployment "{d["metadata"]["name"]}"')
    if complete(d, status):
        set_condition(status, new_condition("Progressing", "True", NEW_RS_AVAILABLE,
                                            f"{subject} has successfully progressed.", now))
    elif progressing(d, status):
        cond = new_condition("Progressing", "True", RS_UPDATED, f"{subject} is progressing.",
                             now)
        if current is not None:
            if current.get("status") == "True":
                cond["lastTransitionTime"] = current.get("lastTransitionTime")
            remove_condition(status, "Progressing")
            status.setdefault("conditions", [])
        status["conditions"] = [*(status.get("conditions") or []), cond]
    else:
        now_cond = condition(status, "Progressing")
        timed_out = now_cond is not None and now_cond.get("reason") != NEW_RS_AVAILABLE and (
            now_cond.get("reason") == TIMED_OUT
            or since_progress > int(d["spec"]["progressDeadlineSeconds"]))
        if timed_out:
            set_condition(status, new_condition("Progressing", "False", TIMED_OUT,
                                                f"{subject} has timed out progressing.", now))
    return status
