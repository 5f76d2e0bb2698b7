"""`Status` error bodies as the real API server writes them, and the exception that carries one.

Clients branch on `reason` and `code` (the official client's `ApiException.status`, kubectl's
error text), so these copy the real wording: `apimachinery/pkg/api/errors` for the reasons and
`apimachinery/pkg/util/validation/field` for the field errors inside 422 Invalid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim.kinds import Kind
from dcgm_sim.store import StoreError

Obj = dict[str, Any]


class ApiError(Exception):
    """A failed request: the HTTP code, the `Status` reason and message, optional details."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Obj | None = None,
        headers: dict[str, str] | None = None,
        list_meta: Obj | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.list_meta = list_meta or {}  # Status.metadata (a ListMeta: e.g. `continue`)

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # `omitempty`: a webhook's denial may have none
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def qualified(kind: Kind) -> str:
    """`pods`, `daemonsets.apps`: how error messages name a resource."""
    return kind.key


def _details(kind: Kind, name: str) -> Obj:
    details: Obj = {}
    if name:
        details["name"] = name
    if kind.group:
        details["group"] = kind.group
    details["kind"] = kind.plural
    return details


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(kind)} "{name}" not found', _details(kind, name))


def namespace_not_found(namespace: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'namespaces "{namespace}" not found',
        {"name": namespace, "kind": "namespaces"},
    )


def no_such_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(kind: Kind, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{qualified(kind)} "{name}" already exists', _details(kind, name)
    )


def conflict(kind: Kind, name: str, why: str = "") -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version and "
        "try again"
    )
    return ApiError(
        409, "Conflict", f'Operation cannot be fulfilled on {qualified(kind)} "{name}": {why}',
        _details(kind, name),
    )


def forbidden(kind: Kind | None, resource: str, name: str, why: str) -> ApiError:
    what = qualified(kind) if kind else resource
    message = f'{what} "{name}" is forbidden: {why}' if name else f"{what} is forbidden: {why}"
    details: Obj = {"name": name} if name else {}
    if kind and kind.group:
        details["group"] = kind.group
    details["kind"] = kind.plural if kind else resource
    return ApiError(403, "Forbidden", message, details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
        {},
    )


def not_acceptable() -> ApiError:
    """406: no media type the client accepts (the OpenAPI v2 document is JSON only here)."""
    return ApiError(406, "NotAcceptable",
                    "only the following media types are accepted: application/json")


def unsupported_media_type(content_type: str) -> ApiError:
    if "patch" in content_type:
        accepted = ("application/json-patch+json, application/merge-patch+json, "
                    "application/strategic-merge-patch+json")
    else:
        accepted = "application/json"
    return ApiError(
        415, "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{accepted} (the simulated server reads no {content_type!r})",
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def too_many_requests(retry_after: int) -> ApiError:
    return ApiError(
        429, "TooManyRequests", "Too many requests, please try again later.",
        {"retryAfterSeconds": retry_after}, {"Retry-After": str(retry_after)},
    )


def internal_error(why: str) -> ApiError:
    return ApiError(
        500, "InternalError", f"Internal error occurred: {why}", {"causes": [{"message": why}]}
    )


def service_unavailable(why: str) -> ApiError:
    return ApiError(503, "ServiceUnavailable", why)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


# apiserver/pkg/storage/etcd3/errors.go: a list (or a continue token) from a compacted revision.
LIST_TOO_OLD = "The resourceVersion for the provided list is too old."
CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list.")


def continue_expired(token: str) -> ApiError:
    """410 for an expired continue token, carrying a token (resourceVersion -1) that continues
    the list at the latest version: etcd3 `handleCompactedErrorForPaging`."""
    return ApiError(410, "Expired", CONTINUE_TOO_OLD, list_meta={"continue": token})


def from_store(error: StoreError, kind: Kind, name: str) -> ApiError:
    """Re-raise a store refusal with the details block the real server adds."""
    if error.code == 422:
        return ApiError(422, "Invalid", error.message, {"name": name, "kind": kind.kind})
    return ApiError(error.code, error.reason, error.message, _details(kind, name))


# ---- 422 Invalid: field errors --------------------------------------------------------------

_CAUSE_TYPES = {
    "Invalid": ("FieldValueInvalid", "Invalid value"),
    "Required": ("FieldValueRequired", "Required value"),
    "Duplicate": ("FieldValueDuplicate", "Duplicate value"),
    "Forbidden": ("FieldValueForbidden", "Forbidden"),
    "NotSupported": ("FieldValueNotSupported", "Unsupported value"),
    "TooLong": ("FieldValueTooLong", "Too long"),
    "TooMany": ("FieldValueTooMany", "Too many"),
}


def _show(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: `spec.x: Invalid value: "v": detail`."""

    type: str  # a key of _CAUSE_TYPES
    field: str
    detail: str = ""
    value: Any = None
    show_value: bool = True

    def body(self) -> str:
        label = _CAUSE_TYPES[self.type][1]
        if self.type in ("Required", "Forbidden", "TooLong"):
            return f"{label}: {self.detail}" if self.detail else label
        text = f"{label}: {_show(self.value)}" if self.show_value else label
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> Obj:
        return {"reason": _CAUSE_TYPES[self.type][0], "message": self.body(), "field": self.field}


@dataclass
class FieldErrors:
    """Collects field errors while validating; `raise_if_any` turns them into 422 Invalid."""

    errors: list[FieldError] = field(default_factory=list)

    def add(self, type_: str, path: str, detail: str = "", value: Any = None) -> None:
        self.errors.append(FieldError(type_, path, detail, value))

    def raise_if_any(self, kind: Kind, name: str) -> None:
        if self.errors:
            raise invalid(kind, name, self.errors)


def invalid(kind: Kind, name: str, errors: list[FieldError]) -> ApiError:
    what = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    joined = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details: Obj = {"name": name}
    if kind.group:
        details["group"] = kind.group
    details["kind"] = kind.kind
    details["causes"] = [e.cause() for e in errors]
    return ApiError(422, "Invalid", f'{what} "{name}" is invalid: {joined}', details)


def success(kind: Kind, name: str, uid: str) -> Obj:
    """The `Status` a delete returns for kinds that do not return the deleted object."""
    details: Obj = {"name": name}
    if kind.group:
        details["group"] = kind.group
    details["kind"] = kind.plural
    details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}
