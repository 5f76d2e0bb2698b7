"""Where the state document lives (docs/design.md, "State and resume"): the state ConfigMap,
plus the run lock.

The ConfigMap's layout is `configmap.py`; its name and label are the catalog's.
Taking the lock when no ConfigMap exists creates it holding the empty document `{}`, which
means "no state yet": `load` returns None for it. Saving `{}` therefore also reads back as None.

Every write is a create or a PUT carrying the resourceVersion last seen (optimistic
concurrency): two runs racing for the lock cannot both win, and a state write never overwrites
a change it has not seen. A 409 on `save` re-reads: if only metadata moved (our own lock
renewal, a label added by hand) and nobody else holds the lock, the save is retried on the new
version; if the document itself changed, `StateConflict`; if another run holds the lock,
`LockHeld`.

The lock records where its holder runs (`lock.Process`); a live lock whose holder is provably
gone (`liveness.HolderCheck`: its process no longer runs on this host, its pod no longer
exists) is taken over at once, and the takeover says whose and why. A holder that may be alive
is refused (`LockHeld`) with the command that applies to it: `status` to follow a renewing
run, `unlock` for one that stopped renewing.

`--dry-run` never reaches a store: its back end (`engine/projecting.py`) writes no state.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Protocol

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.state import lock as locking
from migrator.engine.state.backends import ConfigMapAccess, KubeConfigMap
from migrator.engine.state.configmap import (
    CHECKSUM_KEY,
    EMPTY_SHA,
    EMPTY_TEXT,
    MAX_DOCUMENT_BYTES,
    STATE_KEY,
    ConfigMapFormat,
    StoredState,
    checksum,
    decode,
    encode,
)
from migrator.engine.state.liveness import HolderCheck
from migrator.engine.state.lock import Lock
from migrator.errors import APIConflict, APINotFound, LockHeld, StateConflict
from migrator.kube import Kube
from migrator.model import kinds
from migrator.model.stacks import Common, Label, load_catalog

Obj = dict[str, Any]

_ROUNDS = 8  # re-reads after conflicts before giving up


class StateStore(Protocol):
    """Persistence for the state document and the run lock (the ConfigMap; tests: in memory)."""

    def load(self) -> StoredState | None: ...
    def save(self, document: dict[str, Any], *, expected_version: str | None) -> StoredState: ...
    def acquire_lock(self, holder: str, ttl_seconds: float) -> Lock: ...
    def renew_lock(self, lock: Lock) -> Lock: ...
    def release_lock(self, lock: Lock) -> None: ...
    def force_unlock(self) -> str | None: ...
    def lock_info(self) -> locking.LockInfo | None: ...
    def holder_gone(self, info: locking.LockInfo | None) -> str | None: ...
    def check_free(self) -> None: ...


class ConfigMapState(ConfigMapFormat):
    """The store's logic, over any backend that behaves like the API for one ConfigMap."""

    def __init__(self, backend: ConfigMapAccess, managed_by: Label, clock: Clock,
                 holders: HolderCheck | None = None) -> None:
        super().__init__(backend, managed_by)
        self._clock = clock
        self._holders = holders or HolderCheck()
        # One store may be called from more than one thread (the guard's loops, tests racing
        # two runs through one store): each call is atomic for this store.
        self._mu = threading.RLock()
        self._seen: Obj | None = None  # the ConfigMap as last read or written by us
        # (resourceVersion, checksum) of the document this store last handed out, by `load` or
        # `save`: the version a caller saves on next. Our own lock writes move the ConfigMap's
        # version on without changing the document, so the checksum is what is compared.
        self._handed: tuple[str, str] | None = None
        self._held: Lock | None = None

    # ---- reading and checking ---------------------------------------------------------

    def _view(self, cm: Obj) -> Obj:
        """Remember `cm` as our latest view."""
        self._seen = cm
        return cm

    def _hand_out(self, cm: Obj, document: dict[str, Any]) -> StoredState:
        """The document at `cm`'s version, remembered as the one the caller saves on next.
        `document` is a fresh decode, never shared (cheaper than a deep copy on every save)."""
        version = str(cm["metadata"]["resourceVersion"])
        self._handed = (version, self._stored_sha(cm) or "")
        return StoredState(document, version)

    # ---- the document -----------------------------------------------------------------

    def load(self) -> StoredState | None:
        """The saved document, or None when there is none yet (or only a lock)."""
        with self._mu:
            cm = self._cm.get()
            self._seen = self._handed = None
            if cm is None:
                return None
            document, _ = self._decode(cm)
            self._view(cm)
            stored = self._hand_out(cm, document)
            return stored if document else None

    def lock_info(self) -> locking.LockInfo | None:
        """The run lock as the ConfigMap's annotations describe it now (anyone's, live or
        expired), or None when nobody holds it."""
        with self._mu:
            cm = self._cm.get()
            return locking.read((cm.get("metadata") or {}).get("annotations")) if cm else None

    def save(self, document: dict[str, Any], *, expected_version: str | None) -> StoredState:
        """Write the document if nobody else changed it since `expected_version`."""
        text = encode(document)
        if len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES:
            raise ValueError(f"state document of {len(text)} bytes exceeds the ConfigMap limit")
        with self._mu:
            expected_sha = self._expected_sha(expected_version)
            base, version = self._base(expected_version, expected_sha)
            for _ in range(_ROUNDS):
                try:
                    if base is None:
                        written = self._cm.create(self._new_configmap(text, {}))
                    else:
                        body = copy.deepcopy(base)
                        body["metadata"]["resourceVersion"] = version
                        body["data"] = {STATE_KEY: text, CHECKSUM_KEY: checksum(text)}
                        written = self._cm.replace(body)
                except (APIConflict, APINotFound):
                    base = self._reread_for_save(expected_sha, None, checksum(text))
                    version = str(base["metadata"]["resourceVersion"]) if base else None
                    if base is not None and self._stored_sha(base) == checksum(text):
                        # An earlier attempt of this very save landed but its answer was lost
                        # (a timeout, a dropped connection): the retry's 409 is our own write.
                        return self._hand_out(base, decode(text))
                    continue
                self._view(written)
                return self._hand_out(written, decode(text))
            raise StateConflict(
                f"The state in ConfigMap {self._cm.where} kept changing under this run.",
                "make sure no other dcgm-migrate run or controller edits it, then run again",
            )

    def _expected_sha(self, expected_version: str | None) -> str | None:
        """The checksum of the document the caller's version refers to (None: no state)."""
        if expected_version is None:
            return None
        if self._handed is not None and self._handed[0] == expected_version:
            return self._handed[1]
        # A version this store did not hand out: only an exact resourceVersion match will do.
        return ""

    @staticmethod
    def _matches(sha: str | None, expected_sha: str | None) -> bool:
        if sha is None:
            return False
        return sha == expected_sha or (expected_sha is None and sha == EMPTY_SHA)

    def _base(self, expected_version: str | None, expected_sha: str | None) -> tuple[
            Obj | None, str | None]:
        """The ConfigMap to write over and the resourceVersion to send (None: create it).

        Our last view is used, with its own (possibly newer) version, when its document is the
        one the caller expects: only metadata can have moved since, by our own lock writes.
        Otherwise the ConfigMap is read again and checked like after a 409.
        """
        seen = self._seen
        if seen is not None and self._matches(self._stored_sha(seen), expected_sha):
            return seen, str(seen["metadata"]["resourceVersion"])
        if seen is None and expected_version is None:
            return None, None
        current = self._reread_for_save(expected_sha, expected_version)
        return current, (str(current["metadata"]["resourceVersion"]) if current else None)

    def _reread_for_save(
        self, expected_sha: str | None, expected_version: str | None, saving: str | None = None
    ) -> Obj | None:
        """Before a write we cannot vouch for, or after a 409: the ConfigMap to write over
        (None: create it), or the reason not to. `saving` is the checksum of the document
        being saved: finding it already there means our own earlier attempt landed."""
        current = self._cm.get()
        self._seen = None
        if current is None:
            if self._held is not None:
                raise StateConflict(
                    f"ConfigMap {self._cm.where} was deleted while this run held its lock.",
                    "someone reset the migration state; run `dcgm-migrate status -n "
                    f"{self._cm.namespace}` and decide",
                )
            if expected_sha is not None and expected_sha != EMPTY_SHA:
                raise StateConflict(
                    f"The state in ConfigMap {self._cm.where} was deleted by someone else.",
                    f"run `dcgm-migrate status -n {self._cm.namespace}` and start again",
                )
            return None
        _, current_sha = self._decode(current)
        self._view(current)
        self._check_not_terminating(current)
        info = locking.read(current["metadata"].get("annotations"))
        held_by_us = self._held is not None and locking.is_ours(info, self._held)
        if info is not None and not held_by_us and info.live(self._clock.now()):
            raise self._lock_held(info)
        if self._held is not None and not held_by_us:
            raise StateConflict(
                f"This run's lock on ConfigMap {self._cm.where} was removed or taken over.",
                "another run may be migrating: see `dcgm-migrate status -n "
                f"{self._cm.namespace}` before going on",
            )
        version = str(current["metadata"]["resourceVersion"])
        if not (self._matches(current_sha, expected_sha) or version == expected_version
                or current_sha == saving):
            raise StateConflict(
                f"The state in ConfigMap {self._cm.where} was changed by another run since "
                "this run read it.",
                f"run `dcgm-migrate status -n {self._cm.namespace}` to see the current state, "
                "then the command again",
            )
        return current

    # ---- the lock ---------------------------------------------------------------------

    def holder_gone(self, info: locking.LockInfo | None) -> str | None:
        """Why the holder of this lock is provably gone, or None when it may be alive."""
        return self._holders(info)

    def check_free(self) -> None:
        """LockHeld now when another run that may be alive holds the lock: what `apply` and
        `rollback` check before they print warnings or ask their question (the lock itself
        is taken later, by `acquire_lock`)."""
        with self._mu:
            info = self.lock_info()
            if info is not None and info.live(self._clock.now()) and self._held is None \
                    and self.holder_gone(info) is None:
                raise self._lock_held(info)

    def _lock_held(self, info: locking.LockInfo) -> LockHeld:
        until = locking.format_time(info.expires) if info.expires else "an unreadable time"
        ns = self._cm.namespace
        message = (f"Another dcgm-migrate run holds the lock on {self._cm.where}: "
                   f"{info.holder}, until {until}.")
        if info.renewing(self._clock.now()):
            return LockHeld(message, "wait for that run to finish: `dcgm-migrate status -n "
                            f"{ns}` shows its progress; only if you are sure it is dead, "
                            f"`dcgm-migrate unlock --force -n {ns}` releases it")
        renewed = locking.format_time(info.renewed) if info.renewed else "an unknown time"
        return LockHeld(f"{message} Its holder has not renewed it since {renewed}, so its run "
                        "is probably dead.",
                        f"`dcgm-migrate unlock -n {ns}` releases it now (or the next run takes "
                        f"it over at {until})")

    def acquire_lock(self, holder: str, ttl_seconds: float) -> Lock:
        """Take the lock; LockHeld when another run that may be alive holds it. An expired
        lock is taken over, and so is a live one whose holder is provably gone (`liveness`):
        a run killed on this host, a Job pod that no longer exists."""
        here = self._holders.here
        with self._mu:
            tried: Lock | None = None  # the lock our last attempt wrote, answered or not
            for _ in range(_ROUNDS):
                now = self._clock.now()
                current = self._cm.get()
                if current is not None and tried is not None and locking.is_ours(
                        locking.read(current["metadata"].get("annotations")), tried):
                    # That attempt landed but its answer was lost; the retry's 409 was our own
                    # write, not another run's lock.
                    self._view(current)
                    self._held = tried
                    return tried
                if current is None:
                    lock = tried = locking.new_lock(holder, now, ttl_seconds, None, process=here)
                    body = self._new_configmap(EMPTY_TEXT, locking.annotations_for(lock))
                    try:
                        written = self._cm.create(body)
                    except APIConflict:
                        continue
                else:
                    self._check_ours(current)
                    self._check_not_terminating(current)
                    self._view(current)
                    info = locking.read(current["metadata"].get("annotations"))
                    gone = None
                    if info is not None and info.live(now):
                        gone = self.holder_gone(info)
                        if gone is None:
                            raise self._lock_held(info)
                    lock = tried = locking.new_lock(
                        holder, now, ttl_seconds, info.holder if info else None, info,
                        process=here, gone=gone)
                    try:
                        written = self._write_lock(current, locking.annotations_for(lock))
                    except (APIConflict, APINotFound):
                        continue
                self._view(written)
                self._held = lock
                return lock
            raise LockHeld(
                f"Could not take the lock on {self._cm.where}: it kept changing.",
                "another run is starting at the same moment; run the command again",
            )

    def _write_lock(self, current: Obj, annotations: dict[str, str]) -> Obj:
        """PUT `current` with the lock annotations replaced by `annotations` (maybe none)."""
        body = copy.deepcopy(current)
        meta = body["metadata"]
        kept = {k: v for k, v in (meta.get("annotations") or {}).items()
                if k not in locking.KEYS}
        meta["annotations"] = {**kept, **annotations}
        return self._cm.replace(body)

    def renew_lock(self, lock: Lock) -> Lock:
        """Push the expiry out by the lock's TTL; LockHeld if the lock is no longer ours."""
        with self._mu:
            for _ in range(_ROUNDS):
                current = self._cm.get()
                info = locking.read((current or {}).get("metadata", {}).get("annotations"))
                if current is None or not locking.is_ours(info, lock):
                    self._held = None
                    who = f"taken over by {info.holder}" if info else "removed"
                    raise LockHeld(
                        f"This run's lock on {self._cm.where} was {who}.",
                        "another run may be migrating: see `dcgm-migrate status -n "
                        f"{self._cm.namespace}` before going on",
                    )
                self._view(current)
                self._check_not_terminating(current)
                renewed = locking.renewed_lock(lock, self._clock.now())
                try:
                    written = self._write_lock(current, locking.annotations_for(renewed))
                except (APIConflict, APINotFound):
                    continue
                self._view(written)
                self._held = renewed
                return renewed
            raise LockHeld(
                f"Could not renew the lock on {self._cm.where}: it kept changing.",
                f"run `dcgm-migrate status -n {self._cm.namespace}` before going on",
            )

    def release_lock(self, lock: Lock) -> None:
        """Drop the lock if it is still ours (someone else's lock is left alone)."""
        with self._mu:
            self._held = None
            for _ in range(_ROUNDS):
                current = self._cm.get()
                info = locking.read((current or {}).get("metadata", {}).get("annotations"))
                if current is None or not locking.is_ours(info, lock):
                    return
                try:
                    self._view(self._write_lock(current, {}))
                    return
                except (APIConflict, APINotFound):
                    continue

    def force_unlock(self) -> str | None:
        """Remove whatever lock is there (`dcgm-migrate unlock`); the holder removed, or None."""
        with self._mu:
            for _ in range(_ROUNDS):
                current = self._cm.get()
                if current is None:
                    return None
                self._check_ours(current)
                info = locking.read(current["metadata"].get("annotations"))
                if info is None:
                    return None
                try:
                    self._view(self._write_lock(current, {}))
                except (APIConflict, APINotFound):
                    continue
                if self._held is not None and locking.is_ours(info, self._held):
                    self._held = None
                return info.holder
            raise StateConflict(
                f"Could not remove the lock on {self._cm.where}: it kept changing.",
                "a run is active right now; stop it first",
            )


class ConfigMapStateStore(ConfigMapState):
    """The real store: the catalog's state ConfigMap in `namespace`, through `kube`."""

    def __init__(
        self, kube: Kube, namespace: str, common: Common | None = None,
        clock: Clock | None = None,
    ) -> None:
        common = common or load_catalog().common
        super().__init__(KubeConfigMap(kube, namespace, common.state_configmap),
                         common.managed_by, clock or SystemClock(),
                         HolderCheck(pod=lambda ns, name: kube.get(kinds.POD, name, ns)))
