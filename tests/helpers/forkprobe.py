"""`python -m tests.helpers.forkprobe ACTION...`: prints, as one JSON line on stdout, what a
process sees of how it was started, then does ACTION (tests/reliability/test_forkserver.py
compares a fork server's child with a fresh interpreter through it).

Actions: `exit N`, `raise` (an uncaught exception), `interrupt` (an uncaught
KeyboardInterrupt), `sleep` (until signalled), `big` (1 MiB on stdout and stderr), `thread`
(a non-daemon thread prints after the main thread ends), `atexit` (an atexit handler prints)."""

from __future__ import annotations

import atexit
import json
import os
import random
import sys
import threading
import time
from typing import Any, TextIO

PROBED = "FORKPROBE_VALUE"


def _stream(stream: TextIO) -> dict[str, Any]:
    return {"fd": stream.fileno(), "tty": stream.isatty(), "encoding": stream.encoding,
            "errors": stream.errors, "mode": getattr(stream, "mode", None),
            "line_buffering": getattr(stream, "line_buffering", None),
            "write_through": getattr(stream, "write_through", None),
            "newlines": getattr(stream, "newlines", None),
            "same": stream is getattr(sys, f"__{('stdin', 'stdout', 'stderr')[stream.fileno()]}__")}


def seen() -> dict[str, Any]:
    """How this process was started, as far as it can tell."""
    import __main__

    return {
        "pid": os.getpid(), "argv": sys.argv, "orig_argv": sys.orig_argv, "cwd": os.getcwd(),
        "path0": sys.path[0], "value": os.environ.get(PROBED), "environ": dict(os.environ),
        "stdio": [_stream(s) for s in (sys.stdin, sys.stdout, sys.stderr)],
        "stdin": sys.stdin.read(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "main": {"name": __main__.__name__, "file": getattr(__main__, "__file__", None),
                 "spec": getattr(getattr(__main__, "__spec__", None), "name", None)},
        "random": random.random(), "threads": threading.active_count(),
        "umask": os.umask(0o022), "sigmask": sorted(int(s) for s in _sigmask()),
        "handlers": {n: _handler(n) for n in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD")},
        "pgid": os.getpgid(0), "sid": os.getsid(0),
    }


def _sigmask() -> set[Any]:
    import signal

    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _handler(name: str) -> str:
    import signal

    handler = signal.getsignal(getattr(signal, name))
    return str(getattr(handler, "__name__", handler))


def _late() -> None:
    time.sleep(0.2)
    print("thread done")


def act(args: list[str]) -> None:
    """Do what the arguments say (see the module's docstring)."""
    action = args[0] if args else ""
    if action == "exit":
        sys.exit(int(args[1]))
    if action == "raise":
        raise RuntimeError("probe raised")
    if action == "interrupt":
        raise KeyboardInterrupt
    if action == "sleep":
        time.sleep(600)
    if action == "big":
        sys.stdout.write("o" * (1 << 20))
        sys.stderr.write("e" * (1 << 20))
    if action == "thread":
        threading.Thread(target=_late).start()
    if action == "atexit":
        atexit.register(lambda: print("atexit ran"))


if __name__ == "__main__":
    print(json.dumps(seen()), flush=True)
    act(sys.argv[1:])
