"""The garbage collector, after kubernetes/pkg/controller/garbagecollector
(garbagecollector.go: attemptToDeleteItem, attemptToOrphan, processDeletingDependentsItem).

Owners are found by ownerReference uid. Background (the default): when an owner goes, each
dependent whose owners are now all gone is deleted (pods gracefully, so the kubelet terminates
them as after any DELETE); a dependent that still has a live owner only loses the dangling
reference. An object created with owners that do not exist is collected too. Owner kinds the
sim does not serve are assumed alive (upstream cannot resolve them either).

Orphan: the API server leaves the owner with `deletionTimestamp` and the `orphan` finalizer;
the GC removes the owner's reference from every dependent, then the finalizer (the owner goes).
Foreground: the owner keeps the `foregroundDeletion` finalizer while it counts as gone for its
dependents (deleted in turn, in the foreground when they have dependents of their own); the
finalizer is removed once no dependent with `blockOwnerDeletion` remains.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import finalizers as F
from dcgm_sim import kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller
from dcgm_sim.jsoncopy import clone
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Ident = tuple[str, str, str]  # (kind key, namespace or "", name)

DEFAULT_POD_GRACE_SECONDS = 30


class GarbageCollector(Controller):
    """Deletes dependents whose owners are gone."""

    name = "garbage-collector"
    resources = frozenset(k.key for k in kinds.ALL
                          if k is not kinds.SELF_SUBJECT_ACCESS_REVIEW)

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._uids: set[str] = set()
        self._dependents: dict[str, set[Ident]] = {}
        self._owners_of: dict[Ident, set[str]] = {}
        self._finalizing: dict[str, Ident] = {}  # owner uid -> owner, with a GC finalizer

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
            if P.is_deleting(obj) and {F.ORPHAN, F.FOREGROUND} & set(
                    obj["metadata"].get("finalizers") or []):
                self._finalizing[obj["metadata"]["uid"]] = ident
                self.schedule(("owner", "finalize", *ident), 0)

    def wants(self, event: Event) -> bool:
        """Only creations, deletions, changed ownerReferences and deletion marks (finalizers)
        move the owner graph."""
        old = event.old
        if event.type != "MODIFIED" or old is None:
            return True
        new = event.object
        return any(old["metadata"].get(k) != new["metadata"].get(k) for k in (
            "ownerReferences", "uid", "deletionTimestamp", "finalizers"))

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
        owners: set[Ident] = set()  # deleting owners with a GC finalizer to process
        for item in due:
            if isinstance(item, tuple) and len(item) == 4:
                check.add((str(item[1]), str(item[2]), str(item[3])))
            elif isinstance(item, tuple) and len(item) == 5:
                owners.add((str(item[2]), str(item[3]), str(item[4])))
        for ev in events:
            obj = ev.object
            ident = _ident(ev.resource, obj)
            uid = obj["metadata"]["uid"]
            # An owner waiting for its dependents hears of every dependent that goes or drops it.
            if ev.type == "DELETED" or (ev.old is not None and ev.old["metadata"].get(
                    "ownerReferences") != obj["metadata"].get("ownerReferences")):
                owners.update(self._finalizing[o] for o in self._owners_of.get(ident, set())
                              if o in self._finalizing)
            if ev.type == "DELETED":
                self._uids.discard(uid)
                self._finalizing.pop(uid, None)
                self._track(ident, None)
                check.update(self._dependents.pop(uid, set()))
                continue
            self._uids.add(uid)
            self._track(ident, obj)
            if self._maybe_dangling(obj):
                check.add(ident)
            if P.is_deleting(obj) and {F.ORPHAN, F.FOREGROUND} & set(
                    obj["metadata"].get("finalizers") or []):
                self._finalizing[uid] = ident
                owners.add(ident)
                check.update(self._dependents.get(uid, set()))
        for ident in sorted(owners):
            try:
                self._finalize_owner(ident)
            except StoreError as err:
                log.info("gc owner %s %s/%s: %s; retrying", *ident, err.message)
                self.schedule(("owner", "finalize", *ident), 1.0)
        for ident in sorted(check):
            try:
                self._check(ident)
            except StoreError as err:
                log.info("gc %s %s/%s: %s; retrying", *ident, err.message)
                self.schedule(("check", *ident), 1.0)

    def _owner_alive(self, ref: Mapping[str, Any], namespace: str) -> bool:
        """A "solid" owner (`classifyReferences`): it exists with that uid and is not waiting
        for its dependents' deletion (foreground) nor orphaning them."""
        kind = kinds.BY_KIND.get(str(ref.get("kind")))
        if kind is None or kind.api_version != ref.get("apiVersion"):
            return True
        owner = self.store.find(kind, namespace if kind.namespaced else None, str(ref.get("name")))
        if owner is None or owner["metadata"]["uid"] != ref.get("uid"):
            return False
        return not (P.is_deleting(owner)
                    and F.FOREGROUND in (owner["metadata"].get("finalizers") or []))

    def _finalize_owner(self, ident: Ident) -> None:
        """`attemptToOrphan` / `processDeletingDependentsItem`: orphan the dependents, or wait
        until no dependent blocks the owner's deletion; then remove that finalizer."""
        kind = kinds.BY_KEY[ident[0]]
        owner = self.store.find(kind, ident[1] or None, ident[2])
        if owner is None or not P.is_deleting(owner):
            return
        uid = owner["metadata"]["uid"]
        finalizers = list(owner["metadata"].get("finalizers") or [])
        dependents = sorted(self._dependents.get(uid, set()))
        if F.ORPHAN in finalizers:
            for dep in dependents:
                self._orphan(dep, uid)
            finalizers.remove(F.ORPHAN)
        elif F.FOREGROUND in finalizers:
            if any(self._blocks(dep, uid) for dep in dependents):
                return  # re-processed when a blocking dependent goes or drops the reference
            finalizers.remove(F.FOREGROUND)
        else:
            return
        new = clone(owner)
        new["metadata"]["finalizers"] = finalizers
        self.store.update(kind, new)

    def _blocks(self, ident: Ident, owner_uid: str) -> bool:
        """The dependent still exists with `blockOwnerDeletion` on its reference to the owner."""
        obj = self.store.find(kinds.BY_KEY[ident[0]], ident[1] or None, ident[2])
        return obj is not None and any(
            r.get("uid") == owner_uid and r.get("blockOwnerDeletion")
            for r in obj["metadata"].get("ownerReferences") or [])

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
        new = clone(obj)
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
        if any(self._orphaning(r) for r in refs):
            return  # the owner's orphan finalizer removes the reference instead
        alive = [r for r in refs if self._owner_alive(r, ident[1])]
        if len(alive) == len(refs):
            return
        if alive:
            new = clone(obj)
            new["metadata"]["ownerReferences"] = alive
            self.store.update(kind, new)
            return
        uid = obj["metadata"]["uid"]
        if kind is kinds.POD:
            grace = int((obj.get("spec") or {}).get("terminationGracePeriodSeconds",
                                                     DEFAULT_POD_GRACE_SECONDS))
            self.store.mark_deleting(kind, ident[1], ident[2], grace)
        elif self._dependents.get(uid) and any(self._waiting(r) for r in refs):
            # A dependent with dependents of its own goes in the foreground too.
            finalizers = list(obj["metadata"].get("finalizers") or [])
            self.store.mark_deleting(kind, ident[1] or None, ident[2], 0,
                                     [*finalizers, F.FOREGROUND])
        else:
            self.store.delete(kind, ident[1] or None, ident[2])

    def _orphaning(self, ref: Mapping[str, Any]) -> bool:
        ident = self._finalizing.get(str(ref.get("uid")))
        if ident is None:
            return False
        owner = self.store.find(kinds.BY_KEY[ident[0]], ident[1] or None, ident[2])
        return owner is not None and F.ORPHAN in (owner["metadata"].get("finalizers") or [])

    def _waiting(self, ref: Mapping[str, Any]) -> bool:
        ident = self._finalizing.get(str(ref.get("uid")))
        return ident is not None and not self._orphaning(ref)


def _ident(kind: kinds.Kind, obj: Mapping[str, Any]) -> Ident:
    meta = obj["metadata"]
    return (kind.key, meta.get("namespace") or "", meta["name"])
