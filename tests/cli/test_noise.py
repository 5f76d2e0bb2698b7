"""Warnings only where they apply, each once: no warning at all before a lock refusal (the run
never starts), no drift-risk warning once nothing the tool switched is left (after a full
rollback, after the hand-over to an operator release that renders its own labels), one
"possible duplicate scraping" however many example pods the reports of one run name, and with
`-o json` every warning on stderr too — on apply's nothing-to-do path as well (README,
"Output")."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from dcgm_sim.cluster import SimCluster
from migrator.engine import assemble, progress
from migrator.engine.progress import Listener
from migrator.engine.state import lock as locking
from migrator.engine.state.document import State
from migrator.model import kinds
from migrator.model.phasestatus import PhaseStatus
from migrator.model.planning import Options
from migrator.model.stacks import load_catalog
from migrator.model.steps import CreateAlias, SetLabels, SetSelector
from tests.helpers import builders as b
from tests.helpers import cli, crash

NS = "gpu-operator"
CATALOG = load_catalog()
DRIFT = "Drift risk after phase 3"
COMPONENT = b.COMPONENT


def _warnings(doc: dict[str, Any]) -> list[str]:
    return list(doc.get("warnings") or [])


# ---- the lock ----------------------------------------------------------------------------------

def _foreign_lock(sim: SimCluster) -> None:
    now = datetime.now(UTC)
    lock = locking.Lock("oncall@bastion-2 pid 4242", now, now + timedelta(minutes=2), 120.0)
    crash.create_locked_state(sim.store, NS, lock)


@pytest.mark.parametrize("argv", [
    ("apply", "--phase", "3", "--yes"),
    ("apply", "--phase", "3", "--yes", "-o", "json"),
], ids=["table", "json"])
def test_a_lock_refusal_says_no_warning(sim: SimCluster, argv: tuple[str, ...]) -> None:
    _foreign_lock(sim)
    held = cli.run(sim.kubeconfig, *argv)
    assert held.code == 4, held.stderr
    assert "warning:" not in held.stderr and DRIFT not in held.stderr + held.stdout, held.stderr
    assert "holds the lock" in held.stderr


# ---- drift risk where it no longer applies -----------------------------------------------------

def test_no_drift_risk_after_a_rollback_of_phase_3_or_all(sim: SimCluster) -> None:
    assert cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    status = cli.run(sim.kubeconfig, "status", "-o", "json").json()
    assert any(w.startswith(DRIFT) for w in _warnings(status))  # it applies: phase 3 switched
    for phase in ("3", "1"):
        back = cli.run(sim.kubeconfig, "rollback", "--phase", phase, "--yes", "--settle", "0s",
                       "-o", "json")
        assert back.code == 0, back.stderr
        assert not any(w.startswith(DRIFT) for w in _warnings(back.json())), phase
        assert DRIFT not in back.stderr, phase
        status = cli.run(sim.kubeconfig, "status", "-o", "json").json()
        assert not any(w.startswith(DRIFT) for w in _warnings(status)), phase
    table = cli.run(sim.kubeconfig, "status")
    assert DRIFT not in table.stdout
    # `plan` still warns before the switch it plans
    plan = cli.run(sim.kubeconfig, "plan", "-o", "json").json()
    assert any(w.startswith(DRIFT) for w in _warnings(plan))


def _migrated_state() -> State:
    """Phases 1-3 completed on the GPUCluster stack, as a run records them."""
    state = State(NS, stack="gpucluster")
    common = "nvidia.com/gpu-operator.dcgm"
    label = SetLabels("nvidia-dcgm-dra", {common: "true"}, {common: "true"}, {common: None},
                      {common: None})
    alias = CreateAlias("nvidia-dcgm", "nvidia-dcgm-dra", {})
    switch = SetSelector("nvidia-dcgm", {"app": "nvidia-dcgm-dra"}, {common: "true"}, True)
    for number, step in ((1, label), (2, alias), (3, switch)):
        rec = state.phase(number)
        rec.mark(step, "done")
        rec.status = PhaseStatus.COMPLETED
    state.phase(1).wrote_labels = True
    return state


def test_no_drift_risk_after_the_hand_over() -> None:
    """The Service phase 3 switched is the release's now (its records handed over): no
    Service the tool switched selects by labels the tool wrote, whatever phase 1 recorded."""
    common = "nvidia.com/gpu-operator.dcgm"
    alias = b.service("nvidia-dcgm", {common: "true"}, local=True, port=5555,
                      labels={"app.kubernetes.io/managed-by": "dcgm-migrate"},
                      annotations={"dcgm-migrate/alias-of": "nvidia-dcgm-dra"})
    switched = b.gpucluster_snapshot(labelled=True, extra_services=[alias])
    for forward in (True, False):  # before the upgrade: the tool's switch, the tool's labels
        before = assemble.build(switched, CATALOG, _migrated_state(), Options(),
                               forward=forward)
        assert any(w.startswith(DRIFT) for w in before.warnings), before.warnings
    for forward in (True, False):
        after = assemble.build(b.handed_over_snapshot(), CATALOG, _migrated_state(), Options(),
                              forward=forward)
        assert not any(w.startswith(DRIFT) for w in after.warnings), after.warnings


# ---- one warning per kind ----------------------------------------------------------------------

def test_counted_warnings_are_merged_per_kind() -> None:
    newest = ["possible duplicate scraping: 3 exporter pods ..., e.g. pod-b via x", "other"]
    oldest = ["possible duplicate scraping: 3 exporter pods ..., e.g. pod-a via x", "other",
              "duplicate scraping now: 1 exporter pods scraped more than once, e.g. pod-a"]
    assert progress.merged(oldest, newest) == (newest[0], "other", oldest[2])


class _Said(Listener):
    def __init__(self) -> None:
        self.said: list[str] = []

    def show_warning(self, text: str) -> None:
        self.said.append(text)


def test_a_command_says_each_kind_of_warning_once_and_lists_the_newest_wording() -> None:
    below = _Said()
    told = below.command()
    told.say(["possible duplicate scraping: 3 exporter pods, e.g. pod-a", "drift"])
    below.warning("drift")
    told.say(["possible duplicate scraping: 3 exporter pods, e.g. pod-b", "retired"])
    assert below.said == ["possible duplicate scraping: 3 exporter pods, e.g. pod-a", "drift",
                          "retired"]
    assert told.warnings == ("possible duplicate scraping: 3 exporter pods, e.g. pod-b",
                             "drift", "retired")


def _service_monitor_on_the_exporter(sim: SimCluster) -> None:
    """A ServiceMonitor on the annotated exporter Service: every exporter pod is reached by
    annotation discovery and by a ServiceMonitor (a possible duplicate)."""
    svc = sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm-exporter-dra")
    sim.store.create(kinds.SERVICE_MONITOR, {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "dcgm-exporter", "namespace": NS},
        "spec": {"namespaceSelector": {"matchNames": [NS]},
                 "selector": {"matchLabels": svc["metadata"]["labels"]},
                 "endpoints": [{"port": "gpu-metrics", "path": "/metrics"}]}})


def test_possible_duplicate_scraping_is_said_once_though_the_pods_rolled(
        sim: SimCluster) -> None:
    """Phase 1 rolls the exporter pods: the report before the run and the one after name
    different example pods; the run's report keeps one."""
    _service_monitor_on_the_exporter(sim)
    for argv in (("apply", "--phase", "1", "--yes", "-o", "json"),
                 ("apply", "--phase", "1", "--yes")):
        done = cli.run(sim.kubeconfig, *argv)
        assert done.code == 0, done.stderr
        said = done.stdout.count("possible duplicate scraping")
        assert said == 1, done.stdout
        assert done.stderr.count("possible duplicate scraping") <= 1


def test_json_nothing_to_do_says_its_warnings_on_stderr(sim: SimCluster) -> None:
    _service_monitor_on_the_exporter(sim)
    assert cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    again = cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes", "-o", "json")
    assert again.code == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["result"]["writes"] == 0 and doc["warnings"]
    for warning in doc["warnings"]:
        assert f"warning: {warning}" in again.stderr, warning
    table = cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes")
    assert "warning:" not in table.stderr  # a table prints them once, in the report


@pytest.mark.parametrize("command", ["plan", "status", "verify"])
def test_plan_status_and_verify_say_their_warnings_on_stderr_under_json(
        sim: SimCluster, command: str) -> None:
    """The README's rule for every command: with -o json/yaml each warning is in the document
    and once as a `warning:` line on stderr; a table prints it once, in the report only."""
    _service_monitor_on_the_exporter(sim)
    for output in ("json", "yaml"):
        done = cli.run(sim.kubeconfig, command, "-o", output)
        doc = json.loads(done.stdout) if output == "json" else yaml.safe_load(done.stdout)
        warnings = doc.get("warnings") or doc["report"]["warnings"]
        assert warnings, doc
        for warning in warnings:
            assert done.stderr.count(f"warning: {warning}") == 1, (warning, done.stderr)
    table = cli.run(sim.kubeconfig, command)
    assert "warning:" not in table.stderr
    assert "possible duplicate scraping" in table.stdout
