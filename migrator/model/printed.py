"""Pods read as their printed Table rows, and when such a row may be believed. Pure.

A pod's whole JSON is about 4 kB here (more with managedFields on a real cluster); its Table
row with the pod's metadata (`Accept: ...;as=Table;g=meta.k8s.io`, `includeObject=Metadata`,
what `kubectl get pods` reads) is about a sixth of it, and a gate needs only the name, uid,
labels, owner, node and readiness. The row carries all of them but one: printPod
(`pkg/printers/internalversion/printers.go`) shows how many containers are ready, not the
pod's Ready condition. The two differ when

- the node lifecycle controller marked the pods of a node that stopped reporting not Ready
  (`MarkPodsNotReady`) while their containers still show ready: exactly what the
  nodes-reporting gate looks for;
- a readiness gate is not yet True (the row's READINESS GATES cell counts them);
- the kubelet has not yet written the condition (it writes both in one status update).

So a printed pod is believed only when it is **plainly healthy**: every container running and
ready, every readiness gate True, on a node, not being deleted, and no EndpointSlice written
after the pod's last change says it is not serving (`serving` is the EndpointSlice controller's
`IsPodReady`, whatever `publishNotReadyAddresses` says). Any other printed pod is **doubtful**,
and the engine reads it whole (`engine/wholepods.py`), so the gates judge it by the real
conditions. A healthy cluster costs rows only; a sick one costs a whole read of the pods that
are sick, which is when the details matter.

A printed pod is the row's `PartialObjectMetadata` with the row's cells under `PRINTED`, so the
run's cache, its read-your-writes fences and label selectors treat it like any object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from migrator.model.tables import Row

Obj = dict[str, Any]

PRINTED = "printed"  # key of a printed pod's cells (never a field of a real Pod)
NO_VALUE = "<none>"  # what printPod shows for an empty cell


def printed_object(row: Row, api_version: str = "v1", kind: str = "Pod") -> Obj:
    """The printed object of one Table row read with `includeObject=Metadata` (a printed pod,
    or any kind's row where only its metadata is wanted: a wake-up event's version)."""
    meta = (row.object or {}).get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "metadata": dict(meta),
            PRINTED: dict(row.cells)}


def is_printed(pod: Mapping[str, Any]) -> bool:
    return PRINTED in pod


def cells(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get(PRINTED) or {}


def _fraction(text: Any) -> tuple[int, int] | None:
    """"2/3" → (2, 3); None for anything else ("<none>", garbage)."""
    done, sep, total = str(text or "").partition("/")
    if not sep or not done.isdigit() or not total.isdigit():
        return None
    return int(done), int(total)


def node_of(pod: Mapping[str, Any]) -> str:
    node = str(cells(pod).get("Node") or "")
    return "" if node == NO_VALUE else node


def plainly_healthy(pod: Mapping[str, Any]) -> bool:
    """Every container running and ready, every readiness gate True, scheduled, not being
    deleted: the printed state of a pod whose Ready condition the kubelet has set True."""
    row = cells(pod)
    if (pod.get("metadata") or {}).get("deletionTimestamp") or not node_of(pod):
        return False
    ready = _fraction(row.get("Ready"))
    if ready is None or ready[1] == 0 or ready[0] != ready[1]:
        return False
    if row.get("Status") != "Running":
        return False
    gates = row.get("Readiness Gates")
    if gates in (None, "", NO_VALUE):
        return True
    counted = _fraction(gates)
    return counted is not None and counted[0] == counted[1]


def not_serving(pod_name: str, pod_version: int,
                slices: Iterable[tuple[int, str, bool]]) -> bool:
    """Some EndpointSlice written after the pod's last change lists it as not serving.
    `slices` are (slice version, target pod name, serving) per endpoint; a slice older than the
    pod may not have caught up with it yet and proves nothing."""
    return any(name == pod_name and version > pod_version and not serving
               for version, name, serving in slices)
