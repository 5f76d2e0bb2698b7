"""Live progress on stderr: rich bars on a terminal, plain timestamped lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from migrator.cli.commandline import Selection, complete
from migrator.engine.progress import (
    EndpointProgress,
    Listener,
    PhaseEvent,
    RolloutProgress,
    StepEvent,
)


def eta_text(p: RolloutProgress) -> str:
    """`ETA 1h02m` at the rollout's pace so far ("" before the first pod was updated)."""
    if p.eta_seconds is None:
        return ""
    left = int(p.eta_seconds + 0.5)
    hours, rest = divmod(left, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"ETA {hours}h{minutes:02d}m"
    return f"ETA {minutes}m{seconds:02d}s" if minutes else f"ETA {seconds}s"


class PlainProgress(Listener):
    """One line per meaningful change. Under `-o json/yaml` warnings are said here; with
    `warnings=False` (a table prints them) they are held for `say_held`."""

    def __init__(self, stream: TextIO | None = None, interval: float = 2.0,
                 warnings: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.interval = interval
        self.warnings = warnings
        self.held: list[str] = []  # warnings left to the report
        self._last: dict[str, tuple[float, tuple[int, ...]]] = {}
        self._settling: float | None = None  # the countdown's length while one runs
        self.selection = Selection.current()  # the commands it says point at this cluster

    def _say(self, text: str) -> None:
        self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.stream.flush()

    def phase(self, event: PhaseEvent) -> None:
        if event.status == "planning":
            for note in (event.plan.notes if event.plan else ()):
                self._say(f"phase {event.number} ({event.name}): {note}")
            return
        extra = f": {event.message}" if event.message else ""
        self._say(f"phase {event.number} ({event.name}) {event.status}{extra}")

    def step(self, event: StepEvent) -> None:
        self._say(f"  {event.status:8} {event.step.object} ({event.step.type})")

    def _changed(self, key: str, counts: tuple[int, ...], throttle: bool = False) -> bool:
        """Whether `counts` are news for `key` (with `throttle`, at most every `interval`)."""
        now, last = time.monotonic(), self._last.get(key)
        if last and (last[1] == counts or (throttle and now - last[0] < self.interval)):
            return False
        self._last[key] = (now, counts)
        return True

    def rollout(self, p: RolloutProgress) -> None:
        done = p.updated == p.desired == p.available
        if self._changed(p.daemonset, (p.updated, p.available, p.desired), not done):
            eta = eta_text(p)
            self._say(f"  rollout  DaemonSet/{p.daemonset}: updated {p.updated}/{p.desired}, "
                      f"available {p.available}/{p.desired}" + (f", {eta}" if eta else ""))

    def endpoints(self, p: EndpointProgress) -> None:
        if self._changed(f"svc/{p.service}", (p.ready, p.baseline)):
            self._say(f"  endpoints Service/{p.service}: {p.ready} ready "
                      f"(baseline {p.baseline})")

    def settle(self, seconds_left: float) -> None:
        if self._settling is None:
            self._settling = seconds_left
            self._say(f"  settling {seconds_left:.0f}s (kube-proxy programs the selector "
                      "change)")
        if seconds_left <= 0:
            self._say(f"  settled after {self._settling:.0f}s")
            self._settling = None

    def message(self, text: str) -> None:
        self._say(complete(text, self.selection))

    def show_warning(self, text: str) -> None:
        if self.warnings:
            self.message(f"warning: {text}")
        elif text not in self.held:  # `status --watch` reads the same warnings every refresh
            self.held.append(text)

    def say_held(self) -> None:  # the command failed: no report will print them
        for text in self.held:
            self.message(f"warning: {text}")
        self.held.clear()

    def close(self) -> None:
        pass


class RichProgress(PlainProgress):
    """Bars per DaemonSet and per Service, redrawn in place on a terminal."""

    def __init__(self, warnings: bool = True) -> None:
        super().__init__(warnings=warnings)
        self.console = Console(stderr=True)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[extra]}"),
                                 console=self.console, transient=False)
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def _say(self, text: str) -> None:
        self.progress.console.print(escape(text))

    def _bar(self, key: str, label: str, total: int, completed: int, extra: str) -> None:
        # created at its current count: a bar never flashes 0/N (which would read as a loss)
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(label, total=max(total, 1),
                                                     completed=completed, extra="")
        self.progress.update(self.tasks[key], total=max(total, 1), completed=completed,
                             extra=extra)

    def rollout(self, p: RolloutProgress) -> None:
        self._bar(f"ds/{p.daemonset}", f"rollout {p.daemonset}", p.desired,
                  min(p.updated, p.available),
                  f"updated {p.updated} available {p.available} {eta_text(p)}")

    def endpoints(self, p: EndpointProgress) -> None:
        self._bar(f"svc/{p.service}", f"endpoints {p.service}", p.baseline, p.ready,
                  f"baseline {p.baseline}")

    def settle(self, seconds_left: float) -> None:
        self._bar("settle", "settle (kube-proxy)", 1, 1 if seconds_left <= 0 else 0,
                  f"{seconds_left:.0f}s left")

    def close(self) -> None:
        self.progress.stop()


def make_progress(quiet: bool, warnings: bool = True) -> PlainProgress | None:
    """Rich bars on a TTY, plain lines otherwise; None when output must stay silent."""
    if quiet:
        return None
    return (RichProgress if sys.stderr.isatty() else PlainProgress)(warnings=warnings)
