"""Stopping a run on a signal without leaving a write half-recorded: inside `shielded()` (a write
and the save that records it) a signal is held until the block ends; a second raises at once.
Python drops an exception raised in a finalizer, so `check()` raises a signal kept since.
Only the main thread, which runs the migration, touches the shield."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from migrator.errors import Interrupted


class _Shield:  # the process-wide state, on the class itself
    depth = 0
    held: Interrupted | None = None
    received: Interrupted | None = None  # the signal, until `check` or `forget` takes it


def interrupt(error: Interrupted) -> None:
    """Raise `error` now, or hold it until the current shielded block ends."""
    _Shield.received = error
    if _Shield.depth and _Shield.held is None:
        _Shield.held = error
        return
    _Shield.held = None
    raise error


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Hold signals until the block ends; then raise the held one (if the block succeeded)."""
    check()
    _Shield.depth += 1
    try:
        yield
    except BaseException:
        _Shield.depth -= 1
        if not _Shield.depth:
            _Shield.held = None  # the block's own error wins; the run is stopping anyway
        raise
    _Shield.depth -= 1
    if not _Shield.depth and _Shield.held is not None:
        held, _Shield.held = _Shield.held, None
        raise held


def check() -> None:
    """Raise, once, a received signal that did not stop the run (outside a shielded block and
    any `finally` cleanup)."""
    if _Shield.received is not None and not _Shield.depth and \
            not isinstance(sys.exc_info()[1], KeyboardInterrupt):
        error, _Shield.received = _Shield.received, None
        raise error


def forget() -> None:
    """The command is over: nothing is kept for the next one."""
    _Shield.received = _Shield.held = None
