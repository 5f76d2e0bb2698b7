"""Guarded load/save of the state document and the run lock on the state ConfigMap: every write
is a create or a PUT on the resourceVersion last seen, so racing runs cannot both win (after a
409: retried if only metadata moved and nobody else holds the lock, else `StateConflict` or
`LockHeld`). Locking where no ConfigMap exists creates it holding `{}` ("no state yet").
`RunSession`: one run's hold on it (lock taken on entry, renewed by `heartbeat`, released)."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.progress import Listener
from migrator.engine.state import configmap as cmap
from migrator.engine.state import lock as locking
from migrator.engine.state.document import State
from migrator.engine.state.lock import HolderCheck, Lock, format_time, takeover_message
from migrator.errors import APIConflict, APINotFound, LockHeld, MigrateError, StateConflict
from migrator.errors import Interrupted as Interrupted
from migrator.kube import Kube
from migrator.model import kinds
from migrator.model.stacks import Common, Label, load_catalog

Obj = dict[str, Any]

_ROUNDS = 8  # re-reads after conflicts before giving up


def _lock_of(cm: Obj | None) -> locking.LockInfo | None:
    return locking.read(((cm or {}).get("metadata") or {}).get("annotations"))


def _version(cm: Obj) -> str:
    return str(cm["metadata"]["resourceVersion"])


def _matches(sha: str | None, expected_sha: str | None) -> bool:
    return sha is not None and (
        sha == expected_sha or (expected_sha is None and sha == cmap.EMPTY_SHA))


class ConfigMapState(cmap.ConfigMapFormat):
    """The store's logic, over any backend that behaves like the API for one ConfigMap."""

    def __init__(self, backend: cmap.ConfigMapAccess, managed_by: Label, clock: Clock,
                 holders: HolderCheck | None = None) -> None:
        super().__init__(backend, managed_by)
        self._clock = clock
        self.holder_gone = holders or HolderCheck()  # (info): why its holder is provably gone
        self._mu = threading.RLock()  # each call is atomic for this store
        self._seen: Obj | None = None  # the ConfigMap as last read or written by us
        # (resourceVersion, checksum) last handed out by `load` or `save`: what a caller saves
        # on next (our lock writes move the version, not the document)
        self._handed: tuple[str, str] | None = None
        self._held: Lock | None = None

    def _hand_out(self, cm: Obj, document: dict[str, Any]) -> cmap.StoredState:
        self._handed = (_version(cm), cmap.stored_sha(cm) or "")
        return cmap.StoredState(document, _version(cm))

    def load(self) -> cmap.StoredState | None:
        """The saved document, or None when there is none yet (or only a lock)."""
        with self._mu:
            cm = self._cm.get()
            self._seen = self._handed = None
            if cm is None:
                return None
            document = self._decode(cm)
            self._seen = cm
            stored = self._hand_out(cm, document)
            return stored if document else None

    def lock_info(self) -> locking.LockInfo | None:
        """The run lock as the annotations describe it now (anyone's, live or expired)."""
        with self._mu:
            return _lock_of(self._cm.get())

    def save(self, document: dict[str, Any], *, expected_version: str | None) -> cmap.StoredState:
        """Write the document if nobody else changed it since `expected_version`."""
        text = cmap.encode(document)
        if len(text.encode("utf-8")) > cmap.MAX_DOCUMENT_BYTES:
            raise ValueError(f"state document of {len(text)} bytes exceeds the ConfigMap limit")
        sha = cmap.checksum(text)
        with self._mu:
            # The checksum of the document at the caller's version (None: no state; "": a
            # version not handed out here, where only an exact resourceVersion will do).
            expected_sha = None if expected_version is None else (
                self._handed[1] if self._handed and self._handed[0] == expected_version else "")
            # Our last view serves if its document is the one expected (only our lock writes
            # moved it since); else it is read again as after a 409 (None: create it).
            base = self._seen
            if (base is None and expected_version is not None) or (
                    base is not None and not _matches(cmap.stored_sha(base), expected_sha)):
                base = self._reread_for_save(expected_sha, expected_version)
            for _ in range(_ROUNDS):
                try:
                    if base is None:
                        written = self._cm.create(self._new_configmap(text, {}))
                    else:
                        body = copy.deepcopy(base)
                        body["data"] = {cmap.STATE_KEY: text, cmap.CHECKSUM_KEY: sha}
                        written = self._cm.replace(body)
                except (APIConflict, APINotFound):
                    base = self._reread_for_save(expected_sha, None, sha)
                    if base is None or cmap.stored_sha(base) != sha:
                        continue
                    written = base  # an earlier attempt landed, its answer lost: our own 409
                self._seen = written
                return self._hand_out(written, json.loads(text))
            raise StateConflict(
                f"The state in ConfigMap {self._where} kept changing under this run.",
                "make sure no other dcgm-migrate run or controller edits it, then run again")

    def _reread_for_save(
        self, expected_sha: str | None, expected_version: str | None, saving: str | None = None
    ) -> Obj | None:
        """Before a write we cannot vouch for, or after a 409: the ConfigMap to write over
        (None: create it), or why not. Finding `saving` there: our earlier attempt landed."""
        current = self._cm.get()
        self._seen = None
        if current is None:
            if self._held is not None:
                raise StateConflict(
                    f"ConfigMap {self._where} was deleted while this run held its lock.",
                    "someone reset the migration state; run `dcgm-migrate status -n "
                    f"{self._cm.namespace}` and decide")
            if expected_sha is not None and expected_sha != cmap.EMPTY_SHA:
                raise StateConflict(
                    f"The state in ConfigMap {self._where} was deleted by someone else.",
                    f"run `dcgm-migrate status -n {self._cm.namespace}` and start again")
            return None
        self._decode(current)
        self._seen = current
        self._check_not_terminating(current)
        info = _lock_of(current)
        held_by_us = self._held is not None and locking.is_ours(info, self._held)
        if info is not None and not held_by_us and info.live(self._clock.now()):
            raise self._lock_held(info)
        if self._held is not None and not held_by_us:
            raise self._lost_lock(StateConflict, "removed or taken over", "ConfigMap ")
        current_sha = cmap.stored_sha(current)
        if not (_matches(current_sha, expected_sha) or _version(current) == expected_version
                or current_sha == saving):
            raise StateConflict(
                f"The state in ConfigMap {self._where} was changed by another run since "
                "this run read it.",
                f"run `dcgm-migrate status -n {self._cm.namespace}` to see the current state, "
                "then the command again")
        return current

    def check_free(self) -> None:
        """LockHeld now when another run that may be alive holds it (before any question)."""
        with self._mu:
            info = self.lock_info()
            if info is not None and info.live(self._clock.now()) and self._held is None \
                    and self.holder_gone(info) is None:
                raise self._lock_held(info)

    def _lock_held(self, info: locking.LockInfo) -> LockHeld:
        until = locking.format_time(info.expires) if info.expires else "an unreadable time"
        ns = self._cm.namespace
        message = (f"Another dcgm-migrate run holds the lock on {self._where}: "
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

    def _lost_lock(self, error: type[LockHeld | StateConflict], how: str,
                   on: str = "") -> MigrateError:
        return error(f"This run's lock on {on}{self._where} was {how}.",
                     "another run may be migrating: see `dcgm-migrate status -n "
                     f"{self._cm.namespace}` before going on")

    def _kept_changing(self, error: type[LockHeld | StateConflict], verb: str,
                       fix: str) -> MigrateError:
        return error(f"Could not {verb} the lock on {self._where}: it kept changing.", fix)

    def _reads(self) -> Iterator[Obj | None]:
        """The ConfigMap read afresh for each round of a write retried after conflicts."""
        for _ in range(_ROUNDS):
            yield self._cm.get()

    def _put_lock(self, current: Obj | None, lock: Lock | None) -> bool:
        """Write `lock`'s annotations over `current` (None: create it); False on a conflict."""
        annotations = locking.annotations_for(lock) if lock is not None else {}
        try:
            if current is None:
                written = self._cm.create(self._new_configmap(cmap.EMPTY_TEXT, annotations))
            else:
                body = copy.deepcopy(current)
                meta = body["metadata"]
                kept = {k: v for k, v in (meta.get("annotations") or {}).items()
                        if k not in locking.KEYS}
                meta["annotations"] = {**kept, **annotations}
                written = self._cm.replace(body)
        except (APIConflict, APINotFound) as exc:
            if current is None and isinstance(exc, APINotFound):
                raise  # a create answered 404: no namespace to take a lock in
            return False
        self._seen = written
        return True

    def acquire_lock(self, holder: str, ttl_seconds: float) -> Lock:
        """Take the lock (an expired one, or one whose holder is provably gone, taken over);
        LockHeld when another run that may be alive holds it."""
        here = self.holder_gone.here
        with self._mu:
            tried: Lock | None = None  # the lock our last attempt wrote, answered or not
            for current in self._reads():
                now = self._clock.now()
                info = _lock_of(current)
                gone = None
                if current is not None:
                    if tried is not None and locking.is_ours(info, tried):
                        # it landed, its answer lost: the retry's 409 was our own write
                        self._seen, self._held = current, tried
                        return tried
                    self._check_ours(current)
                    self._check_not_terminating(current)
                    self._seen = current
                    if info is not None and info.live(now):
                        gone = self.holder_gone(info)
                        if gone is None:
                            raise self._lock_held(info)
                tried = locking.new_lock(holder, now, ttl_seconds, info, process=here, gone=gone)
                if self._put_lock(current, tried):
                    self._held = tried
                    return tried
            raise self._kept_changing(LockHeld, "take", "another run is starting at the same "
                                      "moment; run the command again")

    def renew_lock(self, lock: Lock) -> Lock:
        """Push the expiry out by the lock's TTL; LockHeld if the lock is no longer ours."""
        with self._mu:
            for current in self._reads():
                info = _lock_of(current)
                if current is None or not locking.is_ours(info, lock):
                    self._held = None
                    raise self._lost_lock(
                        LockHeld, f"taken over by {info.holder}" if info else "removed")
                self._seen = current
                self._check_not_terminating(current)
                renewed = locking.renewed_lock(lock, self._clock.now())
                if self._put_lock(current, renewed):
                    self._held = renewed
                    return renewed
            raise self._kept_changing(LockHeld, "renew", f"run `dcgm-migrate status -n "
                                      f"{self._cm.namespace}` before going on")

    def release_lock(self, lock: Lock) -> None:
        """Drop the lock if it is still ours (someone else's lock is left alone)."""
        with self._mu:
            self._held = None
            for current in self._reads():
                if current is None or not locking.is_ours(_lock_of(current), lock) \
                        or self._put_lock(current, None):
                    return

    def force_unlock(self) -> str | None:
        """Remove whatever lock is there (`dcgm-migrate unlock`); the holder removed, or None."""
        with self._mu:
            for current in self._reads():
                if current is None:
                    return None
                self._check_ours(current)
                info = _lock_of(current)
                if info is None:
                    return None
                if self._put_lock(current, None):
                    if self._held is not None and locking.is_ours(info, self._held):
                        self._held = None
                    return info.holder
            raise self._kept_changing(StateConflict, "remove",
                                      "a run is active right now; stop it first")


StateStore = ConfigMapState  # what the commands and the run session type a store as


class ConfigMapStateStore(ConfigMapState):
    """The real store: the catalog's state ConfigMap in `namespace`, through `kube`."""

    def __init__(self, kube: Kube, namespace: str, common: Common | None = None,
                 clock: Clock | None = None) -> None:
        common = common or load_catalog().common
        super().__init__(cmap.KubeConfigMap(kube, namespace, common.state_configmap),
                         common.managed_by, clock or SystemClock(),
                         HolderCheck(pod=lambda ns, name: kube.get(kinds.POD, name, ns)))


LOCK_TTL_SECONDS = 120.0


class RunSession:
    """The store, lock and document version of one apply or rollback (a context manager)."""

    def __init__(self, store: StateStore, *, version: str | None, holder: str, clock: Clock,
                 listener: Listener) -> None:
        self.store: StateStore = store
        self._version = version
        self._holder = holder
        self._clock = clock
        self._listener = listener
        self._lock: Lock | None = None
        self._renewed = clock.monotonic()
        self._state: State | None = None  # the document as this run last saved it
        self._unsaved = False  # `_state` holds a confirmation not written yet (`save(later=)`)

    def __enter__(self) -> RunSession:
        self._lock = self.store.acquire_lock(self._holder, LOCK_TTL_SECONDS)
        self._renewed = self._clock.monotonic()
        said = takeover_message(self._lock)  # expired, or its expiry unreadable
        if said:
            self._listener.message(said)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._lock is None:
            return
        stopped = isinstance(error, KeyboardInterrupt)  # Ctrl-C, SIGTERM (errors.Interrupted)
        if stopped and self._state is not None:  # the history says by what (if it can be saved)
            name = error.name if isinstance(error, Interrupted) else "SIGINT"
            self._state.log("interrupted", signal=name)
            self._unsaved = True
        with contextlib.suppress(MigrateError):
            self.flush()
        released = False
        with contextlib.suppress(MigrateError):  # it expires on its own; never mask the
            self.store.release_lock(self._lock)  # run's own outcome
            released = True
        if stopped:
            self._listener.message(
                "interrupted: the run's lock is released" if released else
                "interrupted: the run's lock could not be released; it expires at "
                f"{format_time(self._lock.expires)}")
        self._lock = None

    def save(self, state: State, *, later: bool = False) -> None:
        """Write `state` on the version this run last saw (StateConflict if anyone else wrote).
        `later`: the change only confirms what the last save announced (a write's intent now
        done, a step found true already). It is written with the next save, by `flush` before
        a long wait, at the next lock renewal or when the run ends. A run killed first leaves
        the announcement, which its rerun checks against the cluster as it checks any intent:
        the same resume, one state write fewer per step."""
        self._state = state
        if later:
            self._unsaved = True
            return
        self._version = self.store.save(state.to_document(),
                                        expected_version=self._version).version
        self._unsaved = False

    def flush(self) -> None:
        """Write what `save(later=True)` kept back, if anything."""
        if self._unsaved and self._state is not None:
            self.save(self._state)

    def heartbeat(self) -> None:
        """Renew the lock when a quarter of its TTL has passed since the last renewal (and
        write what `save(later=True)` kept back, so `status` shows it during long waits)."""
        if self._lock is not None and (
                self._clock.monotonic() - self._renewed > LOCK_TTL_SECONDS / 4):
            self.flush()
            self._lock = self.store.renew_lock(self._lock)
            self._renewed = self._clock.monotonic()
