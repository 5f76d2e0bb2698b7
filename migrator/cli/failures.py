"""Where errors become messages and exit codes, and SIGINT/SIGTERM become `Interrupted`."""

from __future__ import annotations

import functools
import shlex
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import typer

from migrator.cli import render
from migrator.cli.commandline import fix_line, invoked
from migrator.cli.options import Output
from migrator.engine import interrupts
from migrator.errors import Interrupted, MigrateError, exit_code_for

F = TypeVar("F", bound=Callable[..., Any])


def handles_errors(fn: F, regroup: Callable[[dict[str, Any]], dict[str, Any]] = dict) -> F:
    """Errors to messages and exit codes (--debug adds the traceback); `regroup`: the keyword
    arguments as `fn` takes them (options.spread)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.get("debug"))
        try:
            with _stop_on_signals():
                return fn(*args, **regroup(kwargs))
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the lock is released already
            name = exc.name if isinstance(exc, Interrupted) else "SIGINT"
            typer.echo(f"interrupted ({name}): run the same command again to resume"
                       + (f": {again}" if (again := _same_command()) else ""), err=True)
            raise typer.Exit(exc.exit_code if isinstance(exc, Interrupted) else 130) from None
        except Exception as exc:
            if debug:
                traceback.print_exc(file=sys.stderr)
            if not isinstance(exc, MigrateError):
                typer.echo(f"error: unexpected {type(exc).__name__}: {exc}", err=True)
                typer.echo("fix: report it with the traceback" if debug else
                           "fix: rerun with --debug for the traceback and report it", err=True)
                raise typer.Exit(3) from None
            hint = fix_line(exc.hint, invoked())
            render.error(exc, hint)
            output = kwargs.get("output")
            if isinstance(output, Output) and output is not Output.table:
                render.raw({"error": render.error_document(exc, hint)}, output)
            raise typer.Exit(exit_code_for(exc)) from None

    return cast(F, wrapper)


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise `errors.Interrupted` once the write in flight is recorded
    (engine/interrupts.py); exit 130 / 143. Only the main thread receives signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        interrupts.interrupt(Interrupted(signum, signal.Signals(signum).name))

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            if handler is not None:
                signal.signal(number, handler)
        interrupts.forget()


def _same_command() -> str | None:
    """This process's command line, to print after an interruption (None if not the CLI)."""
    started_as = Path(sys.argv[0]).stem if sys.argv else ""  # `.exe` on Windows
    if started_as not in ("dcgm-migrate", "kubectl-dcgm_migrate", "__main__"):
        return None
    prog = "kubectl dcgm-migrate" if started_as.startswith("kubectl-") else "dcgm-migrate"
    return " ".join([prog, *map(shlex.quote, sys.argv[1:])])
