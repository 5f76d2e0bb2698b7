"""The garbage collector: ownerReferences by uid, background propagation.

When an owner goes, each dependent whose owners are now all gone is deleted (pods gracefully,
so the kubelet terminates them as it would after any DELETE); a dependent that still has a live
owner only loses the dangling reference, as upstream's GC patches it. An object created with
owners that do not exist is collected too. Owner kinds the sim does not serve are assumed alive
(upstream cannot resolve them either and leaves the dependent alone). An owner deleted with
`propagationPolicy: Orphan` (the API server leaves an "orphan" finalizer on the DELETED object)
has its dependents orphaned: they keep running without the reference.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Hashable, Mapping
from typing import Any

from migrator.model import kinds
from migrator.sim.clock import SimClock
from migrator.sim.controllers import pods as P
from migrator.sim.controllers.base import Controller
from migrator.sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Ident = tuple[str, str, str]  # (kind key, namespace or "", name)

DEFAULT_POD_GRACE_SECONDS = 30


class GarbageCollector(Controller):
    """Deletes dependents whose owners are gone."""

    name = "garbage-collector"
    resources = frozenset(k.key for k in kinds.ALL if k is not kinds.SELF_SUBJECT_ACCESS_REVIEW)

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._uids: set[str] = set()
        self._dependents: dict[str, set[Ident]] = {}
        self._owners_of: dict[Ident, set[str]] = {}

    def prime(self) -> None:
        objs: list[tuple[kinds.Kind, Obj]] = []
        for kind in kinds.ALL:
            if kind.key in self.resources:
                objs.extend((kind, o) for o in self.store.list(kind)[0])
        for _, obj in objs:
            self._uids.add(obj["metadata"]["uid"])
        for kind, obj in objs:
            ident = _ident(kind, obj)
            self._track(ident, obj)
            if self._maybe_dangling(obj):
                self.schedule(("check", *ident), 0)

    def wants(self, event: Event) -> bool:
        """Only creations, deletions and changed ownerReferences move the owner graph."""
        old = event.old
        if event.type != "MODIFIED" or old is None:
            return True
        return bool(old["metadata"].get("ownerReferences")
                    != event.object["metadata"].get("ownerReferences")
                    or old["metadata"].get("uid") != event.object["metadata"].get("uid"))

    def _track(self, ident: Ident, obj: Mapping[str, Any] | None) -> None:
        for uid in self._owners_of.pop(ident, set()):
            deps = self._dependents.get(uid)
            if deps is not None:
                deps.discard(ident)
                if not deps:
                    del self._dependents[uid]
        if obj is None:
            return
        owners = {str(r.get("uid")) for r in obj["metadata"].get("ownerReferences") or []}
        if owners:
            self._owners_of[ident] = owners
            for uid in owners:
                self._dependents.setdefault(uid, set()).add(ident)

    def _maybe_dangling(self, obj: Mapping[str, Any]) -> bool:
        refs = obj["metadata"].get("ownerReferences") or []
        return any(str(r.get("uid")) not in self._uids for r in refs)

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        check: set[Ident] = set()
        orphan: list[tuple[Ident, str]] = []
        for item in due:
            if isinstance(item, tuple) and len(item) == 4:
                check.add((str(item[1]), str(item[2]), str(item[3])))
        for ev in events:
            obj = ev.object
            ident = _ident(ev.resource, obj)
            uid = obj["metadata"]["uid"]
            if ev.type == "DELETED":
                self._uids.discard(uid)
                self._track(ident, None)
                dependents = self._dependents.pop(uid, set())
                if "orphan" in (obj["metadata"].get("finalizers") or []):
                    orphan.extend((dep, uid) for dep in sorted(dependents))
                else:
                    check.update(dependents)
                continue
            self._uids.add(uid)
            self._track(ident, obj)
            if self._maybe_dangling(obj):
                check.add(ident)
        for ident, owner_uid in orphan:
            try:
                self._orphan(ident, owner_uid)
            except StoreError as err:
                log.info("gc orphan %s %s/%s: %s", *ident, err.message)
        for ident in sorted(check):
            try:
                self._check(ident)
            except StoreError as err:
                log.info("gc %s %s/%s: %s; retrying", *ident, err.message)
                self.schedule(("check", *ident), 1.0)

    def _owner_alive(self, ref: Mapping[str, Any], namespace: str) -> bool:
        kind = kinds.BY_KIND.get(str(ref.get("kind")))
        if kind is None or kind.api_version != ref.get("apiVersion"):
            return True
        owner = self.store.find(kind, namespace if kind.namespaced else None, str(ref.get("name")))
        return owner is not None and owner["metadata"]["uid"] == ref.get("uid")

    def _orphan(self, ident: Ident, owner_uid: str) -> None:
        """`propagationPolicy: Orphan`: the dependent only loses its reference to the owner."""
        kind = kinds.BY_KEY[ident[0]]
        obj = self.store.find(kind, ident[1] or None, ident[2])
        if obj is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        kept = [r for r in refs if r.get("uid") != owner_uid]
        if len(kept) == len(refs):
            return
        new = copy.deepcopy(obj)
        if kept:
            new["metadata"]["ownerReferences"] = kept
        else:
            new["metadata"].pop("ownerReferences", None)
        self.store.update(kind, new)

    def _check(self, ident: Ident) -> None:
        kind = kinds.BY_KEY[ident[0]]
        obj = self.store.find(kind, ident[1] or None, ident[2])
        if obj is None or P.is_deleting(obj):
            return
        refs = obj["metadata"].get("ownerReferences") or []
        if not refs:
            return
        alive = [r for r in refs if self._owner_alive(r, ident[1])]
        if len(alive) == len(refs):
            return
        if alive:
            new = copy.deepcopy(obj)
            new["metadata"]["ownerReferences"] = alive
            self.store.update(kind, new)
            return
        if kind is kinds.POD:
            grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds",
                                                     DEFAULT_POD_GRACE_SECONDS))
            self.store.mark_deleting(kind, ident[1], ident[2], grace)
        else:
            self.store.delete(kind, ident[1] or None, ident[2])


def _ident(kind: kinds.Kind, obj: Mapping[str, Any]) -> Ident:
    meta = obj["metadata"]
    return (kind.key, meta.get("namespace") or "", meta["name"])
