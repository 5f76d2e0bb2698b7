"""Resource requests: get, list, watch, create, update, patch, delete, deletecollection, and
(Self)SubjectAccessReview, each turned into store operations and a `Response`.

Lists are assembled from cached per-object JSON bytes (see `encoding`) so that paging through
10,000 pods costs little more than copying bytes. Pagination follows the real server's
contract (opaque `continue` token, `remainingItemCount` for unfiltered lists, the first page's
resourceVersion on every page) but later pages read the live store, not a snapshot: an object
created or deleted between pages may or may not show up; none appears twice. A token whose
resourceVersion has left the event window (`--watch-window`) is 410 Expired, with a token that
continues at the latest version, as etcd's compaction makes it on a real cluster.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from typing import Any

from dcgm_sim import (
    fieldselectors,
    kinds,
    labelselectors,
    openapi,
    openshift,
    podlog,
    protobuf,
    tables,
    watching,
    writes,
)
from dcgm_sim.access import Attributes, Policy
from dcgm_sim.encoding import dumps
from dcgm_sim.exchange import Backend, Request, Response, json_response
from dcgm_sim.kinds import Kind
from dcgm_sim.routing import RequestInfo
from dcgm_sim.statuses import (
    LIST_TOO_OLD,
    ApiError,
    bad_request,
    continue_expired,
    expired,
    method_not_allowed,
    no_such_path,
    not_found,
    success,
    unsupported_media_type,
)

Obj = dict[str, Any]


PROTOBUF = "application/vnd.kubernetes.protobuf"


def _body_json(req: Request) -> Any:
    if req.header("content-type").startswith(PROTOBUF):
        if protobuf.kind_of(req.body) != "ConfigMap":  # `kubectl create configmap` sends it
            raise unsupported_media_type(req.header("content-type"))
        try:
            return protobuf.config_map(req.body)
        except (protobuf.ProtobufError, UnicodeDecodeError) as e:
            raise bad_request(f"cannot read the protobuf body: {e}") from e
    if not req.body.strip():
        return None
    try:
        return json.loads(req.body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from e


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def _dry_run(info: RequestInfo, body: Any = None) -> bool:
    values = [info.query["dryRun"]] if "dryRun" in info.query else []
    if isinstance(body, dict) and isinstance(body.get("dryRun"), list):
        values += body["dryRun"]
    for value in values:
        if value != "All":
            raise ApiError(400, "BadRequest", f'dryRun: Unsupported value: "{value}": '
                           'supported values: "All"')
    return bool(values)


def _selectors(info: RequestInfo, kind: Kind) -> tuple[labelselectors.Selector,
                                                      fieldselectors.FieldSelector]:
    try:
        labels = labelselectors.parse(info.query.get("labelSelector"))
    except labelselectors.SelectorError as e:
        raise bad_request(str(e)) from e
    try:
        fields = fieldselectors.parse(info.query.get("fieldSelector"), kind)
    except fieldselectors.FieldSelectorError as e:
        raise bad_request(str(e)) from e
    return labels, fields


def _int_param(info: RequestInfo, name: str) -> int | None:
    raw = info.query.get(name, "")
    if raw == "":
        return None
    try:
        return int(raw)
    except ValueError as e:
        raise bad_request(f"invalid value for {name}: {raw!r}") from e


def handle(b: Backend, info: RequestInfo, req: Request, policy: Policy) -> Response:
    """Serve one resource request for an existing, enabled Kind."""
    kind = info.kind
    assert kind is not None
    if info.namespace and not kind.namespaced and kind != kinds.NAMESPACE:
        raise no_such_path()
    if kind == kinds.POD and info.subresource == "log" and info.name:
        return podlog.serve(b, info)
    if info.subresource and not (info.subresource == "status" and kind.has_status):
        raise no_such_path()
    if kind in kinds.ACCESS_REVIEWS:
        if info.verb != "create" or info.name:
            raise method_not_allowed()
        if kind == kinds.SUBJECT_ACCESS_REVIEW:
            return _subject_access_review(b, req)
        return _access_review(info, req, policy)
    verb = info.verb
    # A Table's `includeObject` is checked where upstream transforms the answer
    # (handlers/response.go `optionsForTransform`): after the read, before anything is sent.
    as_table = tables.wants_table(req.header("accept"))
    if verb == "get":
        obj = _get(b, kind, info)
        if as_table:
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return json_response(200, tables.table(kind, [obj], meta,
                                                   include=tables.include_object(info.query)))
        return Response(200, b.encoder.encode(kind, obj))
    if verb == "list":
        return _list(b, info, kind, as_table=as_table)
    if verb == "watch":
        return _watch(b, info, kind, as_table=as_table)
    if verb == "create":
        if info.name or (kind.namespaced and not info.namespace):
            raise method_not_allowed()
        body = _body_json(req)
        warning = _field_validation(info, kind, body)
        created = writes.create(b.store, kind, body, namespace=info.namespace,
                                dry_run=_dry_run(info), plugins=openshift.plugins(b.store, policy))
        return Response(201, b.encoder.json(created), headers=warning)
    if verb == "update":
        body = _body_json(req)
        warning = _field_validation(info, kind, body)
        updated = writes.update(b.store, kind, body, namespace=info.namespace,
                                name=info.name, subresource=info.subresource,
                                dry_run=_dry_run(info), plugins=openshift.plugins(b.store, policy))
        return Response(200, b.encoder.json(updated), headers=warning)
    if verb == "patch":
        media = writes.patch_media(kind, req.header("content-type"))
        body = _body_json(req)
        warning = {} if media == writes.JSON_PATCH else _field_validation(info, kind, body,
                                                                          patch=True)
        patched = writes.patch(b.store, kind, req.header("content-type"), body,
                               namespace=info.namespace, name=info.name,
                               subresource=info.subresource, dry_run=_dry_run(info),
                               plugins=openshift.plugins(b.store, policy))
        return Response(200, b.encoder.json(patched), headers=warning)
    if verb == "delete":
        return _delete(b, info, req, kind)
    if verb == "deletecollection":
        return _delete_collection(b, info, req, kind)
    raise method_not_allowed()


_FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


def _field_validation(info: RequestInfo, kind: Kind, body: Any, *,
                      patch: bool = False) -> dict[str, str]:
    """`fieldValidation`: Strict refuses a body with fields the kind's schema does not declare
    (400, `openapi.strict_message`), Warn answers them in a `Warning` header; Ignore and no
    parameter at all check nothing. Returns the answer's extra headers."""
    directive = info.query.get("fieldValidation", "")
    if directive not in ("", *_FIELD_VALIDATION):
        raise bad_request(f'fieldValidation: Unsupported value: "{directive}": supported '
                          'values: "Ignore", "Strict", "Warn"')
    if directive in ("", "Ignore"):
        return {}
    unknown = openapi.unknown_fields(kind, body, patch=patch)
    if not unknown:
        return {}
    if directive == "Strict":
        raise bad_request(openapi.strict_message(kind, unknown, patch=patch))
    return {"Warning": openapi.warning_header(unknown)}


def _get(b: Backend, kind: Kind, info: RequestInfo) -> Obj:
    obj = b.store.find(kind, info.namespace or None, info.name)
    if obj is None or _hidden(b, kind, obj):
        raise not_found(kind, info.name)
    return obj


def _hidden(b: Backend, kind: Kind, obj: Obj) -> bool:
    """CRDs of a disabled group are not installed."""
    return kind == kinds.CRD and b.faults.group_disabled((obj.get("spec") or {}).get("group", ""))


# ---- list --------------------------------------------------------------------------------

def _encode_token(rv: int, last: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{last[0]}/{last[1]}\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_token(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        ns, _, name = str(data["start"]).rstrip("\x00").partition("/")
        return int(data["rv"]), (ns, name)
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise bad_request(f"continue key is not valid: {e}") from e


def _selected(b: Backend, info: RequestInfo, kind: Kind) -> tuple[list[Obj], int, bool]:
    """Matching objects sorted by (namespace, name), the store's rv, and whether filtered."""
    labels, fields = _selectors(info, kind)
    name = fieldselectors.required_name(fields)
    key = (kind.key, info.namespace or "", "" if labels.empty else info.query.get(
        "labelSelector", ""), name)
    rv = b.store.resource_version
    cached = b.lists.get(key, rv)
    if cached is not None:
        objects = cached
    else:
        objects, rv = b.store.list(kind, info.namespace or None,
                                   None if labels.empty else labels, name=name)
        b.lists.put(key, rv, objects)
    if fields:
        objects = [o for o in objects if fieldselectors.matches(fields, o)]
    if kind == kinds.CRD:
        objects = [o for o in objects if not _hidden(b, kind, o)]
    return objects, rv, not labels.empty or bool(fields)


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _check_not_compacted(b: Backend, info: RequestInfo, limit: int) -> None:
    """A list at an exact resourceVersion older than the window is 410, as etcd answers for a
    compacted revision (`resourceVersionMatch=Exact`, or a version with a `limit`, which the
    cacher hands to etcd: apiserver/pkg/storage/cacher `shouldDelegateList`). Newer versions
    are served from the latest state (the sim keeps no history)."""
    raw = info.query.get("resourceVersion", "")
    match = info.query.get("resourceVersionMatch", "")
    if raw in ("", "0") or not (match == "Exact" or (not match and limit > 0)):
        return
    try:
        version = int(raw)
    except ValueError as e:
        raise bad_request(f"invalid resource version: {raw!r}") from e
    if b.store.expired(version):
        raise expired(LIST_TOO_OLD)


def _list(b: Backend, info: RequestInfo, kind: Kind, *, as_table: bool = False) -> Response:
    objects, rv, filtered = _selected(b, info, kind)
    limit = _int_param(info, "limit") or 0
    token = info.query.get("continue", "")
    if token:
        token_rv, last = _decode_token(token)
        if token_rv != -1:  # -1: "continue at the latest version" (an expired list's token)
            if b.store.expired(token_rv):
                raise continue_expired(_encode_token(-1, last))
            rv = token_rv
        objects = objects[bisect.bisect_right(objects, last, key=_sort_key):]
    else:
        _check_not_compacted(b, info, limit)
    meta: Obj = {"resourceVersion": str(rv)}
    if 0 < limit < len(objects):
        remaining = len(objects) - limit
        objects = objects[:limit]
        last_meta = objects[-1]["metadata"]
        meta["continue"] = _encode_token(rv, (last_meta.get("namespace", ""), last_meta["name"]))
        if not filtered:
            meta["remainingItemCount"] = remaining
    if as_table:
        return json_response(200, tables.table(kind, objects, meta,
                                               include=tables.include_object(info.query)))
    head = (b'{"kind":"' + kind.list_kind.encode() + b'","apiVersion":"'
            + kind.api_version.encode() + b'","metadata":' + dumps(meta) + b',"items":[')
    items = b",".join(b.encoder.encode(kind, o) for o in objects)
    return Response(200, head + items + b"]}")


# ---- watch -------------------------------------------------------------------------------

def _watch(b: Backend, info: RequestInfo, kind: Kind, *, as_table: bool = False) -> Response:
    labels, fields = _selectors(info, kind)
    if info.name:  # /namespaces/x/pods/name?watch=1: the deprecated single-object form
        fields = (*fields, fieldselectors.FieldRequirement("metadata.name", "=", info.name))
    raw_rv = info.query.get("resourceVersion", "")
    initial_end = info.flag("sendInitialEvents")
    start: int | None = None
    if raw_rv not in ("", "0") and not initial_end:
        try:
            start = int(raw_rv)
        except ValueError as e:
            raise bad_request(f"invalid resource version: {raw_rv!r}") from e
    timeout = _int_param(info, "timeoutSeconds")
    include = tables.include_object(info.query) if as_table else ""
    request = watching.WatchRequest(kind, info.namespace, labels, fields, start,
                                    float(timeout) if timeout else None, initial_end, as_table,
                                    include, info.flag("allowWatchBookmarks"),
                                    b.bookmark_seconds, b.faults.stalled)
    return Response(200, stream=watching.stream(b.store, b.encoder, request, b.stopping))


# ---- delete ------------------------------------------------------------------------------

def _delete_options(info: RequestInfo, body: Any) -> writes.DeleteOptions:
    body = body if isinstance(body, dict) else {}
    grace = body.get("gracePeriodSeconds", _int_param(info, "gracePeriodSeconds"))
    propagation = body.get("propagationPolicy") or info.query.get("propagationPolicy") or None
    if body.get("orphanDependents") is True or info.query.get("orphanDependents") == "true":
        propagation = propagation or "Orphan"
    if propagation not in (None, "Orphan", "Background", "Foreground"):
        raise ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: '
                       f'propagationPolicy: Unsupported value: "{propagation}": supported '
                       'values: "Foreground", "Background", "Orphan", "nil"')
    pre = body.get("preconditions") or {}
    return writes.DeleteOptions(None if grace is None else int(grace), propagation,
                                pre.get("uid"), pre.get("resourceVersion"))


def _deleted_response(b: Backend, kind: Kind, obj: Obj) -> bytes:
    if kind in writes.RETURNS_DELETED or obj["metadata"].get("deletionTimestamp"):
        return b.encoder.json(obj)
    return dumps(success(kind, obj["metadata"]["name"], obj["metadata"].get("uid", "")))


def _delete(b: Backend, info: RequestInfo, req: Request, kind: Kind) -> Response:
    body = _body_json(req)
    options = _delete_options(info, body)
    if kind == kinds.CRD:
        _get(b, kind, info)
    obj = writes.delete(b.store, kind, namespace=info.namespace, name=info.name,
                        options=options, dry_run=_dry_run(info, body))
    return Response(200, _deleted_response(b, kind, obj))


def _delete_collection(b: Backend, info: RequestInfo, req: Request, kind: Kind) -> Response:
    body = _body_json(req)
    options = _delete_options(info, body)
    dry_run = _dry_run(info, body)
    objects, rv, _ = _selected(b, info, kind)
    deleted = []
    for obj in objects:
        meta = obj["metadata"]
        try:
            deleted.append(writes.delete(b.store, kind, namespace=meta.get("namespace", ""),
                                         name=meta["name"], options=options, dry_run=dry_run))
        except ApiError as e:
            if e.code != 404:
                raise
    return json_response(200, {"kind": kind.list_kind, "apiVersion": kind.api_version,
                               "metadata": {"resourceVersion": str(rv)}, "items": deleted})


# ---- SelfSubjectAccessReview --------------------------------------------------------------

def _access_review(info: RequestInfo, req: Request, policy: Policy) -> Response:
    if req.header("content-type").startswith(PROTOBUF):  # `kubectl auth can-i` sends these
        try:
            body: Any = protobuf.self_subject_access_review(req.body)
        except protobuf.ProtobufError as e:
            raise bad_request(f"cannot read the protobuf body: {e}") from e
    else:
        body = _body_json(req)
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise ApiError(422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io "" is '
                       "invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one "
                       "of nonResourceAttributes or resourceAttributes must be specified")
    return _review_answer(kinds.SELF_SUBJECT_ACCESS_REVIEW, body["spec"], policy)


def _review_answer(kind: Kind, spec: Obj, policy: Policy) -> Response:
    """The review with its `status`: what `policy` allows for the attributes in `spec`."""
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        attrs = Attributes(
            policy.user, res.get("verb", ""), res.get("group", ""), res.get("resource", ""),
            res.get("subresource", ""), res.get("namespace", ""), res.get("name", ""))
    else:  # nonResourceAttributes: judged by the same rules (system:discovery, ...)
        non = spec.get("nonResourceAttributes")
        non = non if isinstance(non, dict) else {}
        attrs = Attributes(policy.user, non.get("verb", ""), path=non.get("path", ""))
    decision = policy.decide(attrs)
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    answer = {"kind": kind.kind, "apiVersion": kind.api_version,
              "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}
    return json_response(201, answer)


def _subject_access_review(b: Backend, req: Request) -> Response:
    """May `spec.user` (with exactly `spec.groups`) do this? Judged by the cluster's RBAC
    (`AccessControl.policy_of`); the caller needs `create subjectaccessreviews`, checked like
    any request. Validation as upstream (pkg/apis/authorization/validation)."""
    body = _body_json(req)
    spec = body.get("spec") if isinstance(body, dict) else None
    if not isinstance(spec, dict):
        spec = {}
    errors = []
    if ("resourceAttributes" in spec) == ("nonResourceAttributes" in spec):
        errors.append('spec.resourceAttributes: Invalid value: "null": exactly one of '
                      "nonResourceAttributes or resourceAttributes must be specified")
    user, groups = str(spec.get("user") or ""), [str(g) for g in spec.get("groups") or []]
    if not user and not groups:
        errors.append('spec.user: Invalid value: "": at least one of user or group must be '
                      "specified")
    if errors:
        problems = errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
        raise ApiError(422, "Invalid",
                       f'SubjectAccessReview.authorization.k8s.io "" is invalid: {problems}')
    return _review_answer(kinds.SUBJECT_ACCESS_REVIEW, spec,
                          b.access.policy_of(user, tuple(groups)))
