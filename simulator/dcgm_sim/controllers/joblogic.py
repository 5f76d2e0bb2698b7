"""The Job controller's decisions, pure (the I/O is `jobs.py`).

After kubernetes/pkg/controller/job/job_controller.go: `isPodFailed` and
`onlyReplaceFailedPods` (a terminating pod counts as failed unless `podReplacementPolicy` is
`Failed`), `manageJob`'s wanted number of active pods, `pastBackoffLimitOnFailure`,
`newCondition` / `ensureJobConditionStatus`, and the pod failure backoff of
`backoff_utils.go` (`getRemainingTimeForFailuresCount`: 10 s doubling per failure since the
last success, capped at `MaxJobPodFailureBackOff`, 10 minutes in the controller's code; the
documentation's "six minutes" is an older cap). Times are simulated seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dcgm_sim.controllers import pods as P

Obj = dict[str, Any]

TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 600.0

SUCCESS_CRITERIA_MET = "SuccessCriteriaMet"
COMPLETE = "Complete"
FAILURE_TARGET = "FailureTarget"
FAILED = "Failed"
SUSPENDED = "Suspended"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
BACKOFF_MESSAGE = "Job has reached the specified backoff limit"
COMPLETIONS_REACHED = "CompletionsReached"
COMPLETIONS_MESSAGE = "Reached expected number of succeeded pods"


def only_replace_failed(job: Mapping[str, Any]) -> bool:
    """`onlyReplaceFailedPods`: `podReplacementPolicy: Failed` (the default with a
    `podFailurePolicy`)."""
    spec = job.get("spec") or {}
    return spec.get("podReplacementPolicy") == "Failed" or bool(spec.get("podFailurePolicy"))


def is_pod_failed(pod: Mapping[str, Any], job: Mapping[str, Any],
                  finished_terminating: bool) -> bool:
    """`isPodFailed`: Failed, or (unless only failed pods are replaced) being deleted before
    it succeeded. `finished_terminating`: its containers stopped while it was deleted (the
    sim's kubelet leaves such a pod Terminating, held by the tracking finalizer, where a real
    kubelet would have set Failed)."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        return True
    if phase == "Succeeded" or not P.is_deleting(pod):
        return False
    return finished_terminating or not only_replace_failed(job)


def has_finalizer(pod: Mapping[str, Any]) -> bool:
    return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])


def find_condition(job: Mapping[str, Any], ctype: str) -> Obj | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return dict(cond)
    return None


def is_finished(job: Mapping[str, Any]) -> bool:
    """`IsJobFinished`: Complete or Failed is True."""
    return find_condition(job, COMPLETE) is not None or find_condition(job, FAILED) is not None


def new_condition(ctype: str, reason: str, message: str, now: str,
                  status: str = "True") -> Obj:
    return {"type": ctype, "status": status, "lastProbeTime": now, "lastTransitionTime": now,
            "reason": reason, "message": message}


def ensure_condition(conditions: Sequence[Obj], ctype: str, status: str, reason: str,
                     message: str, now: str) -> tuple[list[Obj], bool]:
    """`ensureJobConditionStatus`: update the condition of that type, or add it unless it
    would be False."""
    out = [dict(c) for c in conditions]
    for cond in out:
        if cond.get("type") != ctype:
            continue
        if (cond.get("status"), cond.get("reason"), cond.get("message")) == (
                status, reason, message):
            return out, False
        if cond.get("status") != status:
            cond["lastTransitionTime"] = now
        cond.update(status=status, reason=reason, message=message, lastProbeTime=now)
        return out, True
    if status != "False":
        return [*out, new_condition(ctype, reason, message, now, status)], True
    return out, False


def want_active(job: Mapping[str, Any], succeeded: int, active: int) -> int:
    """`manageJob`: parallelism, never more than the completions still missing (no
    completions: parallelism until the first success, then whatever runs)."""
    spec = job.get("spec") or {}
    if spec.get("suspend"):
        return 0
    raw = spec.get("parallelism")
    parallelism = 1 if raw is None else int(raw)
    completions = spec.get("completions")
    if completions is None:
        return active if succeeded > 0 else parallelism
    return max(0, min(int(completions) - succeeded, parallelism))


def complete(job: Mapping[str, Any], succeeded: int, active: int) -> bool:
    completions = (job.get("spec") or {}).get("completions")
    if completions is None:
        return succeeded > 0 and active == 0
    return succeeded >= int(completions) and active == 0


def past_backoff_limit_on_failure(job: Mapping[str, Any], pods: Sequence[Obj]) -> bool:
    """`pastBackoffLimitOnFailure`: restartPolicy OnFailure counts container restarts of the
    Pending and Running pods against backoffLimit."""
    spec = job.get("spec") or {}
    if ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") in ("Pending", "Running"):
            restarts += sum(int(c.get("restartCount") or 0) for key in (
                "initContainerStatuses", "containerStatuses") for c in status.get(key) or [])
    raw = spec.get("backoffLimit")
    limit = 6 if raw is None else int(raw)
    return restarts > 0 if limit == 0 else restarts >= limit


def backoff_remaining(failures: int, last_failure: float | None, now: float) -> float:
    """`getRemainingTimeForFailuresCount`: 10 s doubling per failure since the last success,
    capped, counted from the last failure."""
    if failures <= 0 or last_failure is None:
        return 0.0
    delay = DEFAULT_BACKOFF
    for _ in range(1, failures):
        delay *= 2
        if delay >= MAX_BACKOFF:
            delay = MAX_BACKOFF
            break
    elapsed = now - last_failure
    return 0.0 if delay < elapsed else delay - elapsed
