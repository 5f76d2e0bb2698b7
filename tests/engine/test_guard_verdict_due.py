"""When the guard takes its verdict (engine/guard.py `verdict_due`): at most every
`verdict_seconds` and only after something it reads changed, at least every
`verdict_idle_seconds` regardless. Plain numbers: no API server."""

from __future__ import annotations

import pytest

from migrator.engine.guard import GuardSettings, verdict_due
from migrator.engine.guardloop import cached_verdict_due

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


# ---- the verdict from the caches (`cached_verdict_due`) ----------------------------------------

@pytest.mark.parametrize(("first", "last", "now", "due"), [
    (None, float("-inf"), 100.0, False),  # nothing changed since the last verdict
    (100.0, 100.0, 100.5, False),  # still inside the debounce
    (100.0, 100.0, 101.0, True),  # a second of quiet after the change
    (100.0, 104.5, 104.9, False),  # a burst goes on ...
    (100.0, 104.9, 105.0, True),  # ... but is judged after five debounces anyway
])
def test_the_cached_verdict_follows_changes_debounced(
        first: float | None, last: float, now: float, due: bool) -> None:
    assert cached_verdict_due(GuardSettings(), now, first, last) is due


def test_an_expensive_cached_verdict_waits_four_times_its_cost() -> None:
    s = GuardSettings()
    assert not cached_verdict_due(s, 110.0, 100.0, 100.0, previous_end=103.0,
                                  previous_cost=2.0)  # 7 s after one that took 2 s
    assert cached_verdict_due(s, 111.0, 100.0, 100.0, previous_end=103.0, previous_cost=2.0)
