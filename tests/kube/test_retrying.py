"""Retry policy of the kube choke point, with an injected sleep: what is retried, how long it
waits (Retry-After, jittered backoff) and when it gives up (attempts, total wait budget)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from migrator.kube.transport import (
    Outcome,
    RetryPolicy,
    Transient,
    parse_retry_after,
    retrier,
)


def policy(sleeps: list[float], **kw: Any) -> RetryPolicy:
    return RetryPolicy(sleep=sleeps.append, random=lambda: 1.0, **kw)


def flaky(failures: list[Exception], result: str = "ok") -> Callable[[], str]:
    def fn() -> str:
        if failures:
            raise failures.pop(0)
        return result
    return fn


def test_backoff_doubles_up_to_the_cap_with_equal_jitter() -> None:
    full = RetryPolicy(backoff_base=0.5, backoff_max=3.0, random=lambda: 1.0)
    half = RetryPolicy(backoff_base=0.5, backoff_max=3.0, random=lambda: 0.0)
    assert [full.backoff(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert [half.backoff(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]


def test_retry_after_is_honoured_and_the_call_then_succeeds() -> None:
    sleeps: list[float] = []
    outcome = Outcome()
    fn = flaky([Transient("HTTP 429", status=429, retry_after=7.0),
                Transient("HTTP 503", status=503)])
    assert retrier(policy(sleeps), outcome)(fn) == "ok"
    assert sleeps == [7.0, 0.5]  # Retry-After, then the backoff after attempt 2 (0.25 * 2)
    assert outcome.attempts == 3 and outcome.transient_failures == 2
    assert outcome.waited == pytest.approx(7.5)


def test_gives_up_after_the_attempts_and_reraises_the_last_failure() -> None:
    sleeps: list[float] = []
    outcome = Outcome()
    fn = flaky([Transient(f"HTTP 503 #{i}", status=503) for i in range(10)])
    with pytest.raises(Transient, match="#5"):
        retrier(policy(sleeps, attempts=6), outcome)(fn)
    assert outcome.attempts == 6
    assert len(sleeps) == 5


def test_the_total_wait_never_exceeds_the_budget() -> None:
    """All waits together stay within the backoff budget plus one maximal Retry-After."""
    sleeps: list[float] = []
    outcome = Outcome()
    fn = flaky([Transient("HTTP 429", status=429, retry_after=12.0) for _ in range(10)])
    with pytest.raises(Transient):
        retrier(policy(sleeps, attempts=10, max_wait_seconds=20.0,
                       max_retry_after_seconds=10.0), outcome)(fn)
    assert sleeps == [10.0, 10.0, 10.0]  # capped at 10 s; a fourth would pass 20 + 10 s
    assert outcome.attempts == 4


def test_backoff_alone_keeps_to_max_wait_seconds() -> None:
    sleeps: list[float] = []
    outcome = Outcome()
    fn = flaky([Transient("HTTP 503", status=503) for _ in range(20)])
    with pytest.raises(Transient):
        retrier(policy(sleeps, attempts=20, backoff_max=8.0), outcome)(fn)
    assert sum(sleeps) <= 30.0 and sum(sleeps) + 8.0 > 30.0  # stops at the next wait over 30
    assert outcome.backed_off == pytest.approx(sum(sleeps))


def test_a_maximal_priority_and_fairness_retry_after_is_waited_out_and_said() -> None:
    """APF's Retry-After grows to 32 s (dropped_requests_tracker.go, maxRetryAfter): it fits
    the budget beside the usual backoff, and the wait is announced before it starts."""
    sleeps: list[float] = []
    notices: list[str] = []
    outcome = Outcome()
    fn = flaky([Transient("HTTP 503", status=503),
                Transient("HTTP 429", status=429, retry_after=32.0),
                Transient("HTTP 503", status=503)])
    assert retrier(policy(sleeps, notice=notices.append), outcome)(fn) == "ok"
    assert sleeps == [0.25, 32.0, 1.0]
    assert notices == ["API server asked to retry after 32 s (priority and fairness)"]
    assert outcome.backed_off == pytest.approx(1.25) and outcome.waited == pytest.approx(33.25)


def test_a_retry_after_beyond_the_cap_is_waited_for_the_cap() -> None:
    sleeps: list[float] = []
    fn = flaky([Transient("HTTP 429", status=429, retry_after=600.0)])
    assert retrier(policy(sleeps), Outcome())(fn) == "ok"
    assert sleeps == [RetryPolicy().max_retry_after_seconds]


def test_other_errors_are_not_retried() -> None:
    sleeps: list[float] = []
    calls = []

    def fn() -> str:
        calls.append(1)
        raise KeyError("not transient")

    with pytest.raises(KeyError):
        retrier(policy(sleeps), Outcome())(fn)
    assert calls == [1] and sleeps == []


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("3", 3.0), (" 1.5 ", 1.5), ("0", 0.0), ("-4", 0.0), ("", None), (None, None),
     ("Wed, 21 Oct 2015 07:28:00 GMT", None)],
)
def test_retry_after_parsing(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header) == seconds
