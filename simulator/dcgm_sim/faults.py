"""Server-wide fault injection: random errors, latency, failing the Nth write, absent API groups,
and (a test hook) holding the answer of the Nth write.

Settable in process (`Faults(...)`, `faults.update(...)`) and from any client through
`GET/PUT /sim/v1/faults` (JSON with the same field names), so a test in another process can
make the API flaky or make the ServiceMonitor CRD disappear. Thread-safe; the random source is
seeded so a run with the same settings and request order fails the same requests.

`deny_writes` stands in for a ValidatingAdmissionPolicy (no CEL here): writes of the listed
objects ("resource/name", e.g. "services/nvidia-dcgm") are denied with the Status upstream's
policy dispatcher sends (kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/
validating/dispatcher.go: `admission.NewForbidden` re-coded to 422 Invalid, the message
"ValidatingAdmissionPolicy '<policy>' with binding '<binding>' denied request: <message>", and
that message as a cause); with `deny_by="webhook"`, by a validating admission webhook instead:
403 with no reason and the message "admission webhook "<name>" denied the request: <message>"
(staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/statuserror.go, `ToStatusErr`
for a webhook that sets no code). `stall_watches` makes every open watch go silent — no event, no
BOOKMARK — with its connection left open, as a connection dropped without a FIN looks to the
client.

`hang_nth_write` is a crash-test hook: the Nth successful write is applied to the store, then
its answer is held back (the client sees no reply) until the hook is cleared (`update` of
`hang_nth_write`, `reset`) or HOLD_LIMIT_SECONDS pass. While it holds one, the snapshot shows
`write_held: true`, so a test can kill the client at exactly "right after the Nth write".
`hang_write_of` ("<verb> <resource>", e.g. "patch services") counts only writes of that kind, so
the hook holds the Nth of them wherever concurrent writes put it among the others.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable
from typing import Any

INJECTABLE_CODES = (500, 503, 429)
FIELDS = ("error_rate", "error_codes", "retry_after_seconds", "latency_ms", "fail_nth_write",
          "disabled_groups", "seed", "hang_nth_write", "deny_writes", "deny_message",
          "stall_watches", "hang_write_of", "deny_by")
DENY_POLICY = "sim-deny"  # the policy (and binding) name a denied write names
DENY_WEBHOOK = "deny.sim.dcgm-migrate"  # the webhook's name, with deny_by="webhook"
DENIERS = ("policy", "webhook")
HOLD_LIMIT_SECONDS = 300.0  # a held answer is released after this long, whatever happens


class FaultsError(ValueError):
    """A bad fault setting (the endpoint answers 400)."""


class Faults:
    """Current fault settings plus the state they need (RNG, countdown to the failing write)."""

    def __init__(
        self,
        *,
        error_rate: float = 0.0,
        error_codes: Iterable[int] = INJECTABLE_CODES,
        retry_after_seconds: int = 1,
        latency_ms: float = 0.0,
        fail_nth_write: int | None = None,
        disabled_groups: Iterable[str] = (),
        seed: int = 0,
        hang_nth_write: int | None = None,
        deny_writes: Iterable[str] = (),
        deny_message: str = "denied by policy",
        stall_watches: bool = False,
        hang_write_of: str | None = None,
        deny_by: str = "policy",
    ) -> None:
        self._lock = threading.Lock()
        self.error_rate = 0.0
        self.error_codes: tuple[int, ...] = INJECTABLE_CODES
        self.retry_after_seconds = 1
        self.latency_ms = 0.0
        self.fail_nth_write: int | None = None
        self.disabled_groups: frozenset[str] = frozenset()
        self.seed = seed
        self._rng = random.Random(seed)
        self._writes_left: int | None = None
        self.hang_nth_write: int | None = None
        self._hang_left: int | None = None
        self.hang_write_of: str | None = None
        self._held = threading.Event()  # set while a write's answer is being held
        self._release = threading.Event()
        self.deny_writes: frozenset[str] = frozenset()
        self.deny_message = deny_message
        self.deny_by = "policy"
        self.stall_watches = False
        self.update(deny_writes=list(deny_writes), deny_message=deny_message, deny_by=deny_by,
                    stall_watches=stall_watches,
                    error_rate=error_rate, error_codes=list(error_codes),
                    retry_after_seconds=retry_after_seconds, latency_ms=latency_ms,
                    fail_nth_write=fail_nth_write, disabled_groups=list(disabled_groups),
                    seed=seed, hang_nth_write=hang_nth_write, hang_write_of=hang_write_of)

    def update(self, **changes: Any) -> dict[str, Any]:
        """Change some settings (validated, all or nothing); returns the new snapshot.

        Setting `fail_nth_write` (re)starts its countdown; setting `seed` re-seeds the RNG.
        """
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise FaultsError(f"unknown fault settings: {sorted(unknown)}")
        rate = float(changes.get("error_rate", self.error_rate))
        if not 0.0 <= rate <= 1.0:
            raise FaultsError("error_rate must be between 0 and 1")
        codes = tuple(int(c) for c in changes.get("error_codes", self.error_codes))
        if not codes or any(c not in INJECTABLE_CODES for c in codes):
            raise FaultsError(f"error_codes must be a non-empty subset of {INJECTABLE_CODES}")
        retry_after = int(changes.get("retry_after_seconds", self.retry_after_seconds))
        latency = float(changes.get("latency_ms", self.latency_ms))
        if retry_after < 0 or latency < 0:
            raise FaultsError("retry_after_seconds and latency_ms must not be negative")
        nth = changes.get("fail_nth_write", self.fail_nth_write)
        if nth is not None and int(nth) < 1:
            raise FaultsError("fail_nth_write must be 1 or more (or null)")
        groups = frozenset(str(g) for g in changes.get("disabled_groups", self.disabled_groups))
        hang = changes.get("hang_nth_write", self.hang_nth_write)
        if hang is not None and int(hang) < 1:
            raise FaultsError("hang_nth_write must be 1 or more (or null)")
        hang_of = changes.get("hang_write_of", self.hang_write_of)
        if hang_of is not None and len(str(hang_of).split()) != 2:
            raise FaultsError("hang_write_of is '<verb> <resource>', e.g. 'patch services'")
        deny = frozenset(str(d) for d in changes.get("deny_writes", self.deny_writes))
        if any(d.count("/") != 1 for d in deny):
            raise FaultsError("deny_writes entries are resource/name")
        deny_by = str(changes.get("deny_by", self.deny_by))
        if deny_by not in DENIERS:
            raise FaultsError(f"deny_by must be one of {', '.join(DENIERS)}")
        with self._lock:
            self.deny_writes = deny
            self.deny_message = str(changes.get("deny_message", self.deny_message))
            self.deny_by = deny_by
            self.stall_watches = bool(changes.get("stall_watches", self.stall_watches))
            self.hang_write_of = None if hang_of is None else str(hang_of)
            self.error_rate, self.error_codes = rate, codes
            self.retry_after_seconds, self.latency_ms = retry_after, latency
            self.disabled_groups = groups
            if "fail_nth_write" in changes:
                self.fail_nth_write = None if nth is None else int(nth)
                self._writes_left = self.fail_nth_write
            if "seed" in changes:
                self.seed = int(changes["seed"])
                self._rng = random.Random(self.seed)
            if "hang_nth_write" in changes:
                self._release.set()  # let a held answer go before arming the hook again
                self._release, self._held = threading.Event(), threading.Event()
                self.hang_nth_write = None if hang is None else int(hang)
                self._hang_left = self.hang_nth_write
        return self.snapshot()

    def reset(self) -> dict[str, Any]:
        """Back to no faults at all."""
        return self.update(error_rate=0.0, error_codes=list(INJECTABLE_CODES),
                           retry_after_seconds=1, latency_ms=0.0, fail_nth_write=None,
                           disabled_groups=[], hang_nth_write=None, hang_write_of=None,
                           deny_writes=[], deny_message="denied by policy", deny_by="policy",
                           stall_watches=False)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "error_rate": self.error_rate,
                "error_codes": list(self.error_codes),
                "retry_after_seconds": self.retry_after_seconds,
                "latency_ms": self.latency_ms,
                "fail_nth_write": self._writes_left,
                "disabled_groups": sorted(self.disabled_groups),
                "seed": self.seed,
                "hang_nth_write": self._hang_left,
                "write_held": self._held.is_set(),
                "hang_write_of": self.hang_write_of,
                "deny_writes": sorted(self.deny_writes),
                "deny_message": self.deny_message,
                "deny_by": self.deny_by,
                "stall_watches": self.stall_watches,
            }

    def group_disabled(self, group: str) -> bool:
        with self._lock:
            return bool(group) and group in self.disabled_groups

    def denied(self, resource: str, name: str) -> tuple[str, str] | None:
        """(who denies: `DENIERS`, its message) when a write of this object is denied, else
        None."""
        with self._lock:
            if f"{resource}/{name}" not in self.deny_writes:
                return None
            return self.deny_by, self.deny_message

    def stalled(self) -> bool:
        with self._lock:
            return self.stall_watches

    def latency_seconds(self) -> float:
        with self._lock:
            return self.latency_ms / 1000.0

    def pick_error(self, *, counts_as_write: bool) -> int | None:
        """The status code to fail this request with, or None to serve it.

        A write (a mutating request that would change the store) moves the `fail_nth_write`
        countdown; when it reaches zero that write fails with 500, once.
        """
        with self._lock:
            if counts_as_write and self._writes_left is not None:
                self._writes_left -= 1
                if self._writes_left <= 0:
                    self._writes_left = None
                    self.fail_nth_write = None
                    return 500
            if self.error_rate > 0 and self._rng.random() < self.error_rate:
                return self._rng.choice(self.error_codes)
            return None

    def after_write(self, kind: str) -> bool:
        """Called once a write (`kind`: "<verb> <resource>") has been applied, before its answer
        is sent: holds the answer of the `hang_nth_write`-th such write (of `hang_write_of`, if
        set) until the hook is cleared (or HOLD_LIMIT_SECONDS). True for the write it held (the
        request log marks it)."""
        with self._lock:
            if self._hang_left is None or self.hang_write_of not in (None, kind):
                return False
            self._hang_left -= 1
            if self._hang_left > 0:
                return False
            self._hang_left = None
            release = self._release
            self._held.set()
        release.wait(HOLD_LIMIT_SECONDS)
        return True

    def wait_held(self, timeout: float) -> bool:
        """In process: block until a write's answer is being held; False after `timeout` s."""
        with self._lock:
            held = self._held
        return held.wait(timeout)

    def release_held(self) -> None:
        """Let a held answer go (the hook stays cleared)."""
        self.update(hang_nth_write=None)
