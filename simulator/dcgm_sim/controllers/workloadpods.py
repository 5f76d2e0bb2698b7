"""What the ReplicaSet and Job controllers share about the pods they make: the pod a template
gives, which pods are active, how one is deleted, when a Ready pod is available. Pure but for
`delete_pod`, which writes the store as `PodControl.DeletePod` writes the API.

Upstream: `controller.GetPodFromTemplate` and `FilterActivePods` (pkg/controller/
controller_utils.go), `podutil.IsPodAvailable` (pkg/api/v1/pod/util.go); the API server's
graceful deletion of a pod (`writes._pod_grace`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dcgm_sim import admission, kinds, openshift
from dcgm_sim.controllers import pods as P
from dcgm_sim.jsoncopy import clone
from dcgm_sim.statuses import ApiError
from dcgm_sim.store import Store, StoreError

Obj = dict[str, Any]
DEFAULT_GRACE_SECONDS = 30


def pod_from_template(owner: Mapping[str, Any], template: Mapping[str, Any],
                      extra_finalizers: tuple[str, ...] = ()) -> Obj:
    """`GetPodFromTemplate`: the template's labels, annotations, finalizers and spec, the
    owner's controller reference, `generateName` `<owner>-` and a name with the 5-character
    suffix the API server would generate (the caller retries a clash)."""
    tmeta = template.get("metadata") or {}
    prefix = f"{owner['metadata']['name']}-"
    meta: Obj = {
        "generateName": prefix,
        "name": prefix + P.random_suffix(),
        "namespace": owner["metadata"]["namespace"],
        "labels": dict(tmeta.get("labels") or {}),
        "ownerReferences": [P.owner_reference(owner)],
    }
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    finalizers = list(tmeta.get("finalizers") or [])
    finalizers += [f for f in extra_finalizers if f not in finalizers]
    if finalizers:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": clone(dict(template.get("spec") or {}))}


def is_active(pod: Mapping[str, Any]) -> bool:
    """`FilterActivePods`: not Succeeded or Failed, not being deleted."""
    return not P.is_pod_terminal(pod) and not P.is_deleting(pod)


def available(ready_since: float | None, min_ready_seconds: int, now: float) -> bool:
    """`IsPodAvailable` in simulated time: Ready for at least `minReadySeconds`
    (`ready_since` None: not Ready)."""
    if ready_since is None:
        return False
    return min_ready_seconds <= 0 or now - ready_since >= min_ready_seconds


def delete_pod(store: Store, pod: Mapping[str, Any]) -> Obj | None:
    """DELETE a pod as a controller does (default grace): marked for the kubelet when it ran
    on a node, removed (or left to its finalizers) at once when it never ran or finished. None
    when it was already gone."""
    meta = pod["metadata"]
    ns, name = str(meta["namespace"]), str(meta["name"])
    grace = 0
    if P.node_name(pod) and not P.is_pod_terminal(pod):
        raw = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = DEFAULT_GRACE_SECONDS if raw is None else max(0, int(raw))
    try:
        if grace > 0:
            return store.mark_deleting(kinds.POD, ns, name, grace)
        return store.delete(kinds.POD, ns, name)
    except StoreError as err:
        if err.code != 404:
            raise
        return None


def create_pod(store: Store, pod: Obj) -> Obj:
    """Create `pod` through the pod admission (defaults, Pending status), with a new name
    suffix on a clash (`RetryGenerateName`)."""
    pod = admission.admit(kinds.POD, pod)
    if openshift.enabled(store):  # SCC admission: refused pods are retried as any failure
        try:
            pod = openshift.admit_pod(store, pod)
        except ApiError as err:
            raise StoreError(err.code, err.reason, err.message) from err
    for attempt in range(5):
        try:
            return store.create(kinds.POD, pod)
        except StoreError as err:
            if err.reason != "AlreadyExists" or attempt == 4:
                raise
            pod["metadata"]["name"] = pod["metadata"]["generateName"] + P.random_suffix()
    raise AssertionError("unreachable")
