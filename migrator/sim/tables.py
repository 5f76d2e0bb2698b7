"""`meta.k8s.io/v1` Table answers, so `kubectl get` prints the columns a real cluster prints.

kubectl asks for a Table (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...`) for its
human-readable output. Columns follow the real server's printers
(`pkg/printers/internalversion/printers.go`) for the kinds the migration looks at; every other
kind gets NAME and AGE. Ages are rendered by the server as on a real cluster ("5m", "3d4h").
Pure, apart from reading the clock for ages.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from migrator.model import kinds
from migrator.model.kinds import Kind

Obj = dict[str, Any]
Column = tuple[str, str, Callable[[Obj], Any], int]  # name, type, cell, priority


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def human_age(created: str | None, now: datetime | None = None) -> str:
    """`duration.HumanDuration` of the time since `created` (RFC 3339)."""
    if not created:
        return "<unknown>"
    now = now or datetime.now(UTC)
    seconds = int((now - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC)).total_seconds())
    if seconds < 0:
        return "0s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d" if days < 730 else f"{days // 365}y"


def _age(obj: Obj) -> str:
    return human_age(obj["metadata"].get("creationTimestamp"))


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _pod_ready(obj: Obj) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: Obj) -> str:
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return str(waiting["reason"])
    return str(status.get("reason") or status.get("phase") or "Unknown")


def _restarts(obj: Obj) -> int:
    return sum(int(s.get("restartCount", 0))
               for s in (obj.get("status") or {}).get("containerStatuses") or [])


def _ports(obj: Obj) -> str:
    ports = (obj.get("spec") or {}).get("ports") or []
    out = [f"{p.get('port')}:{p['nodePort']}/{p.get('protocol', 'TCP')}" if p.get("nodePort")
           else f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports]
    return ",".join(out) or "<none>"


def _map(value: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((value or {}).items())) or "<none>"


def _status_int(field: str) -> Callable[[Obj], int]:
    return lambda o: int((o.get("status") or {}).get(field, 0))


def _node_status(obj: Obj) -> str:
    ready = next((c for c in (obj.get("status") or {}).get("conditions") or []
                  if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    return text + (",SchedulingDisabled" if (obj.get("spec") or {}).get("unschedulable") else "")


def _slice_endpoints(obj: Obj) -> str:
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3])
    return (shown + (f" + {len(addresses) - 3} more..." if len(addresses) > 3 else "")) or \
        "<unset>"


_NAME: Column = ("Name", "string", _name, 0)
_AGE: Column = ("Age", "string", _age, 0)
COLUMNS: dict[str, list[Column]] = {
    kinds.POD.key: [
        _NAME, ("Ready", "string", _pod_ready, 0), ("Status", "string", _pod_status, 0),
        ("Restarts", "string", _restarts, 0), _AGE,
        ("IP", "string", lambda o: (o.get("status") or {}).get("podIP") or "<none>", 1),
        ("Node", "string", lambda o: (o.get("spec") or {}).get("nodeName") or "<none>", 1),
    ],
    kinds.DAEMONSET.key: [
        _NAME, ("Desired", "integer", _status_int("desiredNumberScheduled"), 0),
        ("Current", "integer", _status_int("currentNumberScheduled"), 0),
        ("Ready", "integer", _status_int("numberReady"), 0),
        ("Up-to-date", "integer", _status_int("updatedNumberScheduled"), 0),
        ("Available", "integer", _status_int("numberAvailable"), 0),
        ("Node Selector", "string", lambda o: _map(
            ((o.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeSelector")), 0),
        _AGE,
    ],
    kinds.SERVICE.key: [
        _NAME, ("Type", "string", lambda o: (o.get("spec") or {}).get("type", ""), 0),
        ("Cluster-IP", "string", lambda o: (o.get("spec") or {}).get("clusterIP", ""), 0),
        ("External-IP", "string", lambda o: "<none>", 0),
        ("Port(s)", "string", _ports, 0), _AGE,
        ("Selector", "string", lambda o: _map((o.get("spec") or {}).get("selector")), 1),
    ],
    kinds.NODE.key: [
        _NAME, ("Status", "string", _node_status, 0),
        ("Roles", "string", lambda o: "<none>", 0), _AGE,
        ("Version", "string", lambda o: ((o.get("status") or {}).get("nodeInfo") or {}).get(
            "kubeletVersion", ""), 0),
    ],
    kinds.NAMESPACE.key: [
        _NAME, ("Status", "string", lambda o: (o.get("status") or {}).get("phase", ""), 0), _AGE,
    ],
    kinds.ENDPOINTSLICE.key: [
        _NAME, ("AddressType", "string", lambda o: o.get("addressType", ""), 0),
        ("Ports", "string", lambda o: ",".join(str(p.get("port")) for p in o.get("ports") or [])
         or "<unset>", 0),
        ("Endpoints", "string", _slice_endpoints, 0), _AGE,
    ],
}


def table(kind: Kind, objects: list[Obj], list_meta: Obj) -> Obj:
    """The Table of `objects`, with each row's object as PartialObjectMetadata."""
    columns = COLUMNS.get(kind.key, [_NAME, _AGE])
    return {
        "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
        "columnDefinitions": [{"name": name, "type": type_, "format": "name" if name == "Name"
                               else "", "description": "", "priority": priority}
                              for name, type_, _, priority in columns],
        "rows": [{"cells": [cell(obj) for _, _, cell, _ in columns],
                  "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}} for obj in objects],
    }
