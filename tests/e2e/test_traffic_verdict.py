"""A check whose failure misroutes or drops consumers' traffic makes the verdict red everywhere
(model/findings.py `TRAFFIC_CHECKS`): the verdict line, verify's exit code, `guard --once`, the
guard's `verdict_ok` gauge and docs/prometheusrule.yaml's alert. Each case then runs the fix
the verdict prints, as printed, and the verdict is green again."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from migrator.model import kinds
from migrator.model.findings import TRAFFIC_CHECKS
from tests.conftest import edit_object
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_guard_metrics import (
    fetch,
    guard_kubeconfig,
    sample,
    start_guard,
    stop_guard,
    until,
)
from tests.helpers.printed import run_printed, stray_pod

REPO = Path(__file__).resolve().parents[2]
DCGM = "nvidia.com/gpu-operator.dcgm"
COMMAND = re.compile(r"`((?:dcgm-migrate|kubectl) [^`]+)`")


def alert_checks() -> str:
    """The `check=~"…"` pattern of DcgmStableIdentityCheckFailing."""
    docs = yaml.safe_load_all((REPO / "docs" / "prometheusrule.yaml").read_text())
    rule = next(r for d in docs if d and d.get("kind") == "PrometheusRule"
                for g in d["spec"]["groups"] for r in g["rules"]
                if r.get("alert") == "DcgmStableIdentityCheckFailing")
    found = re.search(r'check=~"([^"]+)"', rule["expr"])
    assert found, rule["expr"]
    return found.group(1)


def test_the_alert_fires_on_every_traffic_critical_check() -> None:
    """One definition: the alert's pattern is the traffic-critical checks (nodes-covered has
    an alert of its own, by node: DcgmStableNameNodesUnreached)."""
    pattern = alert_checks()
    assert {c for c in TRAFFIC_CHECKS if re.fullmatch(pattern, c)} == set(TRAFFIC_CHECKS) - {
        "nodes-covered"}
    assert not re.fullmatch(pattern, "pods-labelled")


def closing(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("verdict "))


def failed_checks(env: E2E) -> dict[str, dict[str, Any]]:
    doc = env.cli("verify", "-o", "json").json()
    return {c["name"]: c for c in doc["verdict"]["checks"] if not c["ok"]}


def test_a_foreign_endpoint_after_the_switch_is_red_everywhere(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster", time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    log = tmp_path / "guard.log"
    proc, url = start_guard(guard_kubeconfig(env, tmp_path), log, "--verdict-seconds", "1")
    series = 'dcgm_migrate_check_ok{check="no-foreign-endpoints",name="nvidia-dcgm"}'
    try:
        until(lambda: sample(fetch(f"{url}/metrics")[1], "dcgm_migrate_verdict_ok") == 1.0,
              what="a green verdict on /metrics")
        # The stray pod's endpoint is one more, then one fewer once it goes: not an outage.
        with env.monitor.expected_outage():
            stray_pod(env.sim, "dcgm-debug", {DCGM: "true"})

            verify = env.cli("verify")
            assert verify.code == 1
            line = closing(verify.stdout)
            assert line.startswith("verdict NOT OK"), line
            assert "no-foreign-endpoints/nvidia-dcgm" in line, line
            once = env.cli("guard", "--once")
            assert "no-foreign-endpoints/nvidia-dcgm" in once.stdout.splitlines()[-1], once.stdout
            until(lambda: sample(fetch(f"{url}/metrics")[1], "dcgm_migrate_verdict_ok") == 0.0,
                  what="verdict_ok 0")
            page = fetch(f"{url}/metrics")[1]
            assert sample(page, series) == 0.0, page
            assert re.fullmatch(alert_checks(), "no-foreign-endpoints")  # so the alert fires

            fix = failed_checks(env)["no-foreign-endpoints/nvidia-dcgm"]["fix"]
            [label] = COMMAND.findall(fix)
            assert shlex.split(label)[:3] == ["kubectl", "label", "pod"], fix
            assert run_printed(label, tmp_path).code == 0
            assert env.cli("verify").code == 0
        until(lambda: sample(fetch(f"{url}/metrics")[1], "dcgm_migrate_verdict_ok") == 1.0,
              what="verdict_ok 1 again")
    finally:
        stop_guard(proc)


def test_a_switch_allowed_with_foreign_pods_stays_green(e2e_factory: Callable[..., E2E]) -> None:
    """The SRE's --allow-foreign-pods, recorded on the switch, is honoured by the verdict."""
    env = e2e_factory("gpucluster", time_scale=0.05)
    assert env.cli("apply", "--phase", "2", "--yes", "--settle", "0s").code == 0
    stray_pod(env.sim, "dcgm-debug", {DCGM: "true"})
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                   "--allow-foreign-pods").code == 0
    check = next(c for c in env.cli("verify", "-o", "json").json()["verdict"]["checks"]
                 if c["name"] == "no-foreign-endpoints/nvidia-dcgm")
    assert check["ok"] and "allowed by --allow-foreign-pods" in check["detail"], check
    once = env.cli("guard", "--once", "-o", "json").json()
    assert once["verdict"]["ok"], once["verdict"]


def test_an_alias_port_nothing_serves_is_red_until_its_fix_runs(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster", time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter",
                lambda alias: alias["spec"]["ports"][0].update(targetPort=9999))

    verify = env.cli("verify")
    assert verify.code == 1
    line = closing(verify.stdout)
    assert line.startswith("verdict NOT OK") and "ports-served/nvidia-dcgm-exporter" in line, line
    doc = env.cli("verify", "-o", "json").json()
    gates = {g["name"]: g["ok"] for p in doc["phases"] for g in p["gates"]}
    assert gates["alias-holds/nvidia-dcgm-exporter"] is False
    check = failed_checks(env)["ports-served/nvidia-dcgm-exporter"]
    assert "9999" in check["detail"], check
    [fix] = COMMAND.findall(check["fix"])
    assert shlex.split(fix)[:3] == ["dcgm-migrate", "guard", "--once"], check["fix"]
    assert run_printed(fix, tmp_path).code == 0
    assert env.cli("verify").code == 0
    assert env.service("nvidia-dcgm-exporter")["spec"]["ports"][0]["targetPort"] != 9999
