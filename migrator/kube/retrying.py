"""Retry policy of the kube choke point: which failures are retried, how long to wait, when to stop.

Only `migrator.kube` retries (the choke point of docs/architecture.md, "What each layer does").
Every request — writes too — goes through the same policy, because every write the tool sends
is idempotent or guarded by a resourceVersion or delete preconditions. The waits honour
`Retry-After`, otherwise back off exponentially with jitter. Sleep and randomness are injected
so tests take no real time.

The budget. Backoff waits add up to at most `max_wait_seconds` (30 s). A `Retry-After` is the
server's own word and is honoured up to `max_retry_after_seconds` (32 s): API Priority and
Fairness answers a rejected request with 429 and a Retry-After that doubles under sustained
overload up to `maxRetryAfter = 32` (kubernetes
staging/src/k8s.io/apiserver/pkg/util/flowcontrol/dropped_requests_tracker.go,
`updateRetryAfterIfNeededLocked`; sent by the filter in
staging/src/k8s.io/apiserver/pkg/server/filters/priority-and-fairness.go). So the whole budget
is one maximal Retry-After plus the usual backoff: all waits together stay within
`max_wait_seconds + max_retry_after_seconds` (62 s), backoff alone within `max_wait_seconds`;
a longer Retry-After is waited for its cap. Each Retry-After wait is announced (`notice`), so
a user sees what the tool waits for rather than a silent minute.
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
    max_wait_seconds: float = 30.0  # backoff waits of one request, summed
    # One Retry-After is honoured up to this (APF's maxRetryAfter), on top of the backoff.
    max_retry_after_seconds: float = 32.0
    backoff_base: float = 0.25  # first wait, doubled per attempt
    backoff_max: float = 8.0  # cap of one exponential wait
    connect_timeout: float = 5.0  # seconds to open a connection
    read_timeout: float = 30.0  # seconds to wait for an answer (watches add their own)
    # The server's bookmark cadence a watch's idle timeout is set from (kube/watching.py).
    watch_bookmark_seconds: float = 60.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    random: Callable[[], float] = field(default=random.random, compare=False)
    # Told of every Retry-After about to be waited out (a progress line; see `retry_after_notice`).
    notice: Callable[[str], None] | None = field(default=None, compare=False)

    @property
    def budget_seconds(self) -> float:
        """All the waits of one request, Retry-After included."""
        return self.max_wait_seconds + self.max_retry_after_seconds

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


def retry_after_notice(seconds: float, status: int) -> str:
    """The progress line for a Retry-After the tool is about to wait out."""
    why = " (priority and fairness)" if status == 429 else ""
    return f"API server asked to retry after {seconds:g} s{why}"


@dataclass
class Outcome:
    """What a retried call went through (for the request counter and AlreadyExists reports)."""

    attempts: int = 0
    waited: float = 0.0
    transient_failures: int = 0  # the ones another attempt followed
    backed_off: float = 0.0  # the part of `waited` that was backoff, not Retry-After


def _server_wait(exc: BaseException | None, policy: RetryPolicy) -> float | None:
    """The Retry-After to honour (capped), or None when the server named none."""
    if isinstance(exc, Transient) and exc.retry_after is not None:
        return min(exc.retry_after, policy.max_retry_after_seconds)
    return None


def _wait(policy: RetryPolicy) -> Callable[[tenacity.RetryCallState], float]:
    def wait(state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = _server_wait(exc, policy)
        return asked if asked is not None else policy.backoff(state.attempt_number)

    return wait


def _stop(policy: RetryPolicy, outcome: Outcome) -> Callable[[tenacity.RetryCallState], bool]:
    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= policy.attempts:
            return True
        exc = state.outcome.exception() if state.outcome else None
        if _server_wait(exc, policy) is None and (
                outcome.backed_off + state.upcoming_sleep > policy.max_wait_seconds):
            return True
        return state.idle_for + state.upcoming_sleep > policy.budget_seconds

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
        exc = state.outcome.exception() if state.outcome else None
        if _server_wait(exc, policy) is None:
            outcome.backed_off += state.upcoming_sleep
        elif policy.notice is not None and state.upcoming_sleep > 0 and isinstance(exc, Transient):
            policy.notice(retry_after_notice(state.upcoming_sleep, exc.status))

    return tenacity.Retrying(
        retry=tenacity.retry_if_exception_type(Transient),
        wait=_wait(policy),
        stop=_stop(policy, outcome),
        sleep=policy.sleep,
        before=count,
        before_sleep=record_sleep,
        reraise=True,
    )
