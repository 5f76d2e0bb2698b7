"""Retry policy of the kube choke point. Every request is retried, writes too (each is idempotent
or guarded). Backoff (equal jitter) sums to `max_wait_seconds`; one `Retry-After` is honoured on
top, up to 32 s (API Priority and Fairness's `maxRetryAfter`), and announced (`notice`)."""

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
    max_wait_seconds: float = 30.0  # backoff waits of one request, summed
    max_retry_after_seconds: float = 32.0  # one Retry-After, on top of the backoff
    backoff_base: float = 0.25  # first wait, doubled per attempt
    backoff_max: float = 8.0  # cap of one exponential wait
    connect_timeout: float = 5.0  # seconds to open a connection
    read_timeout: float = 30.0  # seconds to wait for an answer (watches add their own)
    watch_bookmark_seconds: float = 60.0  # sets a watch's idle timeout (kube/watching.py)
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)
    notice: Callable[[str], None] | None = field(default=None, compare=False)  # of a Retry-After

    @property
    def budget_seconds(self) -> float:
        """All the waits of one request, Retry-After included."""
        return self.max_wait_seconds + self.max_retry_after_seconds

    def backoff(self, attempt: int) -> float:
        """Equal-jitter exponential wait after failed attempt number `attempt` (1-based)."""
        cap = min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1))
        return cap / 2 + float(self.random()) * cap / 2


class Transient(Exception):
    """An attempt worth retrying: a retryable status, or no connection (`status` 0)."""

    def __init__(self, reason: str, *, status: int = 0, retry_after: float | None = None,
                 body: bytes = b"") -> None:
        super().__init__(reason)
        self.reason, self.status, self.retry_after, self.body = reason, status, retry_after, body


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header; None when absent or not seconds (an HTTP-date)."""
    try:
        return max(float(value.strip()), 0.0) if value else None
    except ValueError:
        return None


@dataclass
class Outcome:
    """What a retried call went through (for the request counter and AlreadyExists reports)."""

    attempts: int = 0
    waited: float = 0.0
    transient_failures: int = 0  # the ones another attempt followed
    backed_off: float = 0.0  # the part of `waited` that was backoff, not Retry-After


def retrier(policy: RetryPolicy, outcome: Outcome) -> tenacity.Retrying:
    """Retries while `Transient` is raised and the budget lasts (then re-raises it), counting
    into `outcome`."""

    def asked(state: tenacity.RetryCallState) -> tuple[Transient | None, float | None]:
        """The failure, and the Retry-After to honour (capped; None when none was named)."""
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return exc, min(exc.retry_after, policy.max_retry_after_seconds)
        return (exc if isinstance(exc, Transient) else None), None

    def wait(state: tenacity.RetryCallState) -> float:
        server = asked(state)[1]
        return server if server is not None else policy.backoff(state.attempt_number)

    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= policy.attempts:
            return True
        if asked(state)[1] is None and (
                outcome.backed_off + state.upcoming_sleep > policy.max_wait_seconds):
            return True
        return state.idle_for + state.upcoming_sleep > policy.budget_seconds

    def count(state: tenacity.RetryCallState) -> None:
        outcome.attempts += 1

    def record_sleep(state: tenacity.RetryCallState) -> None:
        outcome.transient_failures += 1
        outcome.waited += state.upcoming_sleep
        exc, server = asked(state)
        if server is None:
            outcome.backed_off += state.upcoming_sleep
        elif policy.notice is not None and state.upcoming_sleep > 0 and exc is not None:
            why = " (priority and fairness)" if exc.status == 429 else ""
            policy.notice(f"API server asked to retry after {state.upcoming_sleep:g} s{why}")

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(Transient), wait=wait, stop=stop,
        sleep=policy.sleep, before=count, before_sleep=record_sleep, reraise=True)
