"""API Priority and Fairness against the simulated API server: a 429 whose Retry-After is
upstream's maximum (32 s, kubernetes dropped_requests_tracker.go `maxRetryAfter`) is waited out
within the retry budget, the wait is said as a progress line, and the request then succeeds.
The sleep is injected, so the test takes no real 32 s."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from dcgm_sim.server import ADMIN_TOKEN
from migrator.errors import APIError
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds

Api = Any


def set_faults(api: Api, **settings: Any) -> None:
    """Through the sim's own endpoint, as a test in another process would."""
    request = urllib.request.Request(f"{api.url}/sim/v1/faults", method="PUT",
                                     data=json.dumps(settings).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request) as answer:
        assert answer.status == 200


def test_a_32_second_retry_after_is_honoured_and_said(api: Api) -> None:
    sleeps: list[float] = []
    notices: list[str] = []

    def sleep(seconds: float) -> None:  # the server recovers while the tool waits
        sleeps.append(seconds)
        set_faults(api, error_rate=0.0)

    kube = Kube.for_server(api.url, ADMIN_TOKEN,
                           retry=RetryPolicy(sleep=sleep, notice=notices.append))
    set_faults(api, error_rate=1.0, error_codes=[429], retry_after_seconds=32)
    seq = api.log.last_seq
    assert kube.get(kinds.NAMESPACE, "ns") is not None
    assert sleeps == [32.0]
    assert notices == ["API server asked to retry after 32 s (priority and fairness)"]
    assert [r.code for r in api.log.find(seq, resource="namespaces")][:2] == [429, 200]


def test_an_overloaded_server_is_given_up_on_after_the_budget(api: Api) -> None:
    sleeps: list[float] = []
    kube = Kube.for_server(api.url, ADMIN_TOKEN,
                           retry=RetryPolicy(sleep=sleeps.append, attempts=10))
    set_faults(api, error_rate=1.0, error_codes=[429], retry_after_seconds=32)
    with pytest.raises(APIError, match="gave up after 2 attempts"):
        kube.get(kinds.NAMESPACE, "ns")
    # one maximal Retry-After fits (30 s of backoff + 32 s); a second would pass 62 s
    assert sleeps == [32.0] and sum(sleeps) <= RetryPolicy().budget_seconds
