"""Create, update, patch and delete with the real server's semantics, on the store, without HTTP.

The HTTP handlers call these; so may in-process code (seeding, tests) that wants objects to
go through the same admission a client's write would (defaults, Service allocation). Each
operation holds the store lock from read to write, so a patch or an update without a
resourceVersion never fails on a race it did not cause (the real server retries those).
Errors are `ApiError`s carrying the real Status reason and code.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dcgm_sim import admission, allocation, kinds, patching
from dcgm_sim import finalizers as F
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import Kind, ResourceName
from dcgm_sim.statuses import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    from_store,
    namespace_not_found,
    not_found,
    unsupported_media_type,
)
from dcgm_sim.store import Store, StoreError, now_rfc3339

Obj = dict[str, Any]
# Admission plugins that need the requester (openshift.admit_request): (kind, new, old) → new.
Plugins = Callable[[Kind, Obj, Obj | None], Obj]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
_CUSTOM_GROUPS = ("nvidia.com", "monitoring.coreos.com")
# Registries that answer DELETE with the object (ReturnDeletedObject); the rest send a Status.
RETURNS_DELETED = (kinds.POD, kinds.SERVICE, kinds.NAMESPACE, kinds.CRD)


@dataclass(frozen=True)
class DeleteOptions:
    grace_seconds: int | None = None
    propagation: str | None = None  # Orphan | Background | Foreground
    uid: str | None = None
    resource_version: str | None = None


def _check_identity(kind: Kind, body: Any, namespace: str, name: str | None) -> Obj:
    if not isinstance(body, dict):
        raise bad_request(f"the object provided is unrecognized (must be of type {kind.kind})")
    if body.get("kind") not in (None, "", kind.kind):
        raise bad_request(f"the object provided is unrecognized (must be of type {kind.kind}): "
                          f"kind {body.get('kind')!r}")
    if body.get("apiVersion") not in (None, "", kind.api_version):
        raise bad_request(f"the API version in the data ({body.get('apiVersion')}) does not "
                          f"match the expected API version ({kind.api_version})")
    # A shallow copy with its own `metadata`: only metadata is written to before admission
    # (`admission.admit`), which copies the whole body before it defaults anything. A deep
    # copy here and another in the store were two thirds of the sim's time per write (a
    # 100-endpoint EndpointSlice: 13 ms), charged to every client as API latency.
    body = dict(body)
    meta = body.get("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be an object")
    meta = body["metadata"] = dict(meta)
    if kind.namespaced:
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the "
                              "namespace sent on the request")
        meta["namespace"] = namespace
    if name is not None and meta.get("name") != name:
        raise bad_request(f"the name of the object ({meta.get('name')}) does not match the "
                          f"name on the URL ({name})")
    out: Obj = body
    return out


def _check_namespace(store: Store, namespace: str, kind: Kind) -> None:
    ns = store.find(kinds.NAMESPACE, None, namespace)
    if ns is None:
        raise namespace_not_found(namespace)
    if ns["metadata"].get("deletionTimestamp"):
        raise forbidden(kind, kind.plural, "", f"unable to create new content in namespace "
                        f"{namespace} because it is being terminated")


def _allocated(store: Store, kind: Kind, current: Obj | None) -> allocation.Allocated | None:
    if kind != kinds.SERVICE:
        return None
    services, _ = store.list(kinds.SERVICE)
    uid = current["metadata"].get("uid", "") if current else ""
    return allocation.allocated_by(services, excluding_uid=uid, network=store.network)


def create(store: Store, kind: ResourceName, body: Any, *, namespace: str = "",
           dry_run: bool = False, plugins: Plugins | None = None) -> Obj:
    """POST: admission, then store; 409 AlreadyExists, 404 for a missing namespace."""
    kind = kinds.resolve(kind)
    body = _check_identity(kind, body, namespace, None)
    # `FillObjectMetaSystemFields` runs before the strategy's `PrepareForCreate`: admission
    # sees the uid the object will have (a Job's generated selector names it).
    uid = str(uuid.uuid4())
    body["metadata"]["uid"] = uid
    with store.lock:
        if kind.namespaced:
            _check_namespace(store, namespace, kind)
        obj = admission.admit(kind, body, None, allocated=_allocated(store, kind, None))
        if plugins is not None:
            obj = plugins(kind, obj, None)
        name = obj["metadata"].get("name", "")
        try:  # `admit` answered a copy of its own: the store keeps it (`adopt`)
            return store.create(kind, obj, dry_run=dry_run, adopt=True, uid=uid)
        except StoreError as e:
            if e.reason == "AlreadyExists":
                raise already_exists(kind, name) from e
            raise from_store(e, kind, name) from e


def _current(store: Store, kind: Kind, namespace: str, name: str) -> Obj:
    obj = store.find(kind, namespace or None, name)
    if obj is None:
        raise not_found(kind, name)
    return obj


def _store_update(store: Store, kind: Kind, new: Obj, current: Obj, subresource: str,
                  dry_run: bool, plugins: Plugins | None = None) -> Obj:
    name = current["metadata"]["name"]
    sent_rv = new["metadata"].get("resourceVersion")
    if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
        raise conflict(kind, name)
    admitted = subresource != "status"
    if admitted:
        new = admission.admit(kind, new, current, allocated=_allocated(store, kind, current))
        if plugins is not None:
            new = plugins(kind, new, current)
        grace = current["metadata"].get("deletionGracePeriodSeconds")
        if grace is not None:
            new["metadata"]["deletionGracePeriodSeconds"] = grace
    try:  # an admitted body is admission's own copy; a status body is still the caller's
        return store.update(kind, new, subresource=subresource or None, dry_run=dry_run,
                            adopt=admitted)
    except StoreError as e:
        raise from_store(e, kind, name) from e


def update(store: Store, kind: ResourceName, body: Any, *, namespace: str, name: str,
           subresource: str = "", dry_run: bool = False, plugins: Plugins | None = None) -> Obj:
    """PUT: 404 when absent, 409 Conflict on a stale resourceVersion, 422 when invalid."""
    kind = kinds.resolve(kind)
    body = _check_identity(kind, body, namespace, name)
    with store.lock:
        current = _current(store, kind, namespace, name)
        return _store_update(store, kind, body, current, subresource, dry_run, plugins)


def patch_media(kind: Kind, content_type: str) -> str:
    """The patch format named by `content_type`; 415 when this kind does not accept it."""
    media = content_type.split(";")[0].strip().lower()
    if media in (JSON_PATCH, MERGE_PATCH) or (
            media == STRATEGIC_PATCH and kind.group not in _CUSTOM_GROUPS):
        return media
    raise unsupported_media_type(content_type)


def apply_patch(kind: Kind, current: Obj, content_type: str, patch: Any) -> Obj:
    """The patched object (pure); 415 for a patch type this kind does not accept."""
    media = patch_media(kind, content_type)
    try:
        if media == JSON_PATCH:
            result = patching.json_patch(current, patch)
        elif not isinstance(patch, dict):
            raise bad_request("json: cannot unmarshal array into Go value of type "
                              "map[string]interface {}")
        elif media == MERGE_PATCH:
            result = patching.merge_patch(current, patch)
        else:
            result = patching.strategic_merge(current, patch)
    except patching.PatchError as e:
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our "
                       f"request: {e}", {"causes": [{"reason": "UnexpectedServerResponse",
                                                     "message": str(e)}]}) from e
    if not isinstance(result, dict):
        raise bad_request("the patch did not produce an object")
    return result


def patch(store: Store, kind: ResourceName, content_type: str, body: Any, *, namespace: str,
          name: str, subresource: str = "", dry_run: bool = False,
          plugins: Plugins | None = None) -> Obj:
    """PATCH: apply to the current object and update it atomically (404/409/415/422)."""
    kind = kinds.resolve(kind)
    with store.lock:
        current = _current(store, kind, namespace, name)
        patched = apply_patch(kind, clone(current), content_type, body)
        patched = _check_identity(kind, patched, namespace, name)
        return _store_update(store, kind, patched, current, subresource, dry_run, plugins)


def _check_preconditions(kind: Kind, current: Obj, options: DeleteOptions) -> None:
    meta = current["metadata"]
    name = meta["name"]
    if options.uid and options.uid != meta.get("uid"):
        raise conflict(kind, name, f"Precondition failed: UID in precondition: {options.uid}, "
                       f"UID in object meta: {meta.get('uid')}")
    if options.resource_version and options.resource_version != meta.get("resourceVersion"):
        raise conflict(kind, name, "Precondition failed: ResourceVersion in precondition: "
                       f"{options.resource_version}, ResourceVersion in object meta: "
                       f"{meta.get('resourceVersion')}")


def _pod_grace(current: Obj, options: DeleteOptions) -> int:
    spec = current.get("spec") or {}
    if not spec.get("nodeName") or (current.get("status") or {}).get("phase") in (
            "Succeeded", "Failed"):
        return 0  # never ran or already finished: nothing to wait for
    if options.grace_seconds is not None:
        return max(0, options.grace_seconds)
    configured = spec.get("terminationGracePeriodSeconds")
    return 30 if configured is None else max(0, int(configured))


def delete(store: Store, kind: ResourceName, *, namespace: str, name: str,
           options: DeleteOptions = DeleteOptions(), dry_run: bool = False) -> Obj:
    """DELETE, as the registry store's `Delete` (apiserver/pkg/registry/generic/registry/
    store.go): the object as deleted, or as marked when it stays.

    A pod with a grace period is marked (`deletionTimestamp`, `deletionGracePeriodSeconds`) and
    left to the simulated kubelet; a repeated DELETE only shortens that to 0 (force). The
    propagation policy sets the GC finalizers (`finalizers.for_deletion`: `orphan`,
    `foregroundDeletion`); an object left with any finalizer is marked (grace 0) and stays until
    an update removes the last one; anything else is removed at once.
    """
    kind = kinds.resolve(kind)
    with store.lock:
        current = _current(store, kind, namespace, name)
        _check_preconditions(kind, current, options)
        ns = namespace or None
        meta = current["metadata"]
        grace = _pod_grace(current, options) if kind == kinds.POD else 0
        pending = int(meta.get("deletionGracePeriodSeconds") or 0) if meta.get(
            "deletionTimestamp") else 0
        if pending > 0 and grace > 0:
            return current  # graceful deletion pending: finalizers cannot change meanwhile
        existing = list(meta.get("finalizers") or [])
        wanted = existing if pending > 0 else F.for_deletion(existing, options.propagation)
        if grace > 0 or wanted:
            if dry_run:
                marked = clone(current)
                marked["metadata"].setdefault("deletionTimestamp", now_rfc3339())
                marked["metadata"]["deletionGracePeriodSeconds"] = grace
                marked["metadata"]["finalizers"] = wanted
                return marked
            return store.mark_deleting(kind, ns, name, grace, wanted)
        if existing and not dry_run:
            store.mark_deleting(kind, ns, name, 0, [])  # the GC finalizers go first
        return store.delete(kind, ns, name, dry_run=dry_run)
