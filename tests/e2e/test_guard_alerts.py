"""The alert of docs/prometheusrule.yaml on real scrapes: Debian's VictoriaMetrics scrapes the
CLI guard's `/metrics` on loopback (a static scrape config, every second), and the rule's own
expression, queried over VM's `/api/v1/query`, goes from empty to 1 (one node missed per stable
name) when the pods on a node restart and stay not Ready, and back to empty once they are Ready
again.
The rule's `for:` is Prometheus' business; the expression is what is tested, word for word.
The guard judges within a second of a change here (`--verdict-seconds 1`); the figures are
printed (`-s`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.controllers.kubelet import PODS_READY_ANNOTATION
from dcgm_sim.controllers.nodelifecycle import annotate_node
from migrator.model import kinds
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_guard_metrics import guard_kubeconfig, start_guard, stop_guard
from tests.helpers.oracle import find_binary

REPO = Path(__file__).resolve().parents[2]
NODE = "gpu-node-0002"
STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")


def rule(alert: str) -> dict[str, Any]:
    """One alerting rule of docs/prometheusrule.yaml."""
    docs = [d for d in yaml.safe_load_all((REPO / "docs" / "prometheusrule.yaml").read_text())
            if d]
    [doc] = [d for d in docs if d["kind"] == "PrometheusRule"]
    return next(r for g in doc["spec"]["groups"] for r in g["rules"] if r.get("alert") == alert)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def victoria_metrics(target: str, tmp_path: Path) -> Iterator[Callable[[str], list[Any]]]:
    """VM scraping `target` (host:port) every second; yields `query(expr)` → its result."""
    binary = find_binary()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("victoria-metrics is not installed; CI must have it", pytrace=False)
        pytest.skip("victoria-metrics is not installed (apt-get install victoria-metrics)")
    workdir = tmp_path / "vm"
    workdir.mkdir()
    (workdir / "scrape.yml").write_text(yaml.safe_dump({"scrape_configs": [{
        "job_name": "dcgm-migrate-guard", "scrape_interval": "1s",
        "static_configs": [{"targets": [target]}]}]}))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "vm.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [binary, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={workdir / 'data'}",
             f"-promscrape.config={workdir / 'scrape.yml'}", "-search.latencyOffset=0s",
             "-search.disableCache", "-retentionPeriod=1d", "-memory.allowedBytes=256MiB"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)

    def query(expr: str) -> list[Any]:
        q = urllib.parse.urlencode({"query": expr, "time": f"{time.time():.3f}"})
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as answer:
            doc = json.loads(answer.read())
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    try:
        _until(lambda: _answers(query), 30, f"VM answering:\n{log.read_text()[-2000:]}")
        yield query
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(query: Callable[[str], list[Any]]) -> bool:
    try:
        query("vector(1)")
    except OSError:
        return False
    return True


def _until(predicate: Callable[[], object], timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < timeout, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.2)
    return time.monotonic() - start


def _values(result: list[Any]) -> dict[str, float]:
    return {r["metric"].get("name", ""): float(r["value"][1]) for r in result}


def _fail_pods(env: E2E, node: str) -> None:
    """The node's pods restart and never turn Ready (`pods-ready: "false"` holds back pods
    that start there; the ones already Ready are replaced, as after a node reboot)."""
    annotate_node(env.sim.store, node, PODS_READY_ANNOTATION, "false")
    for pod in env.sim.store.list(kinds.POD, NS)[0]:
        if pod["spec"].get("nodeName") == node:
            env.sim.store.mark_deleting(kinds.POD, NS, pod["metadata"]["name"], 1)


def test_the_stable_name_alert_expression_flips_on_a_node_failure_and_back(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=None)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    expr = rule("DcgmStableNameNodesUnreached")["expr"]
    proc, url = start_guard(guard_kubeconfig(env, tmp_path), tmp_path / "guard.log",
                            "--verdict-seconds", "1")
    try:
        with victoria_metrics(url.removeprefix("http://"), tmp_path) as query:
            _until(lambda: _values(query('dcgm_migrate_nodes_wanted')).get(STABLE[0]) == 3.0,
                   60, "the guard's first verdict scraped")
            assert query(expr) == []  # every name reaches its 3 nodes: nothing to alert
            with env.monitor.expected_outage():
                _fail_pods(env, NODE)
                fired = _until(lambda: all(_values(query(expr)).get(n) == 1.0 for n in STABLE),
                               60, "the alert expression at 1 for both stable names")
                got = _values(query(expr))
                annotate_node(env.sim.store, NODE, PODS_READY_ANNOTATION, None)
                cleared = _until(lambda: query(expr) == [], 60, "the alert expression empty")
            print(f"alert expression: empty → {got} {fired:.1f} s after the fault; "
                  f"empty again {cleared:.1f} s after the heal")
            assert set(got) >= set(STABLE) and set(got.values()) == {1.0}
            down = rule("DcgmMigrateGuardDown")["expr"]
            assert query(down) == []  # one leader, passing, and no name shared here
    finally:
        assert stop_guard(proc) == 0


def test_every_alert_links_a_section_of_the_runbook() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "docs" / "prometheusrule.yaml").read_text())
            if d]
    [doc] = [d for d in docs if d["kind"] == "PrometheusRule"]
    headings = {h.strip().lower() for h in re.findall(
        r"^#+ (.+)$", (REPO / "docs" / "runbook.md").read_text(), re.M)}
    alerts = [r for g in doc["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) == 5
    for r in alerts:
        url = r["annotations"]["runbook_url"]
        assert url.split("#")[0].endswith("/docs/runbook.md"), url
        assert url.split("#")[1] == r["alert"].lower() in headings, url
