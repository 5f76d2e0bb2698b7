"""Table rows (model/tables.py): cells named by their columns, rollout counts from a
DaemonSet row, and why a row alone never proves a rollout complete."""

from __future__ import annotations

import pytest

from migrator.model.gates import rollout_complete, rollout_counts
from migrator.model.tables import (
    Row,
    TableError,
    column_names,
    counts_look_complete,
    daemonset_row,
    object_row,
    rollout_view,
    rows,
)
from tests.helpers.builders import daemonset

COLUMNS = ("Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector")


def _table(*cells: list[object], headers: bool = True) -> dict[str, object]:
    return {"kind": "Table", "metadata": {"resourceVersion": "42"},
            "columnDefinitions": [{"name": c} for c in COLUMNS] if headers else None,
            "rows": [{"cells": list(c), "object": None} for c in cells]}


def test_cells_are_named_by_the_columns_and_carry_the_tables_version() -> None:
    table = _table(["d", 5, 5, 4, 2, 4, "gpu=true"])
    names = column_names(table)
    assert names == COLUMNS
    [row] = rows(table, names)
    assert row.name == "d" and row.cells["Up-to-date"] == 2 and row.resource_version == "42"
    assert column_names(_table(headers=False)) is None  # a watch event after the first


def test_a_row_whose_cells_do_not_fit_the_columns_is_refused() -> None:
    with pytest.raises(TableError):
        rows(_table(["d", 5, 5]), COLUMNS)


def test_a_rows_view_has_the_counts_but_no_generations() -> None:
    view = rollout_view(Row(dict(zip(COLUMNS, ["d", 5, 5, 4, 2, 4, ""], strict=True)), "7"))
    assert rollout_counts(view) == (2, 4, 5)
    assert not counts_look_complete(view)
    done = rollout_view(Row(dict(zip(COLUMNS, ["d", 5, 5, 5, 5, 5, ""], strict=True)), "8"))
    assert counts_look_complete(done)
    assert "generation" not in done["metadata"]  # hence the confirming GET


def test_an_object_gives_the_row_its_printer_would_show() -> None:
    # Generation 2 not yet observed: the counts (of generation 1) look complete, the object
    # says otherwise. The row keeps only the counts.
    ds = daemonset("d", desired=3, updated=3, available=3, generation=2)
    ds["status"]["observedGeneration"] = 1
    ds["metadata"]["resourceVersion"] = "9"
    row = daemonset_row(ds)
    assert row.resource_version == "9" and counts_look_complete(rollout_view(row))
    assert not rollout_complete(ds).ok


def test_only_a_daemonset_sent_whole_can_stand_for_its_row() -> None:
    ds = daemonset("d", desired=3, updated=1, available=2)
    assert object_row(ds) == daemonset_row(ds)
    with pytest.raises(TableError):
        object_row({"kind": "Pod", "metadata": {"name": "p"}})
