"""A DaemonSet's history (its ControllerRevisions), after kubernetes/pkg/controller/daemon/
update.go.

`History.construct` is `constructHistory`, run by every sync whatever the update strategy
(`syncDaemonSet`, daemon_controller.go):

- `controlledHistories`: the namespace's revisions claimed as `ClaimControllerRevisions`
  (pkg/controller/controller_ref_manager.go) claims them: its own that match the selector, an
  orphan that matches adopted, its own that stopped matching released;
- a revision without the `controller-revision-hash` label gets one, its own name;
- `Match`: a revision is current when its `data` equals `getPatch` of the template (the
  template alone, marked `$patch: replace`: `updateStrategy`, the DaemonSet's own labels and
  annotations are no part of it);
- none current: `snapshot` creates one named `<ds>-<ComputeHash(template, collisionCount)>`;
  a namesake with other data bumps `status.collisionCount` and the sync retries;
- several current: `dedupCurHistories` keeps the one with the highest revision, relabels every
  pod of the DaemonSet to its hash (a metadata-only write: no pod restarts) and deletes the rest;
- the current one's revision number is raised above every old one's (a template reverted to an
  earlier one reuses that revision, renumbered).

The DaemonSet's hash is the current revision's label; pods are "updated" when they carry it
(`IsPodUpdated`, in `rollouts`). `History.cleanup` is `cleanupHistory`. (The generic
`pkg/controller/history` helpers — `NewControllerRevision`, `HashControllerRevision` over the
revision's data, `EqualRevision` — are the StatefulSet controller's; the DaemonSet controller
names its revisions by `ComputeHash` of the template and compares them by `Match`.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.controllers import adoption
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.rollouts import HASH_LABEL, PodView, new_revision, revision_patch
from dcgm_sim.jsoncopy import clone
from dcgm_sim.labelselectors import label_selector_as_selector
from dcgm_sim.store import Store, StoreError

Obj = dict[str, Any]
PodWritten = Callable[[Obj], None]  # the controller's cache hears of a pod it wrote


def _hash_of(rev: Mapping[str, Any]) -> str:
    return str((rev["metadata"].get("labels") or {}).get(HASH_LABEL, ""))


def _revision(rev: Mapping[str, Any]) -> int:
    return int(rev.get("revision") or 0)


class History:
    """`constructHistory`, `dedupCurHistories` and `cleanupHistory` over one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- controlledHistories ---------------------------------------------------------------

    def controlled(self, ds: Mapping[str, Any]) -> list[Obj]:
        """`controlledHistories`: `ClaimObject` over every revision of the namespace."""
        uid = ds["metadata"]["uid"]
        selector = label_selector_as_selector(ds["spec"]["selector"])
        revs, _ = self.store.list(kinds.CONTROLLER_REVISION, ds["metadata"]["namespace"])
        claimed: list[Obj] = []
        for rev in revs:
            ref = P.controller_ref(rev)
            if ref is None:
                if adoption.claimable(ds, rev):
                    claimed.extend(self._write(adoption.adopted(ds, rev)))
            elif ref.get("uid") != uid:
                continue  # another controller's
            elif selector.matches(P.labels_of(rev)):
                claimed.append(rev)
            elif not P.is_deleting(ds):
                self._release(rev, str(uid))
        return claimed

    def _release(self, rev: Obj, uid: str) -> None:
        """`ReleaseControllerRevision`: drop our ownerReference (by uid)."""
        new = clone(rev)
        new["metadata"]["ownerReferences"] = [
            r for r in rev["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
        self._write(new)

    def _write(self, rev: Obj) -> list[Obj]:
        """Update a revision (its resourceVersion a precondition): [the result], or [] when it
        changed or went meanwhile (its event brings the DaemonSet back)."""
        try:
            return [self.store.update(kinds.CONTROLLER_REVISION, rev)]
        except StoreError as err:
            if err.code not in (404, 409):
                raise
            return []

    # ---- constructHistory ------------------------------------------------------------------

    def construct(self, ds: Obj, hash_: str, pods: Callable[[], Iterable[PodView]],
                  written: PodWritten) -> tuple[str, list[Obj]]:
        """`constructHistory`: (the current revision's hash label, the old revisions).
        `hash_` is `ComputeHash` of the template, for a revision still to be made; `pods`
        gives the DaemonSet's pods, read only to deduplicate."""
        patch = revision_patch(ds)
        current: list[Obj] = []
        old: list[Obj] = []
        for rev in self.controlled(ds):
            if HASH_LABEL not in (rev["metadata"].get("labels") or {}):
                labelled = clone(rev)
                labelled["metadata"].setdefault("labels", {})[HASH_LABEL] = \
                    rev["metadata"]["name"]
                rev = self.store.update(kinds.CONTROLLER_REVISION, labelled)
            (current if rev.get("data") == patch else old).append(rev)
        next_revision = max((_revision(r) for r in old), default=0) + 1
        if not current:
            cur = self._snapshot(ds, hash_, patch, next_revision)
        else:
            cur = self._dedup(ds, current, pods, written)
            if _revision(cur) < next_revision:
                renumbered = clone(cur)
                renumbered["revision"] = next_revision
                self.store.update(kinds.CONTROLLER_REVISION, renumbered)
        return _hash_of(cur) or hash_, old

    def _snapshot(self, ds: Obj, hash_: str, patch: Obj, revision: int) -> Obj:
        """`snapshot`: create the revision; a namesake with this data (not ours: ours would
        have matched) is answered as it is; one with other data is a hash collision."""
        rev = new_revision(ds, hash_, revision)
        try:
            return self.store.create(kinds.CONTROLLER_REVISION, rev)
        except StoreError as err:
            if err.reason != "AlreadyExists":
                raise
        ns, name = ds["metadata"]["namespace"], ds["metadata"]["name"]
        existing = self.store.get(kinds.CONTROLLER_REVISION, ns, rev["metadata"]["name"])
        if existing.get("data") == patch:
            return existing
        fresh = self.store.get(kinds.DAEMONSET, ns, name)
        count = (fresh.get("status") or {}).get("collisionCount")
        if count == (ds.get("status") or {}).get("collisionCount"):  # else: stale, retry
            status = dict(fresh.get("status") or {}, collisionCount=int(count or 0) + 1)
            self.store.update(kinds.DAEMONSET, {"metadata": {"name": name, "namespace": ns},
                                                "status": status}, subresource="status")
        raise StoreError(409, "Conflict", f"hash collision on ControllerRevision {hash_}")

    def _dedup(self, ds: Obj, current: list[Obj], pods: Callable[[], Iterable[PodView]],
               written: PodWritten) -> Obj:
        """`dedupCurHistories`: keep the highest revision (the last of equals), merge-patch
        every pod's hash label to its hash, delete the other current revisions."""
        if len(current) == 1:
            return current[0]
        keep = current[0]
        for rev in current:
            if _revision(rev) >= _revision(keep):
                keep = rev
        keep_hash = _hash_of(keep)
        for view in list(pods()):
            if view.hash != keep_hash:
                relabelled = self._relabel(ds["metadata"]["namespace"], view.name, keep_hash)
                if relabelled is not None:
                    written(relabelled)
        for rev in current:
            if rev["metadata"]["name"] != keep["metadata"]["name"]:
                self._delete(rev)
        return keep

    def _delete(self, rev: Mapping[str, Any]) -> None:
        """Delete one revision; one already gone is what was wanted."""
        try:
            self.store.delete(kinds.CONTROLLER_REVISION, rev["metadata"]["namespace"],
                              rev["metadata"]["name"])
        except StoreError as err:
            if err.code != 404:
                raise

    def _relabel(self, namespace: str, name: str, hash_: str) -> Obj | None:
        """The merge patch `{"metadata": {"labels": {"controller-revision-hash": hash}}}`:
        applied to the pod as stored now, atomically, as the server applies a patch."""
        with self.store.lock:
            pod = self.store.find(kinds.POD, namespace, name)
            if pod is None:
                return None
            meta = dict(pod["metadata"], labels={**(pod["metadata"].get("labels") or {}),
                                                 HASH_LABEL: hash_})
            return self.store.update(kinds.POD, dict(pod, metadata=meta))

    # ---- cleanupHistory --------------------------------------------------------------------

    def cleanup(self, ds: Mapping[str, Any], old: list[Obj], pods: Iterable[PodView]) -> None:
        """`cleanupHistory`: delete the oldest old revisions beyond `revisionHistoryLimit`,
        but none whose hash a pod carries (terminating pods included)."""
        limit = ds["spec"].get("revisionHistoryLimit")
        kill = len(old) - (10 if limit is None else int(limit))
        if kill <= 0:
            return
        live = {p.hash for p in pods if p.hash}
        for rev in sorted(old, key=_revision):
            if kill <= 0:
                break
            if _hash_of(rev) in live:
                continue
            self._delete(rev)
            kill -= 1

    # ---- the history informer's handlers ---------------------------------------------------

    @staticmethod
    def owners(rev: Mapping[str, Any], old: Mapping[str, Any] | None,
               dsets: Mapping[tuple[str, str], Obj]) -> set[tuple[str, str]]:
        """`addHistory`/`updateHistory`/`deleteHistory`: the DaemonSets to sync for a revision
        event: its controller and its former one (`resolveControllerRef`: name and uid), or
        for an orphan every DaemonSet whose selector matches it."""
        ns = rev["metadata"].get("namespace", "")
        keys: set[tuple[str, str]] = set()
        for version in (rev, old):
            ref = P.controller_ref(version) if version is not None else None
            if ref is None or ref.get("kind") != "DaemonSet":
                continue
            ds = dsets.get((ns, str(ref.get("name"))))
            if ds is not None and ds["metadata"].get("uid") == ref.get("uid"):
                keys.add((ns, str(ref["name"])))
        if P.controller_ref(rev) is None:
            keys.update(key for key, ds in dsets.items() if adoption.claimable(ds, rev))
        return keys
