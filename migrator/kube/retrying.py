"""Retry policy of the kube choke point: which failures are retried, how long to wait, when to stop.

Only `migrator.kube` retries (the choke point of docs/architecture.md, "What each layer does").
Every request — writes too — goes through the same policy, because every write the tool sends
is idempotent or guarded by a resourceVersion or delete preconditions. The waits honour
`Retry-After`, otherwise back off exponentially with jitter, and the sum of the waits never
exceeds `max_wait_seconds`. Sleep and randomness are injected so tests take no real time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tenacity

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})

@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one request. Defaults suit an interactive CLI (≤ 30 s of waiting)."""

    attempts: int = 6
    max_wait_seconds: float = 30.0
    backoff_base: float = 0.25  # first wait, doubled per attempt
    backoff_max: float = 8.0  # cap of one exponential wait
    connect_timeout: float = 5.0  # seconds to open a connection
    read_timeout: float = 30.0  # seconds to wait for an answer (watches add their own)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)

    def backoff(self, attempt: int) -> float:
        """Equal-jitter exponential wait after failed attempt number `attempt` (1-based)."""
        cap = min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1))
        return cap / 2 + float(self.random()) * cap / 2


class Transient(Exception):
    """One attempt failed in a way worth retrying: a retryable status or no connection.

    `status` is 0 for connection failures. Internal to `migrator.kube`: the choke point turns
    the last one into a typed error once the budget is spent.
    """

    def __init__(
        self,
        reason: str,
        *,
        status: int = 0,
        retry_after: float | None = None,
        body: bytes = b"",
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.retry_after = retry_after
        self.body = body


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header; None when absent or not a number of seconds."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # the HTTP-date form: the API server never sends it; back off instead
    return max(seconds, 0.0)


@dataclass
class Outcome:
    """What a retried call went through (for the request counter and AlreadyExists reports)."""

    attempts: int = 0
    waited: float = 0.0
    transient_failures: int = 0  # the ones another attempt followed


def _wait(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return exc.retry_after
        return policy.backoff(state.attempt_number)

    return wait


def _stop(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], bool]:
    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= policy.attempts:
            return True
        return state.idle_for + state.upcoming_sleep > policy.max_wait_seconds

    return stop


def retrier(policy: RetryPolicy, outcome: Outcome) -> tenacity.Retrying:
    """Calls a function until it returns, raises a non-`Transient` error, or the budget is
    spent (then the last `Transient` is re-raised for the caller to translate), counting into
    `outcome`. The caller hands it the request function itself: no wrapper of ours sits
    between the retries and the request."""

    def count(state: tenacity.RetryCallState) -> None:
        outcome.attempts += 1

    def record_sleep(state: tenacity.RetryCallState) -> None:
        outcome.transient_failures += 1
        outcome.waited += state.upcoming_sleep

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(Transient),
        wait=_wait(policy),
        stop=_stop(policy),
        sleep=policy.sleep,
        before=count,
        before_sleep=record_sleep,
        reraise=True,
    )
