"""The simulated cluster's object store: the one source of truth, like etcd behind the API server.

It keeps every object as a plain dict (the JSON the real API server would return), assigns the
metadata the real server assigns (`uid`, `resourceVersion`, `generation`, `creationTimestamp`),
enforces optimistic concurrency, and records an event log so watches can resume from a
`resourceVersion`. Controllers subscribe to changes in-process; HTTP clients see the same store
through `server.py`.

Contract (read by the HTTP layer and the controllers):
- Stored dicts are never mutated in place: every write stores a fresh dict. Readers get the
  stored object itself (cheap); a reader that wants to modify one must copy it (`jsoncopy.clone`).
- One global, monotonically increasing resourceVersion (an integer, sent as a string).
- `generation` starts at 1 and moves only when `spec` changes (for kinds with a spec); a
  DaemonSet's template generation likewise (`template_generation`).
- Every mutation calls the subscribers synchronously, under the store lock, with the event.
  Subscribers must be quick (enqueue work) and must not write to the store from the callback.
"""

from __future__ import annotations

import builtins
import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim import finalizers as F
from dcgm_sim import kinds
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import Kind, ResourceName
from dcgm_sim.labelselectors import Selector
from dcgm_sim.network import DEFAULT as DEFAULT_NETWORK
from dcgm_sim.network import Network

Obj = dict[str, Any]

TEMPLATE_GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"


def template_generation(resource: Kind, new: Obj, current: Obj | None) -> None:
    """A DaemonSet's server-owned `deprecated.daemonset.template.generation` annotation, set on
    `new` in place: apps/v1 carries the internal `spec.templateGeneration` in it
    (kubernetes/pkg/apis/apps/v1/conversion.go), which `PrepareForCreate` starts at 1 (or the
    value sent, if higher) and `PrepareForUpdate` (pkg/registry/apps/daemonset/strategy.go)
    keeps, plus one when the pod template changed: a value sent on update is ignored."""
    if resource.kind != "DaemonSet" or resource.group != "apps":
        return
    meta = new["metadata"]
    annotations = dict(meta.get("annotations") or {})
    if current is None:
        sent = str(annotations.get(TEMPLATE_GENERATION_ANNOTATION, "1"))
        generation = max(int(sent), 1) if sent.isdigit() else 1
    else:
        old = current["metadata"]
        raw = str((old.get("annotations") or {}).get(TEMPLATE_GENERATION_ANNOTATION, ""))
        generation = int(raw) if raw.isdigit() else int(old.get("generation") or 1)
        if (new.get("spec") or {}).get("template") != (current.get("spec") or {}).get(
                "template"):
            generation += 1
    annotations[TEMPLATE_GENERATION_ANNOTATION] = str(generation)
    meta["annotations"] = annotations


Resource = Kind
RESOURCES: tuple[Kind, ...] = kinds.ALL
RESOURCES_BY_KEY: dict[str, Kind] = kinds.BY_KEY
RESOURCES_BY_KIND: dict[str, Kind] = kinds.BY_KIND


class StoreError(Exception):
    """A store-level refusal that the HTTP layer turns into a `Status` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def not_found(resource: Resource, name: str) -> StoreError:
    group = resource.group or ""
    what = f"{resource.plural}.{group}" if group else resource.plural
    return StoreError(404, "NotFound", f'{what} "{name}" not found')


def already_exists(resource: Resource, name: str) -> StoreError:
    group = resource.group or ""
    what = f"{resource.plural}.{group}" if group else resource.plural
    return StoreError(409, "AlreadyExists", f'{what} "{name}" already exists')


def conflict(resource: Resource, name: str) -> StoreError:
    group = resource.group or ""
    what = f"{resource.plural}.{group}" if group else resource.plural
    return StoreError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
    )


@dataclass(frozen=True)
class Event:
    """A committed change, as a watch would deliver it."""

    type: str  # ADDED | MODIFIED | DELETED
    resource: Resource
    object: Obj
    resource_version: int
    # The object as it was before a MODIFIED event (None otherwise): lets a filtered watch turn
    # "stopped matching" into DELETED, as the real watch cache does.
    old: Obj | None = None


ObjKey = tuple[str, str]  # (namespace or "", name)


def _taken(obj: Obj, adopt: bool) -> Obj:
    """The object a write stores: a deep copy, or (adopt) a shallow one whose top level and
    `metadata` the store may fill in; stored objects are never mutated either way."""
    return _with_own_metadata(obj) if adopt else clone(obj)


def _with_own_metadata(stored: Obj) -> Obj:
    """A new version of a stored object that differs only in `metadata`: the rest is shared,
    which is safe because stored objects are never mutated (and far cheaper than a deep copy
    of a pod on every graceful deletion)."""
    out = dict(stored)
    out["metadata"] = dict(stored.get("metadata") or {})
    return out


def _key(resource: Resource, namespace: str | None, name: str) -> ObjKey:
    """Cluster-scoped objects live under the empty namespace, whatever the caller passed."""
    return ((namespace or "") if resource.namespaced else "", name)


Subscriber = Callable[[Event], None]


_stamp: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """Wall-clock time to the second, as the API server stamps objects. Formatted once per
    second: every pod start and deletion on a rollout's path asks for it."""
    global _stamp
    second = int(time.time())
    if _stamp[0] != second:
        _stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _stamp[1]


@dataclass
class Store:
    """Thread-safe in-memory object store with an event log for watches."""

    event_log_size: int = 500_000
    lock: threading.RLock = field(default_factory=threading.RLock)
    changed: threading.Condition = field(init=False)  # notified on every commit
    _kind_changed: dict[str, threading.Condition] = field(default_factory=dict)
    _objects: dict[str, dict[ObjKey, Obj]] = field(default_factory=dict)
    _events: deque[Event] = field(init=False)
    _rv: int = 1
    _subscribers: list[Subscriber] = field(default_factory=list)
    # The cluster's IP families (network.py): read by Service allocation, the kubelet's pod
    # IPs and the EndpointSlice controller, as the apiserver's and controllers' flags are.
    network: Network = DEFAULT_NETWORK
    # "kubernetes" or "openshift": OpenShift's admission plugins apply (openshift.py).
    platform: str = "kubernetes"

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        self._events = deque(maxlen=self.event_log_size)
        for r in RESOURCES:
            self._objects.setdefault(r.key, {})

    def changes_of(self, resource: ResourceName) -> threading.Condition:
        """A condition (on the store lock) notified only by commits of this kind: a watch of
        DaemonSets sleeps through the pod and EndpointSlice churn of a rollout."""
        resource = kinds.resolve(resource)
        with self.lock:
            cond = self._kind_changed.get(resource.key)
            if cond is None:
                cond = self._kind_changed[resource.key] = threading.Condition(self.lock)
            return cond

    def wake_all(self) -> None:
        """Wake every waiter (the server is stopping)."""
        with self.lock:
            self.changed.notify_all()
            for cond in self._kind_changed.values():
                cond.notify_all()

    # ---- reads -------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def get(self, resource: ResourceName, namespace: str | None, name: str) -> Obj:
        """The stored object (do not mutate it); StoreError NotFound when absent."""
        resource = kinds.resolve(resource)
        with self.lock:
            obj = self._objects[resource.key].get(_key(resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return obj

    def find(self, resource: ResourceName, namespace: str | None, name: str) -> Obj | None:
        resource = kinds.resolve(resource)
        with self.lock:
            return self._objects[resource.key].get(_key(resource, namespace, name))

    def list(
        self,
        resource: ResourceName,
        namespace: str | None = None,
        selector: Selector | None = None,
        name: str | None = None,
    ) -> tuple[list[Obj], int]:
        """Objects sorted by (namespace, name), plus the store's resourceVersion at read time."""
        resource = kinds.resolve(resource)
        with self.lock:
            table = self._objects[resource.key]
            if name is not None:
                keys: Iterable[ObjKey] = [k for k in table if k[1] == name]
            else:
                keys = table.keys()
            out = []
            for key in sorted(keys):
                if namespace and resource.namespaced and key[0] != namespace:
                    continue
                obj = table[key]
                if selector is not None and not selector.matches(
                    obj["metadata"].get("labels")
                ):
                    continue
                out.append(obj)
            return out, self._rv

    def horizon(self) -> int:
        """The oldest resourceVersion the event log still reaches back from: a watch or a
        continue token from an older one is answered 410 Expired. The log keeps the last
        `event_log_size` events (`sim serve --watch-window`), as the real watch cache keeps a
        bounded window (`apiserver/pkg/storage/cacher/watch_cache.go`, `oldest-1`)."""
        with self.lock:
            oldest = self._events[0].resource_version if self._events else self._rv + 1
            return oldest - 1

    def expired(self, resource_version: int) -> bool:
        """True when `resource_version` is older than the window (see `horizon`)."""
        return resource_version < self.horizon()

    def events_since(self, resource_version: int) -> builtins.list[Event] | None:
        """Events after `resource_version`, or None when the log no longer reaches back that far
        (the caller answers 410 Gone, as the real server does for a compacted revision)."""
        with self.lock:
            if resource_version >= self._rv:
                return []
            if resource_version < self.horizon():
                return None
            # Scan from the newest end: watchers usually ask for the last few events only.
            newer = [e for e in itertools.takewhile(
                lambda e: e.resource_version > resource_version, reversed(self._events))]
            newer.reverse()
            return newer

    # ---- writes ------------------------------------------------------------------------

    def subscribe(self, fn: Subscriber) -> None:
        with self.lock:
            self._subscribers.append(fn)

    def unsubscribe(self, fn: Subscriber) -> None:
        """Stop calling `fn` (a stopped controller); unknown callbacks are ignored."""
        with self.lock:
            if fn in self._subscribers:
                self._subscribers.remove(fn)

    def _commit(
        self, etype: str, resource: Resource, obj: Obj, old: Obj | None = None
    ) -> Event:
        event = Event(etype, resource, obj, int(obj["metadata"]["resourceVersion"]), old)
        self._events.append(event)
        for fn in list(self._subscribers):
            fn(event)
        self.changed.notify_all()
        kind_changed = self._kind_changed.get(resource.key)
        if kind_changed is not None:
            kind_changed.notify_all()
        return event

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def create(
        self, resource: ResourceName, obj: Obj, *, dry_run: bool = False, adopt: bool = False,
        uid: str | None = None,
    ) -> Obj:
        """Store a new object, filling server-assigned metadata; AlreadyExists on a name clash.

        `adopt=True` (bulk seeding): the caller hands `obj` over and never touches it again, so
        it is stored without the defensive deep copy; only its top level and `metadata` dict
        are written to, so those must be the caller's own (other parts may be shared).
        `uid`: the one admission already used (a Job's generated selector names it)."""
        resource = kinds.resolve(resource)
        with self.lock:
            obj = _taken(obj, adopt)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                ns_ = meta.get("namespace") or "" if resource.namespaced else ""
                for _ in range(7):  # RetryGenerateName (GA in 1.32): retry a clash server-side
                    if (ns_, meta["name"]) not in self._objects[resource.key]:
                        break
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise StoreError(422, "Invalid", f"{resource.kind} is invalid: metadata.name: "
                                 "Required value: name or generateName is required")
            ns = meta.get("namespace") or "" if resource.namespaced else ""
            if resource.namespaced and not ns:
                raise StoreError(422, "Invalid", f"{resource.kind} {name!r} is invalid: "
                                 "metadata.namespace: Required value")
            if not resource.namespaced:
                meta.pop("namespace", None)
            key = (ns, name)
            if key in self._objects[resource.key]:
                raise already_exists(resource, name)
            obj["apiVersion"] = resource.api_version
            obj["kind"] = resource.kind
            meta["uid"] = uid or str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.pop("resourceVersion", None)
            meta.pop("deletionTimestamp", None)
            meta.pop("deletionGracePeriodSeconds", None)
            if "spec" in obj or resource.has_status:
                meta["generation"] = 1
            template_generation(resource, obj, None)
            if dry_run:
                meta["resourceVersion"] = str(self._rv)
                return obj
            meta["resourceVersion"] = self._next_rv()
            self._objects[resource.key][key] = obj
            self._commit("ADDED", resource, obj)
            return obj

    def update(
        self,
        resource: ResourceName,
        obj: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        adopt: bool = False,
    ) -> Obj:
        """Replace an object. A `metadata.resourceVersion` in `obj` must match (409 Conflict).

        The main resource ignores `status` changes and the `status` subresource ignores
        everything but `status`, as the real server does for kinds with a status subresource.
        `generation` moves when, and only when, `spec` changes.

        `adopt=True` (the simulated controllers' hot path): as for `create`, `obj` is handed
        over and stored without a deep copy, and unchanged parts are shared with the stored
        object rather than copied; both are safe because stored objects are never mutated.
        """
        resource = kinds.resolve(resource)
        with self.lock:
            obj = _taken(obj, adopt)
            meta = obj.setdefault("metadata", {})
            name = meta.get("name", "")
            ns = (meta.get("namespace") or "") if resource.namespaced else ""
            current = self._objects[resource.key].get((ns, name))
            if current is None:
                raise not_found(resource, name)
            sent_rv = meta.get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise conflict(resource, name)
            if subresource == "status":
                new = _with_own_metadata(current)
                new["status"] = obj.get("status", {})
            else:
                new = obj
                if resource.has_status:
                    if "status" in current:
                        new["status"] = current["status"]
                    else:
                        new.pop("status", None)
                # Immutable server-assigned metadata is kept from the stored object.
                for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp",
                          "deletionGracePeriodSeconds"):
                    if k in current["metadata"]:
                        new["metadata"][k] = current["metadata"][k]
                    else:
                        new["metadata"].pop(k, None)
                if "namespace" in current["metadata"]:
                    new["metadata"]["namespace"] = current["metadata"]["namespace"]
                new["apiVersion"] = resource.api_version
                new["kind"] = resource.kind
                if new.get("spec") != current.get("spec") and "generation" in current["metadata"]:
                    new["metadata"]["generation"] = current["metadata"]["generation"] + 1
                template_generation(resource, new, current)
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            if new == current:
                # A no-op write keeps the resourceVersion and emits no event, as the real server.
                return current
            if subresource != "status":
                problem = F.new_finalizers_problem(current, new)
                if problem:
                    raise StoreError(422, "Invalid", f'{resource.kind} "{name}" is invalid: '
                                     f"{problem}")
            if dry_run:
                return new
            new["metadata"]["resourceVersion"] = self._next_rv()
            if F.emptied(current, new):
                # `shouldDeleteDuringUpdate`: the last finalizer of a deleted object is gone.
                del self._objects[resource.key][(ns, name)]
                self._commit("DELETED", resource, new)
                return new
            self._objects[resource.key][(ns, name)] = new
            self._commit("MODIFIED", resource, new, current)
            return new

    def mark_deleting(
        self, resource: ResourceName, namespace: str | None, name: str, grace_seconds: int,
        finalizers: builtins.list[str] | None = None,
    ) -> Obj:
        """Graceful deletion or deletion pending finalizers: set `deletionTimestamp` (kept when
        already set), `deletionGracePeriodSeconds` and (when given) the finalizers, and keep the
        object until its owner (the simulated kubelet, for pods) or the last finalizer's removal
        deletes it. An object already marked this way is returned unchanged. The first mark
        moves `generation` (when it has one), as the API server's does (`markAsDeleting` in
        apiserver/pkg/registry/generic/registry/store.go, `BeforeDelete` in
        apiserver/pkg/registry/rest/delete.go for graceful deletion): so a controller behind
        `GenerationChangedPredicate` hears of the deletion."""
        resource = kinds.resolve(resource)
        with self.lock:
            current = self.get(resource, namespace, name)
            meta = current["metadata"]
            wanted = meta.get("finalizers") if finalizers is None else finalizers
            if (meta.get("deletionTimestamp")
                    and meta.get("deletionGracePeriodSeconds") == grace_seconds
                    and (meta.get("finalizers") or []) == (wanted or [])):
                return current
            new = _with_own_metadata(current)
            if not meta.get("deletionTimestamp") and int(meta.get("generation") or 0) > 0:
                new["metadata"]["generation"] = int(meta["generation"]) + 1
            new["metadata"].setdefault("deletionTimestamp", now_rfc3339())
            new["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
            if wanted:
                new["metadata"]["finalizers"] = list(wanted)
            else:
                new["metadata"].pop("finalizers", None)
            new["metadata"]["resourceVersion"] = self._next_rv()
            key = (namespace or "" if resource.namespaced else "", name)
            self._objects[resource.key][key] = new
            self._commit("MODIFIED", resource, new, current)
            return new

    def delete(
        self, resource: ResourceName, namespace: str | None, name: str, *, dry_run: bool = False
    ) -> Obj:
        """Remove an object now, unless it has finalizers: then it is only marked (grace 0) and
        stays until an update removes the last one (apiserver registry `Store.Delete`).
        NotFound when absent.

        Dependents are removed by the garbage collector controller, which watches DELETED events.
        """
        resource = kinds.resolve(resource)
        with self.lock:
            key = (namespace or "" if resource.namespaced else "", name)
            current = self._objects[resource.key].get(key)
            if current is None:
                raise not_found(resource, name)
            if dry_run:
                return current
            if current["metadata"].get("finalizers"):
                return self.mark_deleting(resource, namespace, name, 0)
            del self._objects[resource.key][key]
            gone = _with_own_metadata(current)
            gone["metadata"]["resourceVersion"] = self._next_rv()
            self._commit("DELETED", resource, gone)
            return gone

    def count(self, resource: ResourceName) -> int:
        resource = kinds.resolve(resource)
        with self.lock:
            return len(self._objects[resource.key])
