"""Terminal behaviour: the demo's live progress under a pseudo-terminal (pty and tmux) with the
summary in the final frame, NO_COLOR, plain output when not a TTY, and --debug tracebacks."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dcgm_sim.cluster import SimCluster

REPO = Path(__file__).resolve().parents[2]
DEMO = [sys.executable, "-m", "migrator", "demo", "--nodes", "3", "--time-scale", "0.004"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
SGR = re.compile(r"\x1b\[([0-9;]*)m")
GUARD_SECONDS = 120  # a hung child is killed instead of hanging the suite; not an assertion


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR",
                                                            "COLUMNS", "LINES", "TERM")}
    env.update(PYTHONPATH=str(REPO), TERM="xterm-256color", **extra)
    return env


def run_in_pty(argv: list[str], env: dict[str, str], cols: int = 110,
               rows: int = 40) -> tuple[int, str]:
    """Run `argv` with stdin/stdout/stderr on a pseudo-terminal; its exit code and raw output."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO,
                            close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + GUARD_SECONDS
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        else:
            proc.kill()
    finally:
        os.close(master)
    return proc.wait(timeout=10), b"".join(chunks).decode("utf-8", "replace")


def colours(raw: str) -> set[str]:
    """The foreground colours used (SGR 30-37, 38;..., 90-97), ignoring bold and resets."""
    found = set()
    for params in SGR.findall(raw):
        codes = params.split(";")
        for i, code in enumerate(codes):
            if code in ("38", "48") or (code.isdigit() and (30 <= int(code) <= 37
                                                            or 90 <= int(code) <= 97)):
                found.add(";".join(codes[i:i + 3]) if code == "38" else code)
    return found


def plain(raw: str) -> str:
    return ANSI.sub("", raw)


# ---- the demo under a pseudo-terminal -----------------------------------------------------------

def test_demo_under_a_pty_draws_live_bars_and_ends_with_the_summary() -> None:
    code, raw = run_in_pty(DEMO, _env())
    text = plain(raw)
    assert code == 0, text[-3000:]
    assert "\x1b[?25l" in raw  # rich's live display hid the cursor: the TTY path was taken
    assert colours(raw), "a terminal without NO_COLOR gets colours"
    # progress lines: step lines above the bars, a bar per DaemonSet and per Service
    assert "writing  DaemonSet/nvidia-dcgm-dra (set-labels)" in text
    for label in ("rollout nvidia-dcgm-dra", "rollout nvidia-dcgm-exporter-dra",
                  "endpoints nvidia-dcgm-exporter", "endpoints nvidia-dcgm "):
        assert re.search(re.escape(label) + r"\s+━+\s+\d+/\d+", text), label
    assert re.search(r"rollout nvidia-dcgm-dra\s+━+ 3/3 updated 3 available 3", text)
    # no frame ever shows a Service at zero: bars are created at their current count
    assert not re.search(r"endpoints \S+\s+━+ 0/\d", text)
    # the final frame: after the last redraw of any bar comes the whole summary
    last_bar = max(text.rfind("rollout nvidia"), text.rfind("endpoints nvidia"))
    final = text[last_bar:]
    summary = final[final.index("Summary"):]
    assert re.search(r"3 switch\s+completed\s+2", summary)
    assert re.search(r"nvidia-dcgm-exporter-dra\s+3\s+3\s+\d\s+yes", summary)
    assert summary.rstrip().endswith("verdict OK: status after phase 3 holds")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_demo_in_tmux_final_screen_shows_finished_bars_and_summary(tmp_path: Path) -> None:
    sock = f"dcgm-migrate-test-{os.getpid()}-{tmp_path.name}"
    done = tmp_path / "exit-code"
    command = " ".join(DEMO) + f"; echo $? > {done}; sleep {GUARD_SECONDS}"
    tmux = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tmux, "new-session", "-d", "-x", "110", "-y", "60", "-s", "demo",
                    "-e", f"PYTHONPATH={REPO}", "-c", str(REPO), command], check=True,
                   env=_env())
    try:
        deadline = time.monotonic() + GUARD_SECONDS
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", "demo"], check=True,
                                capture_output=True, text=True).stdout
        history = subprocess.run([*tmux, "capture-pane", "-p", "-S", "-", "-t", "demo"],
                                 check=True, capture_output=True, text=True).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
    assert done.read_text().strip() == "0", history[-3000:]
    assert re.search(r"rollout nvidia-dcgm-exporter-dra\s+━+ 3/3", history)
    assert re.search(r"endpoints nvidia-dcgm\s+━+ 3/3 baseline 3", history)
    assert "Summary" in screen and "verdict OK" in screen
    for row in (r"1 label\s+completed\s+12", r"2 alias\s+completed\s+2",
                r"3 switch\s+completed\s+2", r"nvidia-dcgm-dra\s+3\s+3\s+\d\s+yes"):
        assert re.search(row, screen), (row, screen)


# ---- colours and non-TTY output -------------------------------------------------------------

@pytest.fixture
def sim(make_sim: Callable[..., SimCluster]) -> SimCluster:
    return make_sim(nodes=2, stack="gpucluster")


def _plan(sim: SimCluster) -> list[str]:
    return [sys.executable, "-m", "migrator", "plan", "--kubeconfig", sim.kubeconfig]


def test_no_color_is_respected_on_a_terminal(sim: SimCluster) -> None:
    code, coloured = run_in_pty(_plan(sim), _env())
    assert code == 0, plain(coloured)
    assert colours(coloured)  # the ✓/✗ marks are green/red on a terminal
    code, raw = run_in_pty(_plan(sim), _env(NO_COLOR="1"))
    assert code == 0, plain(raw)
    assert colours(raw) == set()
    assert "✓ rollout-complete/nvidia-dcgm-dra" in plain(raw)


def test_not_a_tty_means_no_escape_codes_at_all(sim: SimCluster) -> None:
    res = subprocess.run(_plan(sim), capture_output=True, text=True, env=_env(), cwd=REPO,
                         timeout=GUARD_SECONDS)
    assert res.returncode == 0, res.stderr
    assert "Phase 1 — label: pending" in res.stdout
    assert "\x1b" not in res.stdout and "\x1b" not in res.stderr


# ---- errors: one sentence and a fix, tracebacks only with --debug --------------------------------

def test_errors_are_one_sentence_and_a_fix_unless_debug(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "migrator", "status", "--kubeconfig",
            str(tmp_path / "missing")]
    res = subprocess.run(argv, capture_output=True, text=True, env=_env(), cwd=REPO,
                         timeout=GUARD_SECONDS)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("error: The kubeconfig file") and "does not exist" in lines[0]
    assert lines[1].startswith("fix: ")
    assert len(lines) == 2 and "Traceback" not in res.stderr
    res = subprocess.run([*argv, "--debug"], capture_output=True, text=True, env=_env(),
                         cwd=REPO, timeout=GUARD_SECONDS)
    assert res.returncode == 2  # --debug adds the traceback, never changes the exit code
    assert "Traceback (most recent call last)" in res.stderr
    assert "migrator.errors.UsageError: The kubeconfig file" in res.stderr
    assert res.stderr.strip().splitlines()[-2:] == lines  # then the same sentence and fix
