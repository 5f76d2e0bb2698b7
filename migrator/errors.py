"""Typed errors and the one table that maps them to exit codes (docs/design.md, "Command line").

Every layer raises these; only the CLI catches them, prints `message` and `hint`, and exits
with `exit_code_for(error)`. Transport errors from the Kubernetes client are wrapped at the
kube choke point with the original kept as `__cause__`.
"""

from __future__ import annotations


class MigrateError(Exception):
    """Base: one clear sentence (`message`) plus what to do about it (`hint`)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


# ---- exit 2: bad input or usage -------------------------------------------------------------
class UsageError(MigrateError):
    """The user asked for something invalid; nothing was written."""


# ---- exit 1: a gate stopped the run safely ---------------------------------------------------
class GateFailed(MigrateError):
    """A precondition or postcondition did not hold; the run stopped with nothing half-done."""


# ---- exit 4: someone else's run or a stale plan ----------------------------------------------
class LockHeld(MigrateError):
    """Another run holds the state lock."""


class StalePlan(MigrateError):
    """The saved plan no longer matches the cluster."""


class StateConflict(MigrateError):
    """The state ConfigMap was changed by someone else between our read and our write."""


# ---- exit 3: cluster/API error -----------------------------------------------------------------
class ClusterError(MigrateError):
    """The cluster could not be read or written as needed."""


class StateCorrupt(ClusterError):
    """The state ConfigMap was hand-edited, truncated or belongs to something else."""


class APIError(ClusterError):
    """The API server answered with an error Status."""

    def __init__(self, message: str, hint: str = "", *, status: int = 0, reason: str = "",
                 causes: tuple[str, ...] = ()) -> None:
        super().__init__(message, hint)
        self.status = status
        self.reason = reason
        self.causes = causes  # the Status' details.causes, each "field: message"


class APINotFound(APIError):
    """404 NotFound."""


class APIConflict(APIError):
    """409 Conflict (stale resourceVersion) or AlreadyExists."""


class APIAlreadyExists(APIConflict):
    """409 AlreadyExists on a create (`reason` "AlreadyExists").

    `after_retry` is True when an earlier attempt of this same create failed in transit: the
    object may then be the one this very call created, so the caller should read and compare.
    """

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        status: int = 409,
        reason: str = "AlreadyExists",
        after_retry: bool = False,
    ) -> None:
        super().__init__(message, hint, status=status, reason=reason)
        self.after_retry = after_retry


class WatchExpired(APIError):
    """410 Gone/Expired: the watch (or list continue token) is too old; list again."""


class APIForbidden(APIError):
    """403 Forbidden: RBAC does not allow the request."""


class APIInvalid(APIError):
    """422 Invalid: the server rejected the object (a field's validation, an immutable field,
    an admission policy's denial); `causes` says which."""


class APITestFailed(APIInvalid):
    """422 from a JSON patch whose `test` operation failed: the object is no longer what the
    patch was decided on. Not a refusal of the change itself: read it again and re-decide."""


class APIUnreachable(ClusterError):
    """No answer from the API server within the retry budget."""


# ---- exit 130 / 143: stopped by a signal ----------------------------------------------------
class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM (a Job eviction, `timeout`, a pod deletion) stopped the run.

    A KeyboardInterrupt, so everything that cleans up after Ctrl-C (the run session releasing
    its lock, the caches closing their watches) cleans up after SIGTERM the same way. Raised
    only between writes: a write in flight and the state save recording it finish first
    (`engine/interrupts.py`). The exit code is 128 + the signal number.
    """

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (GateFailed, 1),
    (UsageError, 2),
    (LockHeld, 4),
    (StalePlan, 4),
    (StateConflict, 4),
    (ClusterError, 3),
    (MigrateError, 3),
)


def exit_code_for(error: BaseException) -> int:
    """The documented exit code of an error (3 for anything unexpected)."""
    for cls, code in _EXIT_CODES:
        if isinstance(error, cls):
            return code
    return 3
