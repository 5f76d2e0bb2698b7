"""The choke point: every request goes through `Transport.send`, out through the official
client's `ApiClient` (auth, TLS, proxy) with timeouts, retries, a count and typed errors (an error
`Status` read as such, its own sentence the message). Bodies are raw JSON (the generated models
cost seconds). No header, token or key enters a message.

Every request is retried, writes too (each is idempotent or guarded). Backoff (equal jitter) sums
to `max_wait_seconds`; one `Retry-After` is honoured on top, up to 32 s (API Priority and
Fairness's `maxRetryAfter`), and announced (`notice`)."""

from __future__ import annotations

import gc
import json
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import tenacity
import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from migrator import __version__
from migrator.errors import (
    APIAlreadyExists,
    APIConflict,
    APIError,
    APIForbidden,
    APIInvalid,
    APINotFound,
    APITestFailed,
    APIUnreachable,
    APIWebhookDenied,
    WatchExpired,
)
from migrator.kube.config import ExecFailures

Query = Sequence[tuple[str, str]]

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
        return (state.attempt_number >= policy.attempts
                or (asked(state)[1] is None
                    and outcome.backed_off + state.upcoming_sleep > policy.max_wait_seconds)
                or state.idle_for + state.upcoming_sleep > policy.budget_seconds)

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


_PROXY_AUTH_HINT = (
    "give the proxy's user and password in its URL, percent-encoded (http://user:p%40ss@proxy:"
    "3128), in HTTPS_PROXY or the cluster's proxy-url, as kubectl takes them")
_UNREACHABLE_HINT = (
    "check --kubeconfig/--context, your VPN and that the cluster is up (kubectl cluster-info), "
    "then run the same command again: an apply or rollback resumes where it stopped (its "
    "state records every write)"
)
_ERRNO = re.compile(r"\[Errno -?\d+\]\s*([^')\]]+)")
_REASONS = ((urllib3.exceptions.NameResolutionError, "host name not found"),
            (urllib3.exceptions.NewConnectionError, ""),  # its errno's text
            (urllib3.exceptions.ConnectTimeoutError, "connection timed out"),
            (urllib3.exceptions.ReadTimeoutError, "no answer before the request timeout"),
            (urllib3.exceptions.SSLError, "TLS handshake failed"))
LARGE_BODY = 256 * 1024  # bytes: a page of a few hundred pods


def short_reason(exc: BaseException) -> str:
    """A few words on why a connection failed ("Connection refused"), never a URL or header."""
    for error_type, reason in _REASONS:  # in this order: a NewConnectionError is a timeout's kin
        if isinstance(exc, error_type):
            match = None if reason else _ERRNO.search(str(exc))
            return reason or (match.group(1).strip() if match else "cannot connect")
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return short_reason(exc.reason)
    if isinstance(exc, urllib3.exceptions.ProxyError) and exc.original_error is not None:
        return f"the proxy: {short_reason(exc.original_error)}"  # its CONNECT answer
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return "connection dropped"
    if isinstance(exc, OSError):  # an errno's text, or the message it was raised with
        said = exc.strerror or next(iter(exc.args), None)
        if isinstance(said, str) and said:
            return said
    return type(exc).__name__


def parse_json(data: bytes) -> Any:
    """The body's JSON (None when empty), the cyclic GC paused for a large body (it would rescan
    the growing heap of cycle-free dicts)."""
    if not data:
        return None
    if len(data) < LARGE_BODY or not gc.isenabled():
        return json.loads(data)
    gc.disable()
    try:
        return json.loads(data)
    finally:
        gc.enable()


_PLAIN: dict[int, tuple[type[APIError], str, str]] = {  # code: error, hint, default reason
    404: (APINotFound, "check the namespace and that the object exists", ""),
    409: (APIConflict, "the object changed while the tool was working; run the command again",
          "Conflict"),
    403: (APIForbidden, "ask a cluster admin for that permission; `dcgm-migrate preflight` "
          "lists all it needs", "Forbidden"),
    410: (WatchExpired, "list again and watch from the new resourceVersion", "Expired"),
}


def error_for(code: int, body: bytes, *, method: str, path: str,
              after_retry: bool = False, exec_failure: str = "") -> APIError:
    """The typed error for a non-2xx answer to `method path`, read from its `Status` if any;
    `exec_failure`: why the kubeconfig's exec plugin gave no credentials (config.ExecFailures)."""
    try:
        status = json.loads(body.decode("utf-8", "replace")) if body else {}
    except ValueError:
        status = {}
    status = status if isinstance(status, dict) else {}
    reason = str(status.get("reason") or "")
    message = str(status.get("message") or "").strip()
    if not message:
        message = f"{method} {path} failed: HTTP {code} {reason}".rstrip()
    if message[-1] not in ".!?":
        message += "."
    if code == 409 and reason == "AlreadyExists":
        hint = ("an earlier attempt of this same create failed in transit and may have created "
                "it; read it back and compare" if after_retry else
                "an object of that name already exists; inspect it before running again")
        return APIAlreadyExists(message, hint, status=code, reason=reason, after_retry=after_retry)
    if code == 401:
        why = f" The kubeconfig's exec plugin failed: {exec_failure.rstrip('.')}." \
            if exec_failure else ""
        return APIForbidden(
            f"The API server rejected the credentials ({method} {path}: HTTP 401 Unauthorized)."
            f"{why}",
            "refresh the credentials in your kubeconfig (for example log in again)",
            status=code, reason=reason or "Unauthorized")
    # An admission webhook's refusal, worded by k8s.io/apiserver's webhook errors
    # `ToStatusErr` (403 unless the webhook sets a code), not RBAC's "… is forbidden: User …".
    if code == 403 and message.startswith("admission webhook ") and " denied the request" in \
            message:
        return APIWebhookDenied(message, "an admission webhook refuses this change, as its "
                                "message says; change the object or the webhook's policy, then "
                                "run again", status=code, reason=reason)
    if code in _PLAIN:
        error, hint, default_reason = _PLAIN[code]
        return error(message, hint, status=code, reason=reason or default_reason)
    details = status.get("details")
    found = [c for c in (details.get("causes") if isinstance(details, dict) else None) or ()
             if isinstance(c, dict)]  # each as "field: message", as an Invalid answer lists them
    causes = tuple(f"{c.get('field') or ''}: {c.get('message') or ''}".lstrip(": ") for c in found)
    texts = [*(str(c.get("message") or "") for c in found), str(status.get("message") or "")]
    # A JSON patch's failed `test` ("testing value <path> failed"), not a refusal of the change.
    if code == 422 and any(t.startswith("testing value ") or ": testing value " in t
                           for t in texts):
        return APITestFailed(message, "the object changed meanwhile: read it again", status=code,
                             reason=reason or "Invalid", causes=causes)
    if code == 422:
        unsaid = [c for c in causes if c.split(": ", 1)[-1] not in message]
        if unsaid:
            message = f"{message[:-1]}: {'; '.join(unsaid)}."
        return APIInvalid(
            message, "the API server refuses this change (a value it does not accept, a field "
            "that may not change, or an admission policy, as its message says); change the "
            "object or the policy, then run again",
            status=code, reason=reason or "Invalid", causes=causes)
    return APIError(message, "check the API server's health (kubectl get --raw /readyz) and run "
                    "the command again", status=code, reason=reason)


class Transport:
    """Sends requests with auth, timeouts and retries; counts them. Thread-safe."""

    def __init__(self, configuration: Any, policy: RetryPolicy,
                 exec_failures: ExecFailures | None = None) -> None:
        self._api = ApiClient(configuration)
        self._exec_failures = exec_failures  # installed on the root logger until close()
        self._api.user_agent = f"dcgm-migrate/{__version__}"
        self.server: str = configuration.host
        self.policy = policy
        self._lock = threading.Lock()  # for the counts
        self.request_count = self.retry_count = 0  # HTTP requests sent, retries included
        # The API server's latest `Date`: Leases are judged by its clock, not this host's.
        self.server_date: datetime | None = None

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]
        if self._exec_failures is not None:
            self._exec_failures.uninstall()

    def send(self, method: str, path: str, query: Query = (), body: Any = None,
             content_type: str = "application/json", *, stream: bool = False,
             read_timeout: float | None = None, accept: str = "application/json") -> Any:
        """One request, retried; its JSON (`stream`: the open response), else a typed error."""
        outcome = Outcome()
        timeout = (self.policy.connect_timeout, read_timeout or self.policy.read_timeout)
        began = time.monotonic()  # the attempts' own time counts too (connect timeouts)
        try:
            answer = retrier(self.policy, outcome)(self._once, method, path, query, body,
                                                   content_type, stream, timeout, outcome, accept)
        except Transient as exc:
            raise self._give_up(exc, method, path, outcome,
                                time.monotonic() - began) from exc
        finally:
            with self._lock:
                self.request_count += outcome.attempts
                self.retry_count += max(outcome.attempts - 1, 0)
        return answer if stream else parse_json(answer)

    def _once(self, method: str, path: str, query: Query, body: Any, content_type: str,
              stream: bool, timeout: tuple[float, float], outcome: Outcome, accept: str) -> Any:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            request = self._api.param_serialize(
                method=method, resource_path=path, query_params=list(query) or None,
                header_params=headers, body=body, auth_settings=["BearerToken"])
            raw = self._api.call_api(*request, _request_timeout=timeout).response
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            reason = short_reason(exc)
            if reason.endswith(" 407 Proxy Authentication Required"):  # asking again cannot help
                raise self._unreachable(f"{reason}.", _PROXY_AUTH_HINT) from None
            raise Transient(reason) from exc
        except ApiException as exc:  # the client's wrapper of a TLS failure (status 0)
            if exc.status:
                raise
            raise Transient("TLS handshake failed") from exc
        status = int(raw.status)
        try:
            date = parsedate_to_datetime(str(raw.headers.get("Date") or ""))
            if date.tzinfo is not None:
                self.server_date = date
        except (TypeError, ValueError, IndexError):
            pass
        if 200 <= status < 300 and stream:
            return raw
        try:
            data = raw.data or b""
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Transient(short_reason(exc)) from exc
        finally:
            raw.release_conn()
        if 200 <= status < 300:
            if self._exec_failures is not None:
                self._exec_failures.last = ""  # the credentials worked
            return data
        if status in RETRYABLE_STATUSES:
            raise Transient(f"HTTP {status}", status=status, body=data,
                            retry_after=parse_retry_after(raw.headers.get("Retry-After")))
        after_retry = method == "POST" and outcome.transient_failures > 0
        raise error_for(status, data, method=method, path=path, after_retry=after_retry,
                        exec_failure=self._exec_failures.last if self._exec_failures else "")

    def _give_up(self, exc: Transient, method: str, path: str, outcome: Outcome,
                 elapsed: float) -> APIError | APIUnreachable:
        """The typed error once the retries are spent; `elapsed`: real seconds since the first."""
        tries = f"{outcome.attempts} attempt{'s' if outcome.attempts != 1 else ''}"
        if exc.status == 0:
            return self._unreachable(f"{exc.reason} (gave up after {tries} over "
                                     f"{max(elapsed, outcome.waited):.1f} s).", _UNREACHABLE_HINT)
        error = error_for(exc.status, exc.body, method=method, path=path)
        error.message = f"{error.message.rstrip('.')} (gave up after {tries})."
        error.args = (error.message,)
        return error

    def _unreachable(self, why: str, hint: str) -> APIUnreachable:
        return APIUnreachable(f"Cannot reach the Kubernetes API server at {self.server}: {why}",
                              hint)
