"""`meta.k8s.io/v1` Table rows read as values, and the DaemonSet rollout counts they carry.

A Table watch (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, `includeObject=None`)
sends, per event, the printer's cells instead of the object: a DaemonSet status change costs
about a tenth of the whole object. The server sends `columnDefinitions` with the first event
only (`handlers/response.go` `watchEmbeddedEncoder.doEncode` sets NoHeaders after it), so a
reader keeps the columns of the first and names the cells of the rest by them. Pure.

The DaemonSet printer (`pkg/printers/internalversion/printers.go` `printDaemonSet`) shows
Desired, Current, Ready, Up-to-date and Available, but not `observedGeneration`: a row alone
cannot prove a rollout complete (the counts of the previous generation look complete until
the controller observes the new one). `rollout_view` therefore fills only the counts, and a
reader confirms a row that looks complete with one GET of the object (`rollout_complete`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"

# DaemonSet printer column → the status field it prints.
_DAEMONSET_COUNTS = {
    "Desired": "desiredNumberScheduled",
    "Current": "currentNumberScheduled",
    "Ready": "numberReady",
    "Up-to-date": "updatedNumberScheduled",
    "Available": "numberAvailable",
}


class TableError(ValueError):
    """A Table answer this reader cannot name the cells of (no columns before the first row)."""


@dataclass(frozen=True)
class Row:
    """One printed row: its cells by column name, and the version of the object it shows."""

    cells: Mapping[str, Any]
    resource_version: str
    object: Mapping[str, Any] | None = None  # the row's `object` (includeObject=Metadata/Object)

    @property
    def name(self) -> str:
        return str(self.cells.get("Name") or "")


def column_names(table: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The table's column names, or None when it carries none (a watch event after the first)."""
    defs = table.get("columnDefinitions")
    if not defs:
        return None
    return tuple(str(d.get("name") or "") for d in defs)


def rows(table: Mapping[str, Any], columns: Sequence[str]) -> list[Row]:
    """The table's rows with their cells named by `columns`."""
    version = str((table.get("metadata") or {}).get("resourceVersion") or "")
    out: list[Row] = []
    for raw in table.get("rows") or []:
        cells = raw.get("cells") or []
        if len(cells) != len(columns):
            raise TableError(f"a row has {len(cells)} cells for {len(columns)} columns")
        obj = raw.get("object") or {}
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        out.append(Row(dict(zip(columns, cells, strict=True)), rv, raw.get("object")))
    return out


def daemonset_row(ds: Mapping[str, Any]) -> Row:
    """The row the DaemonSet printer would show for this object (its counts), for a server
    that answers a Table request with the object itself."""
    status = ds.get("status") or {}
    meta = ds.get("metadata") or {}
    cells = {"Name": meta.get("name", "")}
    cells.update({column: int(status.get(field) or 0)
                  for column, field in _DAEMONSET_COUNTS.items()})
    return Row(cells, str(meta.get("resourceVersion") or ""))


def object_row(obj: Mapping[str, Any]) -> Row:
    """The printed row of an object a Table watch sent whole (a server or proxy that ignored
    the Table request); only the DaemonSet printer is known here."""
    if obj.get("kind") != "DaemonSet":
        raise TableError(f"a {obj.get('kind') or 'kindless object'} instead of a Table row")
    return daemonset_row(obj)


def rollout_view(row: Row) -> Obj:
    """A DaemonSet-shaped dict with the row's name, version and rollout counts: enough for
    `gates.rollout_counts` and progress, never for `gates.rollout_complete` (no generations)."""
    status = {field: int(row.cells.get(column) or 0)
              for column, field in _DAEMONSET_COUNTS.items()}
    return {"metadata": {"name": row.name, "resourceVersion": row.resource_version},
            "status": status}


def counts_look_complete(view: Obj) -> bool:
    """Every desired pod updated and available, by the counts alone (see the module docstring:
    confirm with the object before believing it)."""
    st = view.get("status") or {}
    desired = int(st.get("desiredNumberScheduled") or 0)
    return (int(st.get("updatedNumberScheduled") or 0) == desired
            and int(st.get("numberAvailable") or 0) == desired)
