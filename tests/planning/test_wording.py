"""How numbers of things are written (model/wording.py)."""

from __future__ import annotations

from migrator.model.wording import counted


def test_one_thing_is_singular_and_any_other_number_plural() -> None:
    assert [counted(n, "pod") for n in (0, 1, 2)] == ["0 pods", "1 pod", "2 pods"]
    assert counted(1, "pod patch", "pod patches") == "1 pod patch"
    assert counted(3, "pod patch", "pod patches") == "3 pod patches"
