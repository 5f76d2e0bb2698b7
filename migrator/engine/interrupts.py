"""Stopping a run on a signal without leaving a write half-recorded.

The CLI turns SIGINT (Ctrl-C) and SIGTERM into `migrator.errors.Interrupted` through
`interrupt(...)`, called from its signal handler on the main thread. Outside a `shielded()`
block it is raised at once, wherever the run is (a wait, a read, planning): nothing is lost,
the run session releases the lock on the way out. Inside one — a write and the state save that
records it as done, or a state save — it is held until the block ends and raised there, so the
write in flight finishes and is recorded before the run stops. A second signal while one is
held is raised at once (the way out of a write that hangs).

Signals reach only the main thread; the shield is a process-wide counter, touched only by the
thread that runs the migration.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from migrator.errors import Interrupted


class _Shield:
    depth = 0
    held: Interrupted | None = None


_shield = _Shield()


def interrupt(error: Interrupted) -> None:
    """Raise `error` now, or hold it until the current shielded block ends."""
    if _shield.depth and _shield.held is None:
        _shield.held = error
        return
    _shield.held = None
    raise error


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold signals until the block ends; then raise the held one (if the block succeeded)."""
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


def pending() -> Interrupted | None:
    """The signal held for the end of the current block, if any."""
    return _shield.held
