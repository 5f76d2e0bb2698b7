"""Typed errors and the table mapping them to exit codes (docs/design.md, "Command line"); only
the CLI catches them. Kubernetes transport errors are wrapped with the original as `__cause__`."""

from __future__ import annotations


class MigrateError(Exception):
    """Base: one clear sentence (`message`) plus what to do about it (`hint`)."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(MigrateError):
    """Exit 2: the user asked for something invalid; nothing was written."""


class GateFailed(MigrateError):
    """Exit 1: a gate did not hold; the run stopped with nothing half-done."""


class LockHeld(MigrateError):
    """Exit 4: another run holds the state lock."""


class StalePlan(MigrateError):
    """Exit 4: the saved plan no longer matches the cluster."""


class StateConflict(MigrateError):
    """Exit 4: the state ConfigMap was changed by someone else between our read and write."""


class ClusterError(MigrateError):
    """Exit 3: the cluster could not be read or written as needed."""


class StateCorrupt(ClusterError):
    """The state ConfigMap was hand-edited, truncated or belongs to something else."""


class APIError(ClusterError):
    """The API server answered with an error Status (`causes`: its details, "field: message")."""

    def __init__(self, message: str, hint: str = "", *, status: int = 0, reason: str = "",
                 causes: tuple[str, ...] = ()) -> None:
        super().__init__(message, hint)
        self.status = status
        self.reason = reason
        self.causes = causes


class APINotFound(APIError):
    """404 NotFound."""


class APIConflict(APIError):
    """409 Conflict (stale resourceVersion) or AlreadyExists."""


class APIAlreadyExists(APIConflict):
    """409 AlreadyExists on a create; `after_retry`: an earlier attempt of this create failed in
    transit, so the object may be this call's own (read and compare)."""

    def __init__(self, message: str, hint: str = "", *, status: int = 409,
                 reason: str = "AlreadyExists", after_retry: bool = False) -> None:
        super().__init__(message, hint, status=status, reason=reason)
        self.after_retry = after_retry


class WatchExpired(APIError):
    """410 Gone/Expired: the watch (or list continue token) is too old; list again."""


class APIForbidden(APIError):
    """403 Forbidden: RBAC does not allow the request."""


class APIWebhookDenied(APIForbidden):
    """403 from a validating admission webhook that refused the change (not a permission)."""


class APIInvalid(APIError):
    """422 Invalid: the server rejected the object; `causes` says why."""


class APITestFailed(APIInvalid):
    """422 from a JSON patch whose `test` failed: the object changed; read it and re-decide."""


class APIUnreachable(ClusterError):
    """No answer from the API server within the retry budget."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run (exit 128 + the signal), raised only between writes
    (engine/interrupts.py); a KeyboardInterrupt so Ctrl-C's cleanup runs for both."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.name = name
        self.exit_code = 128 + signum


_EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (GateFailed, 1), (UsageError, 2), (LockHeld, 4), (StalePlan, 4), (StateConflict, 4))


def exit_code_for(error: BaseException) -> int:
    """The documented exit code of an error (3 for anything else)."""
    return next((code for cls, code in _EXIT_CODES if isinstance(error, cls)), 3)
