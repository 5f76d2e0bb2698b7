"""`sim serve` / `python -m migrator sim serve`: one READY line, a working kubeconfig, clean exit
on SIGTERM and SIGINT, exit 2 with one sentence for bad flags, fault flags reaching the server."""

from __future__ import annotations

import io
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from typer.testing import CliRunner

from dcgm_sim.serve import ServeError, ServeOptions, build, serve
from dcgm_sim_cli.sim import main, sim_app

REPO = Path(__file__).resolve().parents[2]


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "migrator", "sim", "serve", *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ready_line(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], timeout)
    assert readable, "no READY line"
    return proc.stdout.readline()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_ready_and_exits_cleanly_on_signal(tmp_path: Path, sig: int) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    proc = _start("--nodes", "3", "--stack", "clusterpolicy", "--time-scale", "0.02",
                  "--kubeconfig-out", str(kubeconfig))
    try:
        line = _ready_line(proc)
        word, url, path = line.split()
        assert (word, path) == ("READY", str(kubeconfig)) and url.startswith("http://127.0.0.1:")
        doc = yaml.safe_load(kubeconfig.read_text())
        assert doc["current-context"] == "sim"
        assert doc["clusters"][0]["cluster"]["server"] == url
        assert doc["users"][0]["user"]["token"] == "sim-admin-token"
        assert doc["contexts"][0]["context"]["namespace"] == "gpu-operator"
        api = config.new_client_from_config(str(kubeconfig))
        pods = client.CoreV1Api(api).list_namespaced_pod("gpu-operator", limit=4)
        assert len(pods.items) == 4 and pods.metadata is not None and pods.metadata._continue
        api.close()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""  # READY was the one and only stdout line
    assert "Traceback" not in err


def test_bad_flags_exit_2_with_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["serve", "--stack", "legacy"], ["serve", "--nodes", "-1"],
                 ["serve", "--time-scale", "0"], ["serve", "--bogus"],
                 ["serve", "--error-rate", "2"], ["serve", "--nodes", "many"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err, (argv, err)


def test_mounted_typer_app_reports_bad_flags_with_exit_2() -> None:
    result = CliRunner().invoke(sim_app, ["serve", "--stack", "legacy"])
    assert result.exit_code == 2
    assert "--stack must be one of" in result.output


def test_port_in_use_is_a_usage_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{port}"):
            serve(ServeOptions(nodes=1, port=port), out=io.StringIO(), err=io.StringIO(),
                  stop=threading.Event())


def test_fault_flags_reach_the_server() -> None:
    sim = build(ServeOptions(nodes=1, error_rate=0.5, latency_ms=3, fail_nth_write=2,
                             operator_reconcile=10))
    assert (sim.server.faults.error_rate, sim.server.faults.latency_ms,
            sim.server.faults.fail_nth_write) == (0.5, 3.0, 2)
    assert sim.controllers.get("operator") is not None


def test_serve_in_process_stops_on_event(tmp_path: Path) -> None:
    out, err, stop = io.StringIO(), io.StringIO(), threading.Event()
    options = ServeOptions(nodes=2, stack="none", time_scale=0.02,
                           kubeconfig_out=tmp_path / "kc")
    worker = threading.Thread(target=serve, args=(options,),
                              kwargs={"out": out, "err": err, "stop": stop})
    worker.start()
    try:
        for _ in range(200):
            if out.getvalue():
                break
            stop.wait(0.05)
        assert out.getvalue().startswith("READY http://127.0.0.1:")
        assert "seeded 2 nodes (none)" in err.getvalue()
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()


def test_the_cli_imports_nothing_of_the_simulated_clusters_distribution() -> None:
    code = ("import sys, migrator.cli.app; "
            "print([n for n in sys.modules if n.startswith('dcgm_sim')])")  # dcgm_sim_cli too
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout
