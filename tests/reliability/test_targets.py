"""The lean-engine targets check (tests/helpers/targets.py) finds what it reports: a planted
import cycle, a status spelled as text, and the depth of a write below `main()`."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import targets


def _package(root: Path, modules: dict[str, str]) -> None:
    for name, text in modules.items():
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_a_planted_cycle_is_found_and_an_acyclic_package_has_none(tmp_path: Path) -> None:
    _package(tmp_path / "cyc", {
        "planted.__init__": "", "planted.a": "from planted import b\n",
        "planted.b": "def f() -> None:\n    from planted import a\n", "planted.c": "import os\n",
    })
    assert targets.cycles(tmp_path / "cyc", "planted") == [["planted.a", "planted.b"]]
    _package(tmp_path / "flat", {
        "acyclic.__init__": "", "acyclic.a": "from acyclic import b\n", "acyclic.b": "",
    })
    assert targets.cycles(tmp_path / "flat", "acyclic") == []


def test_status_literals_are_counted_outside_the_status_type(tmp_path: Path) -> None:
    _package(tmp_path, {
        "migrator.state": 'class PhaseStatus:\n    COMPLETED = "completed"\n',
        "migrator.user": 'x = 1\nif rec.status == "completed":  # "failed" in a comment\n'
                          '    pass\n',
        "phases.p": "NAME = 'label'\n",
    })
    assert targets.status_literal_sites(tmp_path) == ["migrator/user.py:2"]


def test_only_a_status_compared_assigned_or_keyed_is_a_status_literal(tmp_path: Path) -> None:
    statuses = [
        'ok = doc["status"] == "completed"',
        'done = rec.get("status") != "rolled-back"',
        'rec = Record(status="in-progress")',
        'body = {"phase": 1, "status": "failed"}',
        'open_ = status in ("pending", "failed")',
        'if "completed" == record.status: pass',
        'rec.status = "pending"',
        'rec.status, rec.error = "failed", message',
        'ACTIVE = ("in-progress", "failed")',
        'shown = rec.status if rec else "pending"',
    ]
    other_words = [
        'self.counted("failed")',
        'out = {"failed": [str(f) for f in failed]}',
        'log.info("completed")',
        'http_status = 200',
        '"' '""Prose that says a phase is pending.""' '"',
    ]
    _package(tmp_path, {"migrator.m": "\n".join(statuses + other_words) + "\n"})
    assert targets.status_literal_sites(tmp_path) == [
        f"migrator/m.py:{n}" for n in range(1, len(statuses) + 1)]


def test_the_targets_the_product_meets_stay_met() -> None:
    """The figures already met are held: a module past 400 lines or a status spelled as text
    fails here, not only as a `NOT met` line in the lint log."""
    figures = {f.name: f for f in targets.size_figures()}
    assert figures["largest module"].met, figures["largest module"].value
    assert targets.status_literal_sites() == []
