"""Where the suite's CPU goes: a pytest plugin kept out of the normal run.

    python -m pytest -p tests.helpers.cputime [--cpu-report FILE] [--cpu-profile FILE] ...

Per test (setup, call and teardown together): the worker process's CPU time (every thread of
it: the sim's API server and controllers run in-process), the CPU of the child processes it
waited for (CLI subprocesses, pip, kubectl) and wall time. Wall times on a shared machine are
noise; CPU seconds are what the suite costs. At the end the controller prints the sum and the
top 25, and writes every row as tab-separated values to FILE when given. Works with and without
xdist (each worker sends its rows to the controller in the test report).

`--cpu-profile FILE` (with `-n 0`) runs cProfile, timed by each thread's own CPU clock (wall
time would charge waits for the GIL to whatever ran), in every thread the tests start (the sim's
server and controllers too, not only the main thread) and writes the merged statistics to FILE
(`python -m pstats FILE`, or `sort cumtime` / `stats 40` there)."""

from __future__ import annotations

import cProfile
import pstats
import resource
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import forkserver

KEY = "cputime"
_rows: dict[str, tuple[float, float, float]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", default=None, metavar="FILE",
                     help="write per-test CPU seconds (self, children, wall) as TSV to FILE")
    parser.addoption("--cpu-profile", default=None, metavar="FILE",
                     help="cProfile every thread (run with -n 0); merged stats to FILE")


_profiles: list[cProfile.Profile] = []


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("--cpu-profile", None):
        return
    run = threading.Thread.run

    def profiled(self: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        _profiles.append(profile)
        profile.runcall(run, self)

    threading.Thread.run = profiled  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    _profiles.insert(0, main)  # the main thread's, first
    main.enable()


def pytest_unconfigure(config: pytest.Config) -> None:
    out = config.getoption("--cpu-profile", None)
    if not out or not _profiles:
        return
    _profiles[0].disable()
    stats = pstats.Stats(_profiles[0])
    for profile in _profiles[1:]:
        try:
            stats.add(profile)
        except TypeError:  # a thread that never ran any Python code
            continue
    stats.dump_stats(out)


def _children() -> float:
    """Waited-for children, and the CLI runs of the fork server (its children, not ours)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime + forkserver.children_cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None
                            ) -> Generator[None, Any, None]:
    cpu, kids, wall = time.process_time(), _children(), time.monotonic()
    item.stash[_START] = (cpu, kids, wall)
    yield


_START = pytest.StashKey[tuple[float, float, float]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    if call.when != "teardown" or _START not in item.stash:
        return
    cpu, kids, wall = item.stash[_START]
    report = outcome.get_result()
    report.user_properties.append((KEY, (time.process_time() - cpu, _children() - kids,
                                         time.monotonic() - wall)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for key, value in report.user_properties:
        if key == KEY and report.when == "teardown":
            seconds: list[float] = [float(x) for x in value]  # type: ignore[attr-defined]
            _rows[report.nodeid] = (seconds[0], seconds[1], seconds[2])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _rows:
        return
    rows = sorted(_rows.items(), key=lambda r: -(r[1][0] + r[1][1]))
    own = sum(r[0] for _, r in rows)
    kids = sum(r[1] for _, r in rows)
    write = terminalreporter.write_line
    write(f"== CPU: {len(rows)} tests, {own + kids:.0f} CPU-s "
          f"({own:.0f} in the workers, {kids:.0f} in child processes)")
    for nodeid, (a, b, w) in rows[:25]:
        write(f"{a + b:8.1f} cpu  {a:7.1f} self  {b:7.1f} children  {w:7.1f} wall  {nodeid}")
    out = config.getoption("--cpu-report")
    if out:
        Path(out).write_text("".join(f"{a:.3f}\t{b:.3f}\t{w:.3f}\t{n}\n"
                                     for n, (a, b, w) in rows))
