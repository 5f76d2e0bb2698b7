"""What a user meets at the edges of a run, through the real CLI against the simulated cluster:
`guard` on a port in use and in a namespace without DCGM (exit 2, the address or namespace,
a fix that works as printed), Ctrl-C and Ctrl-D at the question (130 and 2, nothing written,
as docs/runbook.md says), an API server that stops answering (the real elapsed time, and that
a rerun resumes), and a cluster rolled back on purpose (closing lines that say what it is,
`verify` exit 0, the printed `apply` migrating it again)."""

from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable

import pytest

from migrator.errors import APIUnreachable
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds
from tests.helpers import crash
from tests.reliability.conftest import NS, STATE_CM, Env

DCGM = "nvidia.com/gpu-operator.dcgm"


def _fix_commands(stderr: str) -> list[str]:
    [line] = [x for x in stderr.splitlines() if x.startswith("fix: ")]
    return re.findall(r"`([^`]+)`", line)


def _two_free_ports() -> tuple[socket.socket, int]:
    """A socket listening on a loopback port P whose neighbour P+1 is free."""
    for _ in range(50):
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        port = int(held.getsockname()[1])
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                held.close()
                continue
        held.listen()
        return held, port
    raise AssertionError("no two neighbouring free ports")


@pytest.mark.parametrize("option", ["--metrics-bind-address", "--metrics-port"])
def test_guard_on_a_port_in_use_names_the_address_and_a_free_one(
        fresh: Callable[..., Env], option: str) -> None:
    env = fresh(monitor=False)
    held, port = _two_free_ports()
    with held:
        value = f"127.0.0.1:{port}" if option == "--metrics-bind-address" else str(port)
        refused = crash.run(env.kubeconfig, "guard", option, value)
        assert refused.code == 2, refused.output
        shown = "127.0.0.1" if option == "--metrics-bind-address" else "0.0.0.0"
        assert f"on {shown}:{port}: another process already listens" in refused.stderr
        assert "unexpected" not in refused.stderr
        command = next(c for c in _fix_commands(refused.stderr) if c.startswith("dcgm-migrate"))
        argv = shlex.split(command)
        assert argv[argv.index(option) + 1] == (f"127.0.0.1:{port + 1}" if option ==
                                                "--metrics-bind-address" else str(port + 1))
        guard = crash.start(None, *argv[1:])
        try:
            crash.until(lambda: env.sim.store.find(kinds.LEASE, NS, "dcgm-migrate-guard")
                        is not None, guard)
            with socket.create_connection(("127.0.0.1", port + 1), timeout=5):
                pass  # the printed command serves on the port it names
        finally:
            guard.send_signal(signal.SIGTERM)
            code, _, err = crash.finish(guard)
        assert code == 0, err[-1500:]


def test_guard_in_a_namespace_without_dcgm_refuses_and_names_it(
        fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    for argv in (("guard", "--once", "-n", "default"), ("guard", "-n", "default")):
        refused = crash.run(env.kubeconfig, *argv)
        assert refused.code == 2, refused.output
        assert "they run in namespace 'gpu-operator'" in refused.stderr, refused.stderr
    [command] = _fix_commands(refused.stderr)
    again = shlex.split(command)
    assert again[-2:] == ["-n", "gpu-operator"], command
    assert crash.run(None, *again[1:], "--once").code == 0


def _at_the_question(env: Env, answer: Callable[[subprocess.Popen[bytes], int], None]
                     ) -> tuple[int, str]:
    """`apply --phase 1` on a terminal (stdin a pty), answered by `answer(proc, master)` once
    the question is asked; its exit code and stderr."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(crash.argv(env.kubeconfig, "apply", "--phase", "1"), stdin=slave,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=crash.cli_env(), cwd=crash.REPO)
    os.close(slave)
    err = bytearray()
    assert proc.stderr is not None
    stream = proc.stderr

    def read() -> None:
        for chunk in iter(lambda: os.read(stream.fileno(), 4096), b""):
            err.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while b"Write these changes" not in err:
            assert time.monotonic() < deadline and proc.poll() is None, err.decode()[-1500:]
            time.sleep(0.02)
        answer(proc, master)
        code = proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, err.decode()


@pytest.mark.parametrize(("key", "code"), [("ctrl-c", 130), ("ctrl-d", 2)])
def test_ctrl_c_and_ctrl_d_at_the_question(fresh: Callable[..., Env], key: str,
                                           code: int) -> None:
    env = fresh(monitor=False)
    mark = env.mark()

    def answer(proc: subprocess.Popen[bytes], master: int) -> None:
        if key == "ctrl-c":  # what the terminal sends the foreground process on Ctrl-C
            proc.send_signal(signal.SIGINT)
        else:
            os.write(master, b"\x04")  # Ctrl-D: end of input on the terminal

    got, err = _at_the_question(env, answer)
    assert got == code, err[-1500:]
    assert "Aborted!" not in err and "unexpected" not in err, err[-1500:]
    if key == "ctrl-d":
        assert "fix: nothing was written" in err, err[-800:]
    assert env.writes(since=mark) == []
    assert env.sim.store.find(kinds.CONFIGMAP, NS, STATE_CM) is None


def test_an_api_server_that_stops_answering_reports_the_real_time() -> None:
    """Connections accepted, never answered: each attempt takes its read timeout, which the
    backoff waits alone do not count."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        policy = RetryPolicy(read_timeout=0.3, connect_timeout=0.3, backoff_base=0.01)
        kube = Kube.for_server(url, "t", retry=policy)
        began = time.monotonic()
        with pytest.raises(APIUnreachable) as info:
            kube.ping()
        took = time.monotonic() - began
    said = re.search(r"gave up after (\d+) attempts over ([\d.]+) s", info.value.message)
    assert said, info.value.message
    attempts, seconds = int(said.group(1)), float(said.group(2))
    assert attempts * 0.3 <= seconds <= took + 0.05, (seconds, took)
    assert "run the same command again" in info.value.hint


def test_a_cluster_rolled_back_on_purpose_is_said_so_and_does_not_page(
        fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    assert crash.run(env.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s"
                     ).code == 0
    undone = crash.run(env.kubeconfig, "rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert undone.code == 0, undone.output
    closing = undone.stdout[undone.stdout.rindex("\nrolled back OK"):]
    assert "fix: run" not in closing and "no phase answers for" not in closing, closing
    assert "run OK — phases 1-3 rolled back" in closing, closing
    verify = crash.run(env.kubeconfig, "verify", "-o", "json")
    assert verify.code == 0, verify.output  # deliberately rolled back: nothing to page about
    assert not json.loads(verify.stdout)["verdict"]["ok"]  # ... though the checks say what is
    again = next(c for c in re.findall(r"`([^`]+)`", " ".join(closing.split()))
                 if " apply " in f" {c} ")
    argv = shlex.split(again)
    assert argv[:4] == ["dcgm-migrate", "apply", "--phase", "3"], again
    assert crash.run(env.kubeconfig, *argv[1:], "--yes", "--settle", "0s").code == 0
    assert crash.run(env.kubeconfig, "verify").code == 0
    pods, _ = env.sim.store.list(kinds.POD, NS)
    assert all(p["metadata"]["labels"].get(DCGM) == "true" for p in pods
               if p["metadata"]["labels"].get("app") == "nvidia-dcgm-dra")
