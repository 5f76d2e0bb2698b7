"""When the guard takes its verdict (engine/guard.py `verdict_due`): at most every
`verdict_seconds` and only after something it reads changed, at least every
`verdict_idle_seconds` regardless. Plain numbers: no API server."""

from __future__ import annotations

import pytest

from migrator.engine.guard import GuardSettings, verdict_due

S = GuardSettings(verdict_seconds=300.0, verdict_idle_seconds=3600.0)


@pytest.mark.parametrize(("elapsed", "changed", "due"), [
    (299.0, True, False),  # a change, but the last verdict is too recent
    (300.0, True, True),
    (300.0, False, False),  # nothing changed: a quiet cluster is not read again...
    (3599.0, False, False),
    (3600.0, False, True),  # ... until the idle period is over
])
def test_a_verdict_is_due_after_a_change_or_once_idle(elapsed: float, changed: bool,
                                                      due: bool) -> None:
    assert verdict_due(S, 1000.0 + elapsed, 1000.0, changed) is due


def test_the_first_verdict_is_due_at_once() -> None:
    assert verdict_due(S, 0.0, None, changed=False)
