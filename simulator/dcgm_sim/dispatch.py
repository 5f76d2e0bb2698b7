"""One request through the server's pipeline: authenticate, authorise, inject faults, serve.

Order as on a real server: the bearer token names the user (401 if unknown); impersonation
headers, if the caller may use them, replace it (`impersonation`); the request is
authorised (403 with the authorizer's sentence): `system:masters` may do anything, everyone else
is judged by the RBAC objects in the store at that moment (`access`, `rbac`), discovery and the
reviews included (the bootstrap roles grant them to `system:authenticated`); then this sim's
faults (latency, a random 500/503/429, the Nth write failing) apply; then discovery or the
resource handler runs (and `Faults.after_write` may hold a successful write's answer: the
crash-test hook).
`/sim/v1/*` (the sim's own control endpoints) skips all of it and is not logged.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from dcgm_sim import (
    discovery,
    eventsapi,
    faults,
    handlers,
    impersonation,
    kinds,
    openapi,
    routing,
    simendpoints,
)
from dcgm_sim.access import Attributes, Policy, forbidden_reason
from dcgm_sim.exchange import Backend, Request, Response, error_response, json_response
from dcgm_sim.routing import RequestInfo
from dcgm_sim.statuses import (
    ApiError,
    forbidden,
    internal_error,
    method_not_allowed,
    no_such_path,
    not_acceptable,
    service_unavailable,
    too_many_requests,
    unauthorized,
)


@dataclass
class Audit:
    """What the request log needs to know about a request once it is answered."""

    info: RequestInfo
    user: str = ""
    dry_run: bool = False
    held_answer: bool = False  # the crash-test hook held this write's answer (faults.py)


def _token(req: Request) -> str:
    scheme, _, token = req.header("authorization").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _is_dry_run(info: RequestInfo, req: Request) -> bool:
    if "dryRun" in info.query:
        return True
    if info.method == "DELETE" and b"dryRun" in req.body:
        try:
            body = json.loads(req.body)
        except ValueError:
            return False
        return isinstance(body, dict) and bool(body.get("dryRun"))
    return False


def _injected(code: int, retry_after: int) -> ApiError:
    if code == 429:
        return too_many_requests(retry_after)
    if code == 503:
        return service_unavailable("the server is currently unable to handle the request "
                                   "(injected fault)")
    return internal_error("injected fault")


def _denial(group: str, resource: str, name: str, by: str, message: str) -> ApiError:
    """A ValidatingAdmissionPolicy's or a webhook's denial as upstream sends it (faults.py,
    `deny_writes`, `deny_by`)."""
    if by == "webhook":
        return ApiError(403, "", f'admission webhook "{faults.DENY_WEBHOOK}" denied the '
                        f"request: {message}")
    said = (f"ValidatingAdmissionPolicy '{faults.DENY_POLICY}' with binding "
            f"'{faults.DENY_POLICY}' denied request: {message}")
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(422, "Invalid", f'{qualified} "{name}" is forbidden: {said}',
                    {"name": name, "group": group, "kind": resource,
                     "causes": [{"message": said}]})


def dispatch(b: Backend, req: Request) -> tuple[Response, Audit | None]:
    """Answer one request; the Audit is None for `/sim/v1` requests (never logged)."""
    info = routing.parse(req.method, req.target)
    if info.path.startswith(simendpoints.PREFIX):
        return simendpoints.handle(b, info, req), None
    audit = Audit(info, dry_run=_is_dry_run(info, req))
    try:
        policy = b.access.policy_for(_token(req))
        if policy is None:
            raise unauthorized()
        audit.user = policy.user
        policy = impersonation.effective_policy(b.access, policy, req)
        audit.user = policy.user
        return _serve(b, info, req, policy, audit), audit
    except ApiError as e:
        return error_response(e), audit


def _serve(b: Backend, info: RequestInfo, req: Request, policy: Policy, audit: Audit) -> Response:
    kind = info.kind
    if info.is_resource:
        if kind is None or b.faults.group_disabled(info.group):
            raise no_such_path()
        attrs = Attributes(policy.user, info.verb, info.group, info.resource,
                           info.subresource, info.namespace, routing.authz_name(info))
        if not policy.decide(attrs).allowed:
            raise forbidden(kind, info.resource, attrs.name, forbidden_reason(attrs))
    else:
        attrs = Attributes(policy.user, info.method.lower(), path=info.path)
        if not policy.decide(attrs).allowed:  # status.NewForbidden with no resource
            raise ApiError(403, "Forbidden", f"forbidden: {forbidden_reason(attrs)}", {})
    latency = b.faults.latency_seconds()
    if latency > 0:
        time.sleep(latency)
    counts_as_write = (info.is_resource and info.mutating and not audit.dry_run
                       and kind not in kinds.ACCESS_REVIEWS)
    code = b.faults.pick_error(counts_as_write=counts_as_write)
    if code is not None:
        raise _injected(code, b.faults.snapshot()["retry_after_seconds"])
    denial = (b.faults.denied(info.resource, info.name)
              if counts_as_write and info.name and kind is not None else None)
    if denial is not None and kind is not None:
        raise _denial(kind.group, info.resource, info.name, *denial)
    if info.is_resource:
        if kind is not None and kind.key == kinds.EVENTS_V1.key:  # core Events, converted
            core_info, core_req = eventsapi.core_request(info, req)
            response = eventsapi.answer(handlers.handle(b, core_info, core_req, policy))
        elif counts_as_write and b.write_latency is not None:
            response = b.write_latency.serve(lambda: handlers.handle(b, info, req, policy))
        else:
            response = handlers.handle(b, info, req, policy)
        if counts_as_write and response.code < 400:
            # the crash-test hook may hold this answer back
            audit.held_answer = b.faults.after_write(f"{info.verb} {info.resource}")
        return response
    return _non_resource(b, info, req)


def _openapi(info: RequestInfo, req: Request, disabled: list[str]) -> Response:
    """`/openapi/v2` (JSON only: 406 for a protobuf-only Accept, as client-go's
    `OpenAPISchema` sends) and `/openapi/v3[/<group-version>]`."""
    parts = info.parts
    if parts == ("openapi", "v2"):
        if not openapi.accepts_json(req.header("accept")):
            raise not_acceptable()
        return Response(200, openapi.v2_document(disabled))
    if parts == ("openapi", "v3"):
        return json_response(200, openapi.v3_discovery(disabled))
    target = openapi.v3_target(parts) if parts[1] == "v3" else None
    data = None if target is None else openapi.v3_document(*target, disabled=disabled)
    if data is None:
        raise no_such_path()
    return Response(200, data)


def _non_resource(b: Backend, info: RequestInfo, req: Request) -> Response:
    if info.method not in ("GET", "HEAD"):
        raise method_not_allowed()
    disabled = b.faults.snapshot()["disabled_groups"]
    parts = info.parts
    if len(parts) >= 2 and parts[0] == "openapi":
        return _openapi(info, req, disabled)
    doc = None
    if parts == ("version",):
        doc = discovery.version_info(b.encoder.release)
    elif parts in (("healthz",), ("livez",), ("readyz",)):
        return Response(200, b"ok", content_type="text/plain; charset=utf-8")
    elif parts == ("api",):
        doc = discovery.api_versions(b.address)
    elif parts == ("apis",):
        doc = discovery.api_group_list(disabled)
    elif len(parts) == 2 and parts[0] == "api":
        doc = discovery.resource_list("", parts[1], disabled)
    elif len(parts) == 2 and parts[0] == "apis":
        doc = discovery.api_group(parts[1], disabled)
    elif len(parts) == 3 and parts[0] == "apis":
        doc = discovery.resource_list(parts[1], parts[2], disabled)
    if doc is None:
        raise no_such_path()
    return json_response(200, doc)
