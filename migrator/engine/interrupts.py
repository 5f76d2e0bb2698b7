"""Stopping a run on a signal without leaving a write half-recorded.

The CLI turns SIGINT (Ctrl-C) and SIGTERM into `migrator.errors.Interrupted` through
`interrupt(...)`, called from its signal handler on the main thread. Outside a `shielded()`
block it is raised at once, wherever the run is (a wait, a read, planning): nothing is lost,
the run session releases the lock on the way out. Inside one — a write and the state save that
records it as done, or a state save — it is held until the block ends and raised there, so the
write in flight finishes and is recorded before the run stops. A second signal while one is
held is raised at once (the way out of a write that hangs).

Python drops an exception raised inside a finalizer (`__del__`, a generator closed as it is
collected: "Exception ignored in ..."), and a signal handler runs wherever the main thread
is, so a signal's exception can be lost there. The signal is therefore also kept until it has
stopped the run: `check()` raises it at the next write (every write and save enters
`shielded()`) or wait (`engine/waiting.py` checks on every pass), so a lost one stops the run
within a second of waiting or before its next write, never after the run is over.

Signals reach only the main thread; the shield is a process-wide counter, touched only by the
thread that runs the migration.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from migrator.errors import Interrupted


class _Shield:
    depth = 0
    held: Interrupted | None = None
    received: Interrupted | None = None  # the signal, until `check` or `forget` takes it


_shield = _Shield()


def interrupt(error: Interrupted) -> None:
    """Raise `error` now, or hold it until the current shielded block ends."""
    _shield.received = error
    if _shield.depth and _shield.held is None:
        _shield.held = error
        return
    _shield.held = None
    raise error


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold signals until the block ends; then raise the held one (if the block succeeded)."""
    check()
    _shield.depth += 1
    try:
        yield
    except BaseException:
        _shield.depth -= 1
        if not _shield.depth:
            _shield.held = None  # the block's own error wins; the run is stopping anyway
        raise
    _shield.depth -= 1
    if not _shield.depth and _shield.held is not None:
        held, _shield.held = _shield.held, None
        raise held


def check() -> None:
    """Raise the signal received whose exception has not stopped the run (Python dropped it
    in a finalizer, or a shielded block's own error replaced it and was handled). Outside a
    shielded block only, and not while one is on its way out (cleanup in a `finally`); at
    most once."""
    if _shield.received is not None and not _shield.depth and \
            not isinstance(sys.exc_info()[1], KeyboardInterrupt):
        error, _shield.received = _shield.received, None
        raise error


def forget() -> None:
    """The command is over (its signal handlers removed): nothing is kept for the next one."""
    _shield.received = _shield.held = None
