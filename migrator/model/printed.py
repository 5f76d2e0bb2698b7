"""Pods read as their printed Table rows (a sixth of the whole pod), and when a row may be believed.
printPod shows ready containers, not the Ready condition (they differ under `MarkPodsNotReady`, an
unmet readiness gate, or before the kubelet writes it): a row is believed only when plainly healthy,
else it is doubtful and read whole (`engine/wholepods.py`). Its cells sit under `PRINTED`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migrator.model.tables import Row

PRINTED = "printed"  # key of a printed pod's cells (never a field of a real Pod)
NO_VALUE = "<none>"  # what printPod shows for an empty cell


def printed_object(row: Row, api_version: str = "v1", kind: str = "Pod") -> dict[str, Any]:
    """The printed object of one Table row read with `includeObject=Metadata`."""
    meta = (row.object or {}).get("metadata") or {}
    return {"apiVersion": api_version, "kind": kind, "metadata": dict(meta),
            PRINTED: dict(row.cells)}


def is_printed(pod: Mapping[str, Any]) -> bool:
    return PRINTED in pod


def cells(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get(PRINTED) or {}


def _done(text: Any) -> int | None:
    """"3/3" → 3 (all of them done); None for "2/3", "<none>" or anything else."""
    done, sep, total = str(text or "").partition("/")
    whole = sep and done.isdigit() and total.isdigit() and int(done) == int(total)
    return int(total) if whole else None


def node_of(pod: Mapping[str, Any]) -> str:
    node = str(cells(pod).get("Node") or "")
    return "" if node == NO_VALUE else node


def plainly_healthy(pod: Mapping[str, Any]) -> bool:
    """Every container running and ready, every readiness gate True, scheduled, not deleted."""
    row = cells(pod)
    if (pod.get("metadata") or {}).get("deletionTimestamp") or not node_of(pod):
        return False
    gates = row.get("Readiness Gates")
    return ((_done(row.get("Ready")) or 0) > 0 and row.get("Status") == "Running"
            and (gates in (None, "", NO_VALUE) or _done(gates) is not None))

