"""The fork server (tests/helpers/forkserver.py) stands for a fresh `python -m ...`: a probe
module sees the same start in a forked child as in a plain subprocess (but its own pid and
random seed), each child its own environment, argv and cwd; exit codes, uncaught exceptions,
signal deaths, atexit and non-daemon threads end a child as they end an interpreter; and the
real CLI's lock names the child's own pid and start time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from migrator.engine.state import lock as liveness
from migrator.engine.state import lock as locking
from migrator.model import kinds
from tests.helpers import crash, forkserver
from tests.helpers.forkprobe import PROBED
from tests.reliability.conftest import APPLY, NS, Env

PROBE = [sys.executable, "-m", "tests.helpers.forkprobe"]
OWN = ("pid", "random")  # what differs between any two processes


@pytest.fixture(scope="module")
def server() -> Iterator[forkserver.Server]:
    """The worker's fork server; one of these tests' own when DCGM_TEST_FORKSERVER=0 has the
    CLI runs start plain (the server is still what is under test here)."""
    shared = forkserver.server(crash.cli_env())
    if shared is not None:
        yield shared
        return
    own = forkserver.start_server(crash.cli_env())
    yield own
    own.close()


def _forked(server: forkserver.Server, *args: str, env: dict[str, str] | None = None,
            cwd: Path = crash.REPO) -> subprocess.Popen[str]:
    return forkserver.Forked(server, [*PROBE, *args], str(cwd), crash.cli_env(env))


def _plain(*args: str, env: dict[str, str] | None = None, cwd: Path = crash.REPO
           ) -> subprocess.Popen[str]:
    return subprocess.Popen([*PROBE, *args], cwd=cwd, env=crash.cli_env(env),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _ended(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any], list[str], str]:
    """Exit code, what the probe saw, its further stdout lines, its stderr."""
    out, err = proc.communicate(timeout=60)
    first, *rest = out.splitlines()
    return proc.returncode, json.loads(first), rest, err


def test_a_forked_child_starts_as_a_fresh_interpreter_does(
        server: forkserver.Server) -> None:
    code, forked, _, err = _ended(_forked(server, env={PROBED: "same"}))
    assert code == 0, err
    _, plain, _, _ = _ended(_plain(env={PROBED: "same"}))
    differ = {k for k in plain if forked[k] != plain[k]}
    assert differ == set(OWN), {k: (forked[k], plain[k]) for k in differ}
    assert forked["fds"] == [0, 1, 2, 3]  # and the one listing /proc/self/fd: nothing leaked


def test_each_child_sees_its_own_environment_argv_cwd_and_pid(
        server: forkserver.Server, tmp_path: Path) -> None:
    one = _forked(server, "exit", "0", env={PROBED: "one"})
    two = _forked(server, "atexit", env={PROBED: "two"}, cwd=tmp_path)
    (_, first, _, _), (_, second, _, _) = _ended(one), _ended(two)
    assert (first["value"], second["value"]) == ("one", "two")
    assert first["argv"][1:] == ["exit", "0"] and second["argv"][1:] == ["atexit"]
    assert first["argv"][0] == second["argv"][0] == str(crash.REPO / "tests/helpers/forkprobe.py")
    assert second["orig_argv"] == [*PROBE, "atexit"]
    assert (first["cwd"], second["cwd"]) == (str(crash.REPO), str(tmp_path))
    assert (first["path0"], second["path0"]) == (str(crash.REPO), str(tmp_path))
    assert (first["pid"], second["pid"]) == (one.pid, two.pid) and one.pid != two.pid
    assert first["random"] != second["random"]  # reseeded at fork
    assert first["environ"] == crash.cli_env({PROBED: "one"})


@pytest.mark.parametrize(("args", "code", "says"), [
    (("exit", "3"), 3, ""),
    (("raise",), 1, "RuntimeError: probe raised"),
    (("interrupt",), -signal.SIGINT, "KeyboardInterrupt"),
    (("thread",), 0, ""),
    (("atexit",), 0, ""),
])
def test_a_child_ends_as_the_interpreter_ends_it(server: forkserver.Server,
                                                 args: tuple[str, ...], code: int,
                                                 says: str) -> None:
    f_code, _, f_out, f_err = _ended(_forked(server, *args))
    p_code, _, p_out, p_err = _ended(_plain(*args))
    assert f_code == p_code == code
    assert f_out == p_out
    assert says in p_err
    assert _from_the_probe(f_err) == _from_the_probe(p_err)


def _from_the_probe(stderr: str) -> list[str]:
    """A traceback from the probe's first frame on: above it, a fresh interpreter has runpy's
    frames and a forked child the server's too."""
    lines = stderr.splitlines()
    first = next((i for i, line in enumerate(lines) if "forkprobe.py" in line), 0)
    return lines[:1] + lines[first:]


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_signal_death_reads_as_popen_reads_it(server: forkserver.Server,
                                                signum: int) -> None:
    proc = _forked(server, "sleep")
    assert proc.stdout is not None and json.loads(proc.stdout.readline())["pid"] == proc.pid
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.05)
    assert proc.poll() is None
    proc.send_signal(signum)
    assert proc.wait(30) == -signum
    proc.send_signal(signum)  # after the end: nothing is signalled, as with Popen
    assert proc.communicate() == ("", "")


def test_a_child_let_go_of_before_it_ends_is_still_reaped(server: forkserver.Server) -> None:
    proc = _forked(server, "sleep")
    assert proc.stdout is not None and proc.stderr is not None
    assert isinstance(proc, forkserver.Forked) and proc._channel is not None
    proc._channel.close()  # the test side's end goes before the child's status came
    proc._channel = None
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{proc.pid}").exists():  # a zombie until the server reaps it
        assert time.monotonic() < deadline, "the fork server did not reap its child"
        time.sleep(0.01)
    proc.returncode = -signal.SIGKILL
    proc.stdout.close()
    proc.stderr.close()
    assert _ended(_forked(server, "exit", "5"))[0] == 5  # and it serves on


def test_large_output_and_a_timeout_of_communicate(server: forkserver.Server) -> None:
    proc = _forked(server, "big")
    code, _, out, err = _ended(proc)
    assert code == 0 and out == ["o" * (1 << 20)] and err == "e" * (1 << 20)
    sleeper = _forked(server, "sleep")
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.communicate(timeout=0.2)
    sleeper.kill()
    out2, _ = sleeper.communicate()
    assert sleeper.returncode == -signal.SIGKILL and json.loads(out2)["argv"][1:] == ["sleep"]


def test_a_request_whose_environment_changes_the_start_runs_plain(
        server: forkserver.Server) -> None:
    argv = crash.argv(None, "--version")
    base = crash.cli_env()
    assert server.serves(argv, base)
    assert "DCGM_MIGRATE_UNREAD" not in server.reads and "NO_COLOR" not in server.reads
    assert server.serves(argv, {**base, "DCGM_MIGRATE_UNREAD": "x", "NO_COLOR": "1"})
    assert "TYPER_USE_RICH" in server.reads  # read by `import typer`, so it must agree
    # the kubernetes client's import reads it (kube_config.KUBE_CONFIG_DEFAULT_LOCATION):
    # a child of a server started without it could not be the same process
    assert "KUBECONFIG" in server.reads
    assert not server.serves(argv, {**base, "KUBECONFIG": "/elsewhere"})
    assert not server.serves(argv, {**base, "TYPER_USE_RICH": "0"})
    assert not server.serves(argv, {**base, "PYTHONHASHSEED": "7"})
    assert not server.serves(argv, {**base, "LC_ALL": "C"})
    assert not server.serves([sys.executable, "-m", "pip", "--version"], base)


def test_the_lock_names_the_forked_child(server: forkserver.Server,
                                        fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    env.sim.server.faults.update(hang_nth_write=2)  # write 1 took the lock, 2 saves the state
    proc = forkserver.Forked(server, crash.argv(env.kubeconfig, *APPLY), str(crash.REPO),
                             crash.cli_env())
    try:
        assert env.sim.server.faults.wait_held(60), "no second write"
        cm = env.sim.store.get(kinds.CONFIGMAP, NS, "dcgm-migrate-state")
        info = locking.read(cm["metadata"]["annotations"])
        assert info is not None and info.process is not None
        assert info.holder.endswith(f" pid {proc.pid}") and info.process.pid == proc.pid
        stat = liveness.read_stat(proc.pid)
        assert stat is not None and info.process.started == stat[1]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        env.sim.server.faults.release_held()
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
