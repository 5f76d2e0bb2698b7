"""An API server's error answer (a `Status`) as the tool's typed errors: the server's own
sentence as the message, a hint of what to do."""

from __future__ import annotations

import json
from typing import Any

from migrator.errors import (
    APIAlreadyExists,
    APIConflict,
    APIError,
    APIForbidden,
    APIInvalid,
    APINotFound,
    APITestFailed,
    WatchExpired,
)


def parse_status(body: bytes) -> dict[str, Any]:
    """The `Status` object in an error body, or {} when the body is not one."""
    try:
        doc = json.loads(body.decode("utf-8", "replace")) if body else None
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _causes(status: dict[str, Any]) -> list[dict[str, Any]]:
    details = status.get("details")
    found = details.get("causes") if isinstance(details, dict) else None
    return [c for c in found or () if isinstance(c, dict)]


def causes(status: dict[str, Any]) -> tuple[str, ...]:
    """The Status' `details.causes`, each as "field: message" (what an Invalid answer lists)."""
    return tuple(f"{c.get('field') or ''}: {c.get('message') or ''}".lstrip(": ")
                 for c in _causes(status))


def failed_test(status: dict[str, Any]) -> bool:
    """Is this 422 a JSON patch's failed `test` ("testing value <path> failed", in a cause or the
    message), not a refusal of the change?"""
    texts = [str(c.get("message") or "") for c in _causes(status)]
    texts.append(str(status.get("message") or ""))
    return any(t.startswith("testing value ") or ": testing value " in t for t in texts)


_PLAIN: dict[int, tuple[type[APIError], str, str]] = {  # code: error, hint, default reason
    404: (APINotFound, "check the namespace and that the object exists", ""),
    409: (APIConflict, "the object changed while the tool was working; run the command again",
          "Conflict"),
    403: (APIForbidden, "ask a cluster admin for that permission; `dcgm-migrate preflight` "
          "lists all it needs", "Forbidden"),
    410: (WatchExpired, "list again and watch from the new resourceVersion", "Expired"),
}


def error_for(code: int, body: bytes, *, method: str, path: str,
              after_retry: bool = False) -> APIError:
    """The typed error for a non-2xx answer to `method path`."""
    status = parse_status(body)
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
        return APIForbidden(
            f"The API server rejected the credentials ({method} {path}: HTTP 401 Unauthorized).",
            "refresh the credentials in your kubeconfig (for example log in again)",
            status=code, reason=reason or "Unauthorized")
    if code in _PLAIN:
        error, hint, default_reason = _PLAIN[code]
        return error(message, hint, status=code, reason=reason or default_reason)
    if code == 422 and failed_test(status):
        return APITestFailed(message, "the object changed meanwhile: read it again", status=code,
                             reason=reason or "Invalid", causes=causes(status))
    if code == 422:
        unsaid = [c for c in causes(status) if c.split(": ", 1)[-1] not in message]
        if unsaid:
            message = f"{message[:-1]}: {'; '.join(unsaid)}."
        return APIInvalid(
            message, "the API server refuses this change (a value it does not accept, a field "
            "that may not change, or an admission policy, as its message says); change the "
            "object or the policy, then run again",
            status=code, reason=reason or "Invalid", causes=causes(status))
    return APIError(message, "check the API server's health (kubectl get --raw /readyz) and run "
                    "the command again", status=code, reason=reason)
