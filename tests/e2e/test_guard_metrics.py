"""`dcgm-migrate guard --metrics-bind-address` end to end, through real HTTP on loopback: the
CLI in its own process under the Role of docs/guard.yaml serves `/readyz` (ready once leading),
`/healthz` and `/metrics` (the verdict, its checks, nodes reached and wanted, leadership, the
last pass); a CR edit makes it hold both aliases, which shows as Service writes, `hold` repair
times and a `SelectorHeld` Event that `kubectl describe svc` prints; SIGTERM stops it."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dcgm_sim.cluster import kubeconfig_document
from tests.conftest import new_operand_versions
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_guard import _rolled_without_label

REPO = Path(__file__).resolve().parents[2]
GUARD_TOKEN = "dcgm-migrate-guard-metrics-token"  # a test credential, for the sim only
GUARD_USER = "system:serviceaccount:gpu-operator:dcgm-migrate-guard"
SERVING = re.compile(r"serving /metrics, /healthz, /readyz on (http://127\.0\.0\.1:\d+)")


def guard_kubeconfig(env: E2E, tmp_path: Path) -> str:
    """A kubeconfig with the guard's Role (docs/guard.yaml) and nothing else."""
    env.sim.server.access.add_token(GUARD_TOKEN, (REPO / "docs" / "guard.yaml").read_text())
    path = tmp_path / "kubeconfig-guard"
    path.write_text(yaml.safe_dump(kubeconfig_document(env.sim.url, NS, GUARD_TOKEN)))
    return str(path)


def start_guard(kubeconfig: str, log: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """The CLI guard serving on a free loopback port: (process, its base URL)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "migrator", "guard", "--kubeconfig", kubeconfig,
             "--identity", "guard-metrics", "--metrics-bind-address", "127.0.0.1:0", *extra],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = SERVING.search(log.read_text())
        if found:
            return proc, found.group(1)
        assert proc.poll() is None, log.read_text()
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the guard never said where it serves:\n{log.read_text()}")


def stop_guard(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sample(page: str, series: str) -> float | None:
    """The value of one exact series line of a metrics page (None: absent)."""
    for line in page.splitlines():
        name, _, value = line.rpartition(" ")
        if name == series:
            return float(value)
    return None


def until(predicate: Callable[[], object], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.1)


def test_the_guard_serves_metrics_and_probes_and_records_events(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0, time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    log = tmp_path / "guard.log"
    proc, url = start_guard(guard_kubeconfig(env, tmp_path), log, "--verdict-seconds", "1")
    try:
        until(lambda: fetch(f"{url}/readyz") == (200, "ok: leading\n"), what="ready, leading")
        assert fetch(f"{url}/healthz") == (200, "ok\n")
        assert fetch(f"{url}/nothing")[0] == 404
        until(lambda: sample(fetch(f"{url}/metrics")[1], "dcgm_migrate_verdict_ok") is not None,
              what="the first verdict on /metrics")
        page = fetch(f"{url}/metrics")[1]
        assert sample(page, "dcgm_migrate_leader") == 1.0
        assert sample(page, "dcgm_migrate_verdict_ok") == 1.0, log.read_text()
        assert (sample(page, "dcgm_migrate_last_pass_timestamp_seconds") or 0) > time.time() - 60
        for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"):
            assert sample(page, f'dcgm_migrate_check_ok{{check="nodes-covered",name="{name}"}}'
                          ) == 1.0
            assert sample(page, f'dcgm_migrate_nodes_wanted{{name="{name}"}}') == 3.0
            assert sample(page, f'dcgm_migrate_nodes_reached{{name="{name}"}}') == 3.0
        assert sample(page, 'dcgm_migrate_watch_failures_total{resource="services"}') == 0.0
        assert "pod=" not in page and "node=" not in page  # bounded: no per-pod/node label

        with env.monitor.rolling():  # a routine CR edit: the guard holds both aliases
            new_operand_versions(env.sim.store)
            env.sim.wait_for(lambda: _rolled_without_label(env), 60)
        until(lambda: sample(fetch(f"{url}/metrics")[1],
                             'dcgm_migrate_repair_seconds_count{repair="hold"}') == 2.0,
              what="two holds timed")
        page = fetch(f"{url}/metrics")[1]
        assert (sample(page, 'dcgm_migrate_writes_total{kind="Service",result="ok"}') or 0) >= 2
        assert (sample(page, 'dcgm_migrate_repair_seconds_bucket{le="5.0",repair="hold"}')
                == 2.0)
        until(lambda: (sample(fetch(f"{url}/metrics")[1],
                              'dcgm_migrate_events_total{result="created"}') or 0) >= 2,
              what="the hold Events created")
        described = _describe(env, tmp_path, "nvidia-dcgm-exporter")
        row = next(line for line in described.split("Events:", 1)[1].splitlines()
                   if "SelectorHeld" in line)
        assert row.split()[0] == "Warning" and "dcgm-migrate-guard" in row, described
    finally:
        code = stop_guard(proc)
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()
    mine = [e for e in env.sim.server.log.entries() if e.user == GUARD_USER]
    assert not [e for e in mine if e.code == 403], [(e.verb, e.resource) for e in mine
                                                    if e.code == 403]
    assert ("create", "events") in {(e.verb, e.resource) for e in mine}


def test_the_metrics_options_are_checked_before_anything_runs(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=None)
    bad = env.cli("guard", "--metrics-bind-address", "8080")
    assert bad.code == 2 and "HOST" in bad.stderr, bad.stderr
    clash = env.cli("guard", "--metrics-bind-address", ":8080", "--metrics-port", "9090")
    assert clash.code == 2 and "another port" in clash.stderr, clash.stderr
    once = env.cli("guard", "--once", "--metrics-port", "8080")
    assert once.code == 2 and "--once" in once.stderr, once.stderr


def _describe(env: E2E, tmp_path: Path, service: str) -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    out = subprocess.run([binary, "-n", NS, "describe", "svc", service],
                         env={**os.environ, "KUBECONFIG": env.sim.kubeconfig,
                              "HOME": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "cache")},
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout
