"""Pure pieces of the endpoints controller: the Endpoints object around the subsets
(`endpointsubsets`), after kubernetes/pkg/controller/endpoint/endpoints_controller.go
(`syncService`, `capacityAnnotationSetCorrectly`) and k8s.io/endpointslice/util
(`TriggerTimeTracker`). No store, no I/O.

- `endpoints_labels`: the Service's labels, `service.kubernetes.io/headless` added without a
  cluster IP (`IsServiceIPSet`), removed otherwise.
- `up_to_date`: syncService's "endpoints are equal, skipping update".
- `endpoints_object`: what syncService writes (the current object, or a new one named after
  the Service, with subsets, labels and the over-capacity and trigger-time annotations).
- `TriggerTimes`: `TriggerTimeTracker.ComputeEndpointLastChangeTriggerTime`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from dcgm_sim.controllers import endpointslices as E
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.endpointsubsets import service_ip_set

Obj = dict[str, Any]
SvcKey = tuple[str, str]

OVER_CAPACITY_ANNOTATION = "endpoints.kubernetes.io/over-capacity"
TRUNCATED = "truncated"
TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"
HEADLESS_LABEL = E.HEADLESS_LABEL


def endpoints_labels(svc: Mapping[str, Any]) -> dict[str, str]:
    """The Service's labels, plus `service.kubernetes.io/headless` when it has no cluster IP."""
    labels = P.labels_of(svc)
    if service_ip_set(svc):
        labels.pop(HEADLESS_LABEL, None)
    else:
        labels[HEADLESS_LABEL] = ""
    return labels


def _plain(subsets: Any) -> list[Obj]:
    """Subsets without empty fields (nil and empty compare equal, as `Semantic.DeepEqual`)."""
    return [{k: v for k, v in s.items() if v} for s in subsets or []]


def up_to_date(current: Mapping[str, Any] | None, svc: Mapping[str, Any],
               subsets: list[Obj], truncated: bool) -> bool:
    """syncService's "endpoints are equal, skipping update": same subsets (before truncation:
    truncated ones never are), same labels but the headless one, and no over-capacity
    annotation (`capacityAnnotationSetCorrectly`)."""
    if current is None or truncated:
        return False
    meta = current.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != HEADLESS_LABEL}
    return (_plain(current.get("subsets")) == subsets and labels == P.labels_of(svc)
            and OVER_CAPACITY_ANNOTATION not in (meta.get("annotations") or {}))


def endpoints_object(svc: Mapping[str, Any], current: Mapping[str, Any] | None,
                     subsets: list[Obj], truncated: bool, trigger: str | None) -> Obj:
    """The Endpoints syncService writes: the current object (a new one named after the
    Service) with the subsets, the Service's labels and the two annotations set or cleared.
    Subsets equal to the current ones are kept as they are (the stored list is shared)."""
    meta = svc["metadata"]
    if current is None:
        obj: Obj = {"apiVersion": "v1", "kind": "Endpoints",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
    else:
        obj = dict(current)
        obj["metadata"] = dict(current["metadata"])
        if current.get("subsets") == subsets:
            subsets = current["subsets"]
    new_meta = obj["metadata"]
    annotations = dict(new_meta.get("annotations") or {})
    for name, value in ((TRIGGER_TIME_ANNOTATION, trigger),
                        (OVER_CAPACITY_ANNOTATION, TRUNCATED if truncated else None)):
        if value is None:
            annotations.pop(name, None)
        else:
            annotations[name] = value
    for field, mapping in (("annotations", annotations), ("labels", endpoints_labels(svc))):
        if mapping:
            new_meta[field] = mapping
        else:
            new_meta.pop(field, None)
    if subsets:
        obj["subsets"] = subsets
    else:
        obj.pop("subsets", None)
    return obj


def format_time(seconds: float) -> str:
    """`time.RFC3339Nano` in UTC (trailing zeros of the fraction dropped, as Go does)."""
    whole = math.floor(seconds)
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    fraction = f"{seconds - whole:.9f}"[2:].rstrip("0")
    return f"{text}.{fraction}Z" if fraction else f"{text}Z"


def pod_trigger_time(pod: Mapping[str, Any]) -> float | None:
    """`getPodTriggerTime`: when the pod's Ready condition last changed."""
    ready = P.condition(pod, "Ready")
    return P.parse_rfc3339(ready.get("lastTransitionTime")) if ready else None


class TriggerTimes:
    """`TriggerTimeTracker`, fed only the pods that may have changed since a Service's last
    sync (the others' trigger times cannot have moved, so the answer is upstream's)."""

    def __init__(self) -> None:
        self._states: dict[SvcKey, tuple[float | None, dict[str, float]]] = {}

    def compute(self, key: SvcKey, svc: Mapping[str, Any],
                pods: Iterable[tuple[str, Mapping[str, Any] | None]], *, full: bool) -> str | None:
        """`ComputeEndpointLastChangeTriggerTime`: the annotation's value, None to clear it.
        `pods`: every selected pod (`full`), or the pods that changed, None for one that left."""
        state = self._states.get(key)
        last_service, last = state if state is not None else (None, {})
        times = {} if full else dict(last)
        earliest: float | None = None
        for name, pod in pods:
            times.pop(name, None)
            at = pod_trigger_time(pod) if pod is not None else None
            if at is None:
                continue
            times[name] = at
            if at > last.get(name, -math.inf):
                earliest = at if earliest is None else min(earliest, at)
        created = P.parse_rfc3339(svc["metadata"].get("creationTimestamp"))
        if created is not None and (last_service is None or created > last_service):
            earliest = created if earliest is None else min(earliest, created)
        self._states[key] = (created, times)
        if state is None:  # a new Service: its creationTimestamp
            earliest = created
        return None if earliest is None else format_time(earliest)

    def forget(self, key: SvcKey) -> None:
        """`DeleteService`."""
        self._states.pop(key, None)
