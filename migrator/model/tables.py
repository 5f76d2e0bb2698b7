"""`meta.k8s.io/v1` Table rows read as values, and the DaemonSet rollout counts they carry. Pure.
A Table watch names later rows by its first event's `columnDefinitions`; a DaemonSet row shows no
`observedGeneration`, so `rollout_view` fills only the counts and a reader confirms with a GET."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"

# DaemonSet printer column → the status field it prints.
_DAEMONSET_COUNTS = {"Desired": "desiredNumberScheduled", "Current": "currentNumberScheduled",
                     "Ready": "numberReady", "Up-to-date": "updatedNumberScheduled",
                     "Available": "numberAvailable"}


class TableError(ValueError):
    """A Table answer whose cells cannot be named (no columns before the first row)."""


@dataclass(frozen=True)
class Row:
    """One printed row: its cells by column name, and the version of the object it shows."""

    cells: Mapping[str, Any]
    resource_version: str
    object: Mapping[str, Any] | None = None  # includeObject=Metadata/Object

    @property
    def name(self) -> str:
        return str(self.cells.get("Name") or "")


def column_names(table: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The table's column names, or None when it carries none (a watch event after the first)."""
    defs = table.get("columnDefinitions")
    return tuple(str(d.get("name") or "") for d in defs) if defs else None


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
    """The row the DaemonSet printer would show for this object."""
    status, meta = ds.get("status") or {}, ds.get("metadata") or {}
    return Row({"Name": meta.get("name", ""), **{column: int(status.get(field) or 0)
                for column, field in _DAEMONSET_COUNTS.items()}},
               str(meta.get("resourceVersion") or ""))


def object_row(obj: Mapping[str, Any]) -> Row:
    """The printed row of an object a Table watch sent whole (only DaemonSets are known)."""
    if obj.get("kind") != "DaemonSet":
        raise TableError(f"a {obj.get('kind') or 'kindless object'} instead of a Table row")
    return daemonset_row(obj)


def rollout_view(row: Row) -> Obj:
    """A DaemonSet-shaped dict with the row's name, version and rollout counts (for
    `gates.rollout_counts` and progress, never `gates.rollout_complete`: no generations)."""
    return {"metadata": {"name": row.name, "resourceVersion": row.resource_version},
            "status": {field: int(row.cells.get(column) or 0)
                       for column, field in _DAEMONSET_COUNTS.items()}}


def counts_look_complete(view: Obj) -> bool:
    """Every desired pod updated and available, by the counts alone (confirm with the object)."""
    st = view.get("status") or {}
    return (int(st.get("updatedNumberScheduled") or 0) == int(st.get("desiredNumberScheduled") or 0)
            == int(st.get("numberAvailable") or 0))
