"""The Job controller, after kubernetes/pkg/controller/job/job_controller.go (`syncJob`,
`manageJob`, `trackJobStatusAndRemoveFinalizers`, `flushUncountedAndRemoveFinalizers`,
`enactJobFinished`, the orphan pods' finalizer removal); the decisions are `joblogic`.

One sync of an unfinished Job: its pods (those it controls); the newly finished ones (a
Succeeded pod, a Failed one, and, unless `podReplacementPolicy` is `Failed`, one deleted
before it succeeded) go to `status.uncountedTerminatedPods`, lose the
`batch.kubernetes.io/job-tracking` finalizer, then move into `succeeded` / `failed`. More
failures than `backoffLimit` (or, with restartPolicy OnFailure, as many container restarts)
set `FailureTarget` (BackoffLimitExceeded) and delete the active pods; enough successes set
`SuccessCriteriaMet`; once no pod is uncounted or terminating these become `Failed` or
`Complete` (with `completionTime`), as Kubernetes 1.31+ writes them. Otherwise it keeps
`parallelism` pods active (never more than the completions still missing), `<job>-<5
characters>` from the template with the tracking finalizer; after a failure a replacement waits
for the pod failure backoff (10 s doubling, simulated time). Status: active, ready,
terminating, succeeded, failed, startTime, uncountedTerminatedPods, conditions.

A pod's end comes from its status (the kubelet, or a test writing it as a kubelet does);
the sim's kubelet leaves a deleted pod held by the finalizer Terminating, so with
`podReplacementPolicy: Failed` a pod whose containers stopped while deleted (deletion grace
0) counts as failed, where a real kubelet would have set Failed.

Left out: Indexed completion (`completionMode: Indexed`, per-index backoff), `podFailurePolicy`
rules (a pod's exit code or condition decides nothing here), `successPolicy`,
`activeDeadlineSeconds`, `ttlSecondsAfterFinished` (the TTL controller), `managedBy`, adopting
orphan pods, Events.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import joblogic as J
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import workloadpods as W
from dcgm_sim.controllers.base import Controller
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import JOB
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
MAX_CREATE_PER_SYNC = 500


def _job_ref(pod: Obj) -> dict[str, Any] | None:
    ref = P.controller_ref(pod)
    return ref if ref is not None and ref.get("kind") == "Job" else None


class JobController(Controller):
    """Runs every Job's pods to completion or to its backoff limit."""

    name = "job"
    resources = frozenset({JOB.key, kinds.POD.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._jobs: dict[Key, Obj] = {}
        self._uids: dict[str, Key] = {}
        self._pods: dict[str, dict[str, Obj]] = {}  # job uid -> pod name -> pod
        # job uid -> (failures since the last success, simulated time of the last failure)
        self._backoff: dict[str, tuple[int, float | None]] = {}

    def wants(self, event: Event) -> bool:
        return event.resource is not kinds.POD or _job_ref(event.object) is not None

    def prime(self) -> None:
        for job in self.store.list(JOB)[0]:
            self._note_job(job)
            self.schedule(_key(job), 0)
        for pod in self.store.list(kinds.POD)[0]:
            if _job_ref(pod) is not None:
                self._note_pod(pod, deleted=False)

    def _note_job(self, job: Obj) -> None:
        self._jobs[_key(job)] = job
        self._uids[job["metadata"]["uid"]] = _key(job)

    def _note_pod(self, pod: Obj, *, deleted: bool) -> str:
        owner = str((_job_ref(pod) or {}).get("uid"))
        pods = self._pods.setdefault(owner, {})
        if deleted:
            pods.pop(pod["metadata"]["name"], None)
        else:
            pods[pod["metadata"]["name"]] = pod
        return owner

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        dirty: set[Key] = {(str(k[0]), str(k[1])) for k in due if isinstance(k, tuple)}
        orphans: set[str] = set()
        for ev in events:
            obj = ev.object
            if ev.resource is JOB:
                key, uid = _key(obj), obj["metadata"]["uid"]
                if ev.type == "DELETED":
                    self._jobs.pop(key, None)
                    self._uids.pop(uid, None)
                    self._backoff.pop(uid, None)
                    orphans.add(uid)
                    continue
                if obj is self._jobs.get(key):
                    continue  # our own status write coming back
                self._note_job(obj)
                dirty.add(key)
            else:
                owner = self._note_pod(obj, deleted=ev.type == "DELETED")
                key_of = self._uids.get(owner)
                if key_of is not None:
                    dirty.add(key_of)
                elif ev.type != "DELETED":
                    orphans.add(owner)
        for uid in sorted(orphans):
            self._release(uid)
        for key in sorted(dirty):
            try:
                self.sync(key)
            except StoreError as err:
                log.info("job %s/%s: %s; retrying", key[0], key[1], err.message)
                self.schedule(key, 1.0)

    # ---- finalizers ------------------------------------------------------------------------

    def _remove_finalizer(self, pod: Obj) -> Obj | None:
        """`removeTrackingFinalizerPatch`; None when the pod is gone (or went with it)."""
        current = self.store.find(kinds.POD, pod["metadata"]["namespace"],
                                  pod["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != pod["metadata"]["uid"]:
            return None
        if not J.has_finalizer(current):
            return current
        body = clone(current)
        body["metadata"]["finalizers"] = [f for f in body["metadata"].get("finalizers") or []
                                          if f != J.TRACKING_FINALIZER]
        try:
            new = self.store.update(kinds.POD, body)
        except StoreError as err:
            if err.code != 404:
                raise
            return None
        gone = P.is_deleting(new) and not new["metadata"].get("finalizers") and (
            self.store.find(kinds.POD, new["metadata"]["namespace"], new["metadata"]["name"])
            is None)
        self._note_pod(new, deleted=gone)
        return None if gone else new

    def _release(self, job_uid: str) -> None:
        """The orphan pods' tracking finalizers (their Job is gone), as `syncOrphanPod`."""
        for pod in list(self._pods.get(job_uid, {}).values()):
            if J.has_finalizer(pod) and job_uid not in self._uids:
                self._remove_finalizer(pod)

    # ---- one sync --------------------------------------------------------------------------

    def sync(self, key: Key) -> None:
        job = self._jobs.get(key)
        if job is None:
            return
        uid = job["metadata"]["uid"]
        pods = list(self._pods.get(uid, {}).values())
        if J.is_finished(job):
            self._backoff.pop(uid, None)
            for pod in pods:
                if J.has_finalizer(pod):
                    self._remove_finalizer(pod)
            return
        now, stamp = self.clock.now(), P.now_rfc3339()
        status: Obj = clone(job.get("status") or {})
        uncounted = status.setdefault("uncountedTerminatedPods", {})
        unc_ok: list[str] = list(uncounted.get("succeeded") or [])
        unc_failed: list[str] = list(uncounted.get("failed") or [])

        def failed_pod(pod: Obj) -> bool:
            done = P.is_deleting(pod) and int(
                pod["metadata"].get("deletionGracePeriodSeconds") or 0) == 0
            return J.is_pod_failed(pod, job, done)

        active_pods = [p for p in pods if W.is_active(p)]
        ready = sum(1 for p in active_pods if P.is_pod_ready(p))
        terminating = sum(1 for p in pods if P.is_deleting(p) and not P.is_pod_terminal(p))
        tracked = [p for p in pods if J.has_finalizer(p)]
        new_ok = [p for p in tracked if (p.get("status") or {}).get("phase") == "Succeeded"
                  and p["metadata"]["uid"] not in unc_ok]
        new_failed = [p for p in tracked if failed_pod(p) and p["metadata"]["uid"]
                      not in unc_failed and p not in new_ok]
        succeeded = int(status.get("succeeded") or 0) + len(new_ok) + len(unc_ok)
        failed = int(status.get("failed") or 0) + len(new_failed) + len(unc_failed)
        spec = job["spec"]
        if not status.get("startTime") and not spec.get("suspend"):
            status["startTime"] = stamp
        failures, last = self._backoff.get(uid, (0, None))
        if new_ok:
            failures, last = 0, None
        if new_failed:
            failures, last = failures + len(new_failed), now

        finished = J.find_condition(job, J.SUCCESS_CRITERIA_MET)
        if finished is None:
            target = J.find_condition(job, J.FAILURE_TARGET)
            if target is not None:
                finished = target
            elif failed > int(spec.get("backoffLimit", 6)) or J.past_backoff_limit_on_failure(
                    job, pods):
                finished = J.new_condition(J.FAILURE_TARGET, J.BACKOFF_LIMIT_EXCEEDED,
                                           J.BACKOFF_MESSAGE, stamp)
        active = len(active_pods)
        if finished is not None:
            for pod in active_pods:
                if W.delete_pod(self.store, pod) is not None:
                    active -= 1
                    terminating += 1
                    ready -= 1 if P.is_pod_ready(pod) else 0
        else:
            active = self._manage(job, active_pods, succeeded, failures, last, now)
            if J.complete(job, succeeded, active):
                finished = J.new_condition(J.SUCCESS_CRITERIA_MET, J.COMPLETIONS_REACHED,
                                           J.COMPLETIONS_MESSAGE, stamp)
            if spec.get("suspend"):
                status["conditions"], _ = J.ensure_condition(
                    status.get("conditions") or [], J.SUSPENDED, "True", "JobSuspended",
                    "Job suspended", stamp)
        self._backoff[uid] = (failures, last)
        for field, value in (("active", active), ("ready", ready), ("terminating", terminating)):
            if field == "active" and not value:
                status.pop(field, None)
            else:
                status[field] = value

        # trackJobStatusAndRemoveFinalizers
        remove: list[Obj] = []
        for pod in tracked:
            pod_uid = pod["metadata"]["uid"]
            considered_failed = failed_pod(pod)
            ok = (pod.get("status") or {}).get("phase") == "Succeeded"
            if not (P.is_deleting(job) or finished is not None or ok or considered_failed):
                continue
            remove.append(pod)
            if ok and pod_uid not in unc_failed:
                if pod_uid not in unc_ok:
                    unc_ok.append(pod_uid)
            elif (considered_failed or (finished is not None and finished["type"]
                                        != J.SUCCESS_CRITERIA_MET)) and pod_uid not in unc_failed:
                unc_failed.append(pod_uid)
        conditions = list(status.get("conditions") or [])
        if finished is not None and finished["type"] in (J.FAILURE_TARGET,
                                                         J.SUCCESS_CRITERIA_MET):
            if not any(c.get("type") == finished["type"] for c in conditions):
                conditions.append(finished)
            final = J.FAILED if finished["type"] == J.FAILURE_TARGET else J.COMPLETE
            finished = J.new_condition(final, finished["reason"], finished["message"], stamp)
        if conditions:
            status["conditions"] = conditions
        _set_uncounted(status, unc_ok, unc_failed)
        self._write_status(job, status)  # the uncounted pods, before their finalizers go
        still: set[str] = set()
        for pod in remove:
            left = self._remove_finalizer(pod)
            if left is not None and J.has_finalizer(left):
                still.add(pod["metadata"]["uid"])
        with_finalizer = {p["metadata"]["uid"] for p in tracked} & still
        counted_ok = [u for u in unc_ok if u not in with_finalizer]
        counted_failed = [u for u in unc_failed if u not in with_finalizer]
        if counted_ok:
            status["succeeded"] = int(status.get("succeeded") or 0) + len(counted_ok)
        if counted_failed:
            status["failed"] = int(status.get("failed") or 0) + len(counted_failed)
        unc_ok = [u for u in unc_ok if u in with_finalizer]
        unc_failed = [u for u in unc_failed if u in with_finalizer]
        _set_uncounted(status, unc_ok, unc_failed)
        # enactJobFinished
        if finished is not None and not unc_ok and not unc_failed and terminating == 0:
            status["conditions"], _ = J.ensure_condition(
                status.get("conditions") or [], finished["type"], "True", finished["reason"],
                finished["message"], stamp)
            if finished["type"] == J.COMPLETE:
                status["completionTime"] = stamp
            log.info("job %s/%s: %s (%s)", key[0], key[1], finished["type"],
                     finished["reason"])
        self._write_status(self._jobs.get(key, job), status)

    def _manage(self, job: Obj, active_pods: list[Obj], succeeded: int, failures: int,
                last: float | None, now: float) -> int:
        """`manageJob`: delete surplus active pods or create the missing ones (after the
        failure backoff); returns the number of active pods."""
        active = len(active_pods)
        want = J.want_active(job, succeeded, active)
        if active > want:
            ranked = sorted(active_pods, key=lambda p: (
                1 if P.node_name(p) else 0, 1 if P.is_pod_ready(p) else 0,
                str(p["metadata"].get("creationTimestamp"))))
            for pod in ranked[:active - want]:
                if W.delete_pod(self.store, pod) is not None:
                    active -= 1
            return active
        terminating = 0
        if J.only_replace_failed(job):
            terminating = sum(1 for p in self._pods.get(job["metadata"]["uid"], {}).values()
                              if P.is_deleting(p) and not P.is_pod_terminal(p))
        diff = min(want - terminating - active, MAX_CREATE_PER_SYNC)
        if diff <= 0:
            return active
        wait = J.backoff_remaining(failures, last, now)
        if wait > 0:
            self.schedule(_key(job), wait)
            return active
        template = job["spec"].get("template") or {}
        for _ in range(diff):
            pod = W.create_pod(self.store, W.pod_from_template(
                job, template, extra_finalizers=(J.TRACKING_FINALIZER,)))
            self._note_pod(pod, deleted=False)
            active += 1
        return active

    def _write_status(self, job: Obj, status: Obj) -> None:
        if status == (job.get("status") or {}):
            return
        meta = job["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": clone(status)}
        try:
            self._note_job(self.store.update(JOB, body, subresource="status", adopt=True))
        except StoreError as err:
            if err.code != 404:
                raise


def _set_uncounted(status: Obj, ok: list[str], failed: list[str]) -> None:
    out: Obj = {}
    if ok:
        out["succeeded"] = list(ok)
    if failed:
        out["failed"] = list(failed)
    status["uncountedTerminatedPods"] = out


def _key(obj: Obj) -> Key:
    return (str(obj["metadata"]["namespace"]), str(obj["metadata"]["name"]))
