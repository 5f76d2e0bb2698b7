"""Container logs as the kubelet keeps and serves them.

The runtime writes each container's stdout and stderr to one file per container instance
(`<pod folder>/<container>/<restartCount>.log`, as under /var/log/pods), in the CRI log format
(`<RFC 3339 nano timestamp> <stream> <P|F> <content>`: F a full line, P a part of a longer one),
so that `timestamps`, `sinceSeconds`/`sinceTime` and `tailLines` filter by line as the kubelet's
`ReadLogs` (pkg/kubelet/kuberuntime/logs) does, and `follow` reads on until the container's
output ends.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

MAX_LINE = 16 * 1024  # longer lines are written as parts (P), as containerd does


def rfc3339_nano(epoch: float) -> str:
    stamp = datetime.fromtimestamp(epoch, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond:06d}000Z"


def parse_time(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp (nanoseconds cut to microseconds)."""
    head, dot, frac = text.rstrip("Z").partition(".")
    try:
        base = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return base + (float("0." + frac[:9]) if dot and frac.isdigit() else 0.0)


class LogWriter:
    """Copies a container's stdout and stderr pipes into its CRI log file on a thread;
    `done` is set once both have ended (the container's output is complete)."""

    def __init__(self, path: Path, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.path = path
        self.done = threading.Event()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab")
        self._pending = {"stdout": b"", "stderr": b""}
        self._thread = threading.Thread(target=self._run, args=(stdout, stderr), daemon=True,
                                        name=f"sim-log-{path.parent.name}")
        self._thread.start()

    def _emit(self, stream: str, content: bytes, full: bool) -> None:
        tag = b"F" if full else b"P"
        self._file.write(b"%s %s %s %s\n" % (rfc3339_nano(time.time()).encode(),
                                              stream.encode(), tag, content))

    def _feed(self, stream: str, data: bytes) -> None:
        buffer = self._pending[stream] + data
        while True:
            line, newline, rest = buffer.partition(b"\n")
            if newline:
                self._emit(stream, line, True)
                buffer = rest
            elif len(buffer) >= MAX_LINE:
                self._emit(stream, buffer[:MAX_LINE], False)
                buffer = buffer[MAX_LINE:]
            else:
                break
        self._pending[stream] = buffer
        self._file.flush()

    def _run(self, stdout: IO[bytes], stderr: IO[bytes]) -> None:
        selector = selectors.DefaultSelector()
        for name, pipe in (("stdout", stdout), ("stderr", stderr)):
            selector.register(pipe, selectors.EVENT_READ, name)
        try:
            while selector.get_map():
                for key, _ in selector.select():
                    data = os.read(key.fd, 65536)
                    if data:
                        self._feed(str(key.data), data)
                        continue
                    selector.unregister(key.fileobj)
                    tail = self._pending[str(key.data)]
                    if tail:  # the last line had no newline: a part, as containerd writes it
                        self._emit(str(key.data), tail, False)
                        self._file.flush()
        finally:
            selector.close()
            for pipe in (stdout, stderr):
                with contextlib.suppress(OSError):
                    pipe.close()
            self._file.close()
            self.done.set()


@dataclass(frozen=True)
class LogOptions:
    """The pods/log query (`PodLogOptions`)."""

    follow: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since: float | None = None  # epoch seconds (sinceSeconds or sinceTime)
    limit_bytes: int | None = None


@dataclass(frozen=True)
class _Line:
    stamp: str
    content: bytes
    full: bool

    def render(self, timestamps: bool) -> bytes:
        text = self.content + (b"\n" if self.full else b"")
        return (self.stamp.encode() + b" " + text) if timestamps else text


def _parse(raw: bytes) -> _Line | None:
    parts = raw.split(b" ", 3)
    if len(parts) < 3:
        return None
    content = parts[3] if len(parts) == 4 else b""
    return _Line(parts[0].decode(), content, parts[2] == b"F")


def _keep(line: _Line, since: float | None) -> bool:
    if since is None:
        return True
    stamp = parse_time(line.stamp)
    return stamp is None or stamp >= since


class _Budget:
    """`limitBytes`: what is left to send (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    def take(self, chunk: bytes) -> bytes:
        if self.left is None:
            return chunk
        chunk = chunk[:self.left]
        self.left -= len(chunk)
        return chunk

    @property
    def spent(self) -> bool:
        return self.left is not None and self.left <= 0


def _lines(data: bytes, since: float | None) -> list[_Line]:
    parsed = (_parse(raw) for raw in data.splitlines())
    return [ln for ln in parsed if ln is not None and _keep(ln, since)]


def read(path: Path, options: LogOptions, done: threading.Event | None = None,
         poll: float = 0.1) -> Iterator[bytes | None]:
    """The log as pods/log answers it, in chunks; with `follow`, reads on (yielding None while
    idle) until `done` is set and everything written is sent."""
    budget = _Budget(options.limit_bytes)
    with path.open("rb") as handle:
        data = handle.read()
        offset = data.rfind(b"\n") + 1
        lines = _lines(data[:offset], options.since)
        if options.tail_lines is not None:
            lines = lines[len(lines) - options.tail_lines:] if options.tail_lines else []
        chunk = budget.take(b"".join(ln.render(options.timestamps) for ln in lines))
        if chunk:
            yield chunk
        while options.follow and not budget.spent:
            finished = done is None or done.is_set()
            handle.seek(offset)
            data = handle.read()
            cut = data.rfind(b"\n") + 1
            if cut:
                offset += cut
                chunk = budget.take(b"".join(ln.render(options.timestamps)
                                             for ln in _lines(data[:cut], options.since)))
                if chunk:
                    yield chunk
                continue
            if finished:
                return
            time.sleep(poll)
            yield None
