"""Run one command as a child process and measure it: wall time, peak RSS, CPU time.

`os.wait4` gives the child's own rusage (ru_maxrss is its peak resident set, KiB on Linux),
so each measurement is of that process alone, not the maximum over every child so far.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

CLI = (sys.executable, "-m", "migrator")
IMPORT_COMMANDS = (sys.executable, "-c", "import migrator.commands")
# Bytecode cached as an installed tool has it (pip compiles it at install): a shell or CI with
# PYTHONDONTWRITEBYTECODE would recompile every module on every run and time that instead.
PYCACHE = str(Path(os.environ.get("TMPDIR", "/tmp")) / "dcgm-migrate-bench-pycache")


def cli_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the CLI is measured in: this one, with bytecode cached."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("PYTHONPYCACHEPREFIX", PYCACHE)
    return env


@dataclass(frozen=True)
class Measured:
    argv: tuple[str, ...]
    code: int
    wall_s: float
    peak_rss_mb: float
    cpu_s: float
    stdout: bytes
    stderr: bytes

    def checked(self, what: str, ok: tuple[int, ...] = (0,)) -> Measured:
        """This run, or RuntimeError naming `what` and the end of its stderr."""
        if self.code not in ok:
            raise RuntimeError(f"{what} exited {self.code}: "
                               f"{self.stderr.decode(errors='replace')[-800:]}")
        return self


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None, keep_stdout: bool = True,
        timeout: float = 3600.0) -> Measured:
    """Run `argv` to completion; stdout goes to a file (or /dev/null), never through a pipe
    we would have to drain while timing."""
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-{os.getpid()}-{time.time_ns()}"
    with open(out_path, "wb") as out, open(f"{out_path}.err", "wb") as err:
        stdout = out if keep_stdout else subprocess.DEVNULL
        began = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=stdout, stderr=err, stdin=subprocess.DEVNULL,
                                env=dict(env) if env is not None else None, cwd=cwd)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - began
        proc.returncode = os.waitstatus_to_exitcode(status)
    data = out_path.read_bytes() if keep_stdout else b""
    errs = Path(f"{out_path}.err").read_bytes()
    out_path.unlink(missing_ok=True)
    Path(f"{out_path}.err").unlink(missing_ok=True)
    return Measured(tuple(argv), proc.returncode, wall, usage.ru_maxrss / 1024.0,
                    usage.ru_utime + usage.ru_stime, data, errs)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a running process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
