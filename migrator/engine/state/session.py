"""One run's hold on the state (what `commands` opens around apply or rollback): the lock,
taken on entry and released on exit (a failed release is left to expire); `save` on the version
this run last saw (anyone else's change is a conflict); `heartbeat` (the runner's waits) renews
the lock each quarter TTL; Ctrl-C or SIGTERM is recorded in the history as `interrupted`.
A dry run never opens one."""

from __future__ import annotations

import contextlib
from types import TracebackType

from migrator.engine.clock import Clock
from migrator.engine.progress import Listener
from migrator.engine.state.document import State
from migrator.engine.state.lock import Lock, format_time, takeover_message
from migrator.engine.state.store import StateStore
from migrator.errors import Interrupted, MigrateError

LOCK_TTL_SECONDS = 120.0


class RunSession:
    """The store, lock and document version of one apply or rollback (a context manager)."""

    def __init__(self, store: StateStore, *, version: str | None, holder: str, clock: Clock,
                 listener: Listener, ttl_seconds: float = LOCK_TTL_SECONDS) -> None:
        self.store: StateStore = store
        self._version = version
        self._holder = holder
        self._clock = clock
        self._listener = listener
        self._ttl = ttl_seconds
        self._lock: Lock | None = None
        self._renewed = clock.monotonic()
        self._state: State | None = None  # the document as this run last saved it

    def __enter__(self) -> RunSession:
        self._lock = self.store.acquire_lock(self._holder, self._ttl)
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
            with contextlib.suppress(MigrateError):
                self.save(self._state)
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

    def save(self, state: State) -> None:
        """Write `state` on the version this run last saw (StateConflict if anyone else wrote)."""
        self._version = self.store.save(state.to_document(),
                                        expected_version=self._version).version
        self._state = state

    def heartbeat(self) -> None:
        """Renew the lock when a quarter of its TTL has passed since the last renewal."""
        if self._lock is not None and self._clock.monotonic() - self._renewed > self._ttl / 4:
            self._lock = self.store.renew_lock(self._lock)
            self._renewed = self._clock.monotonic()
