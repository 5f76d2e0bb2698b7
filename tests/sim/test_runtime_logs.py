"""Container logs in the CRI format and the pods/log options over them
(dcgm_sim/runtime/logs.py), and pods/log of simulated pods through kubectl (dcgm_sim/podlog.py).
No root needed."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from dcgm_sim.cluster import SimCluster
from dcgm_sim.runtime.logs import LogOptions, LogWriter, read, rfc3339_nano


def _text(path: Path, options: LogOptions, done: threading.Event | None = None) -> str:
    return b"".join(c for c in read(path, options, done, poll=0.01) if c).decode()


def _write(path: Path, lines: list[tuple[float, str, str]]) -> None:
    path.write_text("".join(f"{rfc3339_nano(t)} {s} F {text}\n" for t, s, text in lines))


def test_writer_keeps_both_streams_and_a_last_line_without_newline(tmp_path: Path) -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    writer = LogWriter(tmp_path / "c" / "0.log", os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    os.write(out_w, b"one\ntw")
    os.write(err_w, b"oops\n")
    os.write(out_w, b"o\nlast")
    os.close(out_w)
    os.close(err_w)
    assert writer.done.wait(5)
    raw = (tmp_path / "c" / "0.log").read_text().splitlines()
    assert {line.split(" ", 1)[1] for line in raw} == {
        "stdout F one", "stdout F two", "stderr F oops", "stdout P last"}
    assert _text(tmp_path / "c" / "0.log", LogOptions()).endswith("last")


def test_tail_since_timestamps_and_limit(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    now = time.time()
    _write(log, [(now - 100, "stdout", "old"), (now - 5, "stderr", "recent"),
                 (now - 1, "stdout", "newest")])
    assert _text(log, LogOptions()) == "old\nrecent\nnewest\n"
    assert _text(log, LogOptions(tail_lines=2)) == "recent\nnewest\n"
    assert _text(log, LogOptions(tail_lines=0)) == ""
    assert _text(log, LogOptions(since=now - 10)) == "recent\nnewest\n"
    assert _text(log, LogOptions(limit_bytes=5)) == "old\nr"
    stamped = _text(log, LogOptions(timestamps=True, tail_lines=1))
    assert stamped == f"{rfc3339_nano(now - 1)} newest\n"


def test_follow_reads_on_until_the_output_ends(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    _write(log, [(time.time(), "stdout", "first")])
    done = threading.Event()

    def later() -> None:
        time.sleep(0.2)
        with log.open("a") as handle:
            handle.write(f"{rfc3339_nano(time.time())} stdout F second\n")
        done.set()

    threading.Thread(target=later).start()
    assert _text(log, LogOptions(follow=True), done) == "first\nsecond\n"


def test_kubectl_logs_of_simulated_pods(tmp_path: Path) -> None:
    """A simulated container prints nothing: its log is empty (not a hang); a pod with two
    containers needs `-c`, as on a real cluster."""
    with SimCluster(nodes=1, stack="gpucluster", time_scale=0.02) as sim:
        sim.wait_idle()
        pods = subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, "get", "pods", "-o",
                               "name"], capture_output=True, text=True, check=True, timeout=30)
        name = pods.stdout.split()[0]
        res = subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, "logs", name],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 0 and res.stdout == "", res.stderr
        res = subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, "logs", name,
                              "--previous"], capture_output=True, text=True, timeout=30)
        assert res.returncode == 1 and "previous terminated container" in res.stderr
        res = subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, "logs", name,
                              "-c", "nope"], capture_output=True, text=True, timeout=30)
        assert "container nope is not valid for pod" in res.stderr
