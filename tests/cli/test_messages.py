"""What the CLI says, and says once: a stale plan names what changed, each warning is printed
once, the drift-risk warning only where phase 3 switches, the question before a write names
only the phases it runs and where it writes, tables at 80 columns never split a name, a
non-terminal settle is two lines, `status --watch` ends quietly, usage errors have a fix line
and (with -o json) the error document, `--include-operator-owned` after phase 3 says what to
do, shell completion of --phase and --context, and the plugin's help shows its own name."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from rich.console import Console
from typer.testing import CliRunner

from dcgm_sim.cluster import SimCluster
from migrator.cli import render, sessions
from migrator.cli.app import app
from migrator.cli.live import PlainProgress
from migrator.engine import assemble
from migrator.engine.planfile import STALE_SHOWN, save_plan
from migrator.model import kinds
from migrator.model.planning import Options
from migrator.model.snapshot import changed_fields
from migrator.model.stacks import load_catalog
from migrator.model.steps import Change
from tests.conftest import edit_object
from tests.helpers import builders as b
from tests.helpers import cli

NS = "gpu-operator"
REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "output.schema.json").read_text())


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# ---- a stale --plan names what changed -------------------------------------------------------

def _saved_plan(sim: SimCluster, tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    assert cli.run(sim.kubeconfig, "plan", "--out", str(path), "-o", "json").code == 0
    return path


def _edit(sim: SimCluster, kind: kinds.Kind, name: str, change: Any) -> None:
    edit_object(sim.store, kind, NS, name, change)


def test_a_stale_plan_names_the_objects_and_fields_that_changed(
        sim: SimCluster, tmp_path: Path) -> None:
    path = _saved_plan(sim, tmp_path)
    _edit(sim, kinds.DAEMONSET, "nvidia-dcgm-dra",
          lambda d: d["metadata"]["labels"].update(team="gpu-infra"))
    _edit(sim, kinds.SERVICE, "nvidia-dcgm-dra",
          lambda s: s["spec"]["selector"].update(extra="x"))
    res = cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes", "--plan", str(path),
                  "-o", "json")
    assert res.code == 4, res.stderr
    message = res.json()["error"]["message"]
    assert message.endswith("stale: changed DaemonSet/nvidia-dcgm-dra metadata.labels, "
                            "Service/nvidia-dcgm-dra spec.selector."), message
    assert "Service/nvidia-dcgm-dra spec.selector" in res.stderr


def test_a_plan_saved_without_per_object_data_gives_the_old_message(
        sim: SimCluster, tmp_path: Path) -> None:
    path = _saved_plan(sim, tmp_path)
    doc = json.loads(path.read_text())
    doc.pop("objects")

    save_plan(path, doc["report"])  # as an older release wrote it: no `objects`
    _edit(sim, kinds.DAEMONSET, "nvidia-dcgm-dra",
          lambda d: d["metadata"]["labels"].update(team="gpu-infra"))
    res = cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes", "--plan", str(path))
    assert res.code == 4
    assert f"The cluster changed since plan {path} was saved, so it is stale." in res.stderr


def test_changed_fields_are_named_at_most_five_then_counted() -> None:
    snap = b.gpucluster_snapshot()
    before = snap.fingerprint_fields()
    after = copy.deepcopy(before)
    for obj in after.values():
        for field in obj:
            obj[field] = "changed"
    after["Service/new"] = {"spec.selector": "x"}
    changed = changed_fields(before, after)
    assert "Service/new (created)" in changed
    assert len(changed) > STALE_SHOWN


# ---- warnings once; drift risk only where phase 3 switches ----------------------------------

def test_each_warning_is_printed_once_in_the_report_not_again_on_stderr(
        sim: SimCluster) -> None:
    res = cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes")
    assert res.code == 0, res.stderr
    assert res.stdout.count("Drift risk after phase 3") == 1
    assert "warning:" not in res.stderr
    doc = cli.run(sim.kubeconfig, "plan", "-o", "json")
    assert any(w.startswith("Drift risk") for w in doc.json()["warnings"])


def test_with_json_output_the_progress_stream_says_the_warnings() -> None:
    out = io.StringIO()
    table = PlainProgress(out, warnings=False)
    table.warning("x")
    table.message("phase 1 (label) done")
    PlainProgress(out, warnings=True).warning("y")
    assert [line.split(" ", 1)[1] for line in out.getvalue().splitlines()] == [
        "phase 1 (label) done", "warning: y"]
    table.say_held()  # no report came: the table run says what it held
    assert out.getvalue().splitlines()[-1].split(" ", 1)[1] == "warning: x"


def test_no_drift_risk_warning_where_phase_3_switches_nothing(
        make_sim: Any) -> None:
    sim = make_sim(nodes=2, stack="clusterpolicy")
    res = cli.run(sim.kubeconfig, "plan", "-o", "json")
    assert res.code == 0, res.stderr
    doc = res.json()
    assert doc["phases"][0]["changes"], "phase 1 writes the labels on this stack"
    assert not doc["phases"][2]["changes"]
    assert not any("Drift risk" in w for w in doc["warnings"]), doc["warnings"]
    done = cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "-o", "json")
    assert not any("Drift risk" in w for w in done.json()["warnings"])


def test_drift_risk_stays_while_phase_3_has_switched() -> None:
    doc = assemble.build(b.gpucluster_snapshot(), load_catalog(), None, Options())
    assert any(w.startswith("Drift risk") for w in doc.warnings)


# ---- the question before a write -------------------------------------------------------------

def test_the_question_names_only_the_phases_it_runs_and_where_it_writes(
        sim: SimCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.run(sim.kubeconfig, "apply", "--phase", "1", "--yes").code == 0
    monkeypatch.setattr(sessions, "interactive", lambda: True)
    res = CliRunner().invoke(app, ["apply", "--phase", "2", "--kubeconfig", sim.kubeconfig],
                             input="n\n")
    assert res.exit_code == 2, res.output
    assert "Phase 2 — alias" in res.stdout
    assert "Phase 1 —" not in res.stdout and "Phase 3 —" not in res.stdout
    context = yaml.safe_load(Path(sim.kubeconfig).read_text())["current-context"]
    where = f"context {context} (server {sim.url}), namespace {NS}"
    assert where in res.stdout
    assert f"Write these changes to {where}?" in res.stderr
    assert "fix: nothing was written; rerun and answer y, or pass --yes to skip the " \
           "question" in " ".join(res.stderr.split())
    assert "rerun with --yes" not in res.stderr


def test_an_answered_question_prints_each_warning_once(
        sim: SimCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The question's table shows the warnings; the report after the run does not repeat
    them (it says how many were shown)."""
    monkeypatch.setattr(sessions, "interactive", lambda: True)
    res = CliRunner().invoke(app, ["apply", "--phase", "1", "--kubeconfig", sim.kubeconfig],
                             input="y\n")
    assert res.exit_code == 0, res.output
    doc = cli.run(sim.kubeconfig, "plan", "-o", "json").json()
    assert doc["warnings"], "the seeded cluster has warnings to show"
    first = " ".join(doc["warnings"][0].split())[:60]
    assert " ".join(res.stdout.split()).count(first) == 1, res.stdout
    assert "warnings shown before the question" in res.stdout


# ---- 80 columns ------------------------------------------------------------------------------

def test_at_80_columns_no_object_name_is_split(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(render, "_console", lambda stderr=False: Console(
        file=out, width=80, highlight=False, color_system=None))
    doc = assemble.build(b.gpucluster_snapshot(), load_catalog(), None, Options())
    render.report_table(doc)
    text = out.getvalue()
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    for phase in doc.phases:
        for change in phase.changes:
            assert any(change.object in line for line in lines), change.object
            assert any(change.field in line for line in lines), change.field
    assert "exporter-d\n" not in text and "nvidia-dcgm-exporter-dr\n" not in text


def test_wide_enough_changes_stay_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    con = Console(file=out, width=160, highlight=False, color_system=None)
    changes = [Change("Service/nvidia-dcgm-exporter", "spec.selector",
                      {"app": "nvidia-dcgm-exporter-dra"}, {"a": "b", "c": "d"})]
    render.changes_table(con, changes)
    assert _lines(out.getvalue())[1].split() == [
        "Service/nvidia-dcgm-exporter", "spec.selector", "app=nvidia-dcgm-exporter-dra",
        "a=b,", "c=d"]


# ---- settle: start and end only, off a terminal ----------------------------------------------

def test_a_plain_settle_countdown_is_its_start_and_its_end() -> None:
    out = io.StringIO()
    progress = PlainProgress(out)
    for left in range(30, -1, -1):
        progress.settle(float(left))
    said = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert said == ["  settling 30s (kube-proxy programs the selector change)",
                    "  settled after 30s"]


def test_a_non_terminal_rollback_prints_the_settle_twice(sim: SimCluster) -> None:
    assert cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    res = cli.run(sim.kubeconfig, "rollback", "--phase", "1", "--yes", "--settle", "5s")
    assert res.code == 0, res.stderr
    said = [line.split(" ", 1)[1] for line in res.stderr.splitlines() if "settl" in line]
    assert len(said) == 2, res.stderr  # from the recorded finish: what is left of the 5 s
    assert re.fullmatch(r"  settling [1-5]s \(kube-proxy programs the selector change\)",
                        said[0]), said
    assert re.fullmatch(r"  settled after [1-5]s", said[1]), said


# ---- status --watch ends quietly -------------------------------------------------------------

def test_status_watch_interrupted_says_nothing_about_resuming(
        sim: SimCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    res = cli.run(sim.kubeconfig, "status", "--watch", "--interval", "1")
    assert res.code in (0, 1), res.stderr
    assert "resume" not in res.stdout + res.stderr
    assert "Phase 1 — label" in res.stdout


# ---- usage errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("argv, says, fix", [
    (["apply", "--phase", "abc"], "Invalid value for '--phase'", "fix: pass --phase 1, 2 or 3"),
    (["apply"], "Missing option '--phase'", "fix: pass --phase 1, 2 or 3"),
    (["rollback", "--phase", "x"], "Invalid value for '--phase'", "fix: pass --phase 1, 2 or 3"),
    (["status", "--bogus"], "No such option: --bogus",
     "fix: see `dcgm-migrate status --help`"),
])
def test_usage_errors_have_a_fix_line_and_the_json_error_document(
        argv: list[str], says: str, fix: str) -> None:
    for output in ([], ["-o", "json"]):
        res = CliRunner().invoke(app, [*argv, *output], prog_name="dcgm-migrate")
        assert res.exit_code == 2, res.output
        lines = _lines(res.stderr)
        assert lines[-2].startswith("Error: ") and says in lines[-2], lines
        assert lines[-1].startswith(fix), lines
        if output:
            doc = json.loads(res.stdout)
            cli.validate("error", doc)
            Draft202012Validator(SCHEMA).validate(doc)  # the top level accepts it
            assert doc["error"]["exitCode"] == 2 and says in doc["error"]["message"]
        else:
            assert res.stdout == ""


def test_the_top_level_schema_accepts_every_error_document() -> None:
    doc = {"error": {"message": "There is no phase 7.", "hint": "pass --phase 1, 2 or 3",
                     "exitCode": 2, "type": "UsageError"}}
    Draft202012Validator(SCHEMA).validate(doc)


# ---- --include-operator-owned after phase 3 --------------------------------------------------

def test_include_operator_owned_after_phase_3_says_how_to_apply_it(sim: SimCluster) -> None:
    assert cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    res = cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--include-operator-owned",
                  "-o", "json")
    assert res.code == 0, res.stderr
    said = [w for w in res.json()["warnings"] if w.startswith("--include-operator-owned")]
    assert len(said) == 1, res.json()["warnings"]
    where = f"--kubeconfig {sim.kubeconfig}"  # pointed at the same cluster
    assert f"`dcgm-migrate rollback --phase 3 {where}`" in said[0]
    assert f"`dcgm-migrate apply --phase 3 --include-operator-owned {where}`" in said[0]
    assert "Service/nvidia-dcgm-dra" in said[0]
    plain = cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "-o", "json")
    assert not any(w.startswith("--include-operator-owned") for w in plain.json()["warnings"])


# ---- shell completion, the plugin's name ------------------------------------------------------

def _complete(monkeypatch: pytest.MonkeyPatch, words: str) -> list[str]:
    monkeypatch.setenv("_DCGM_MIGRATE_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", words)
    monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - (0 if words.endswith(" ")
                                                                else 1)))
    return CliRunner().invoke(app, [], prog_name="dcgm-migrate").stdout.split()


def test_completion_offers_the_phases_and_the_kubeconfig_contexts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _complete(monkeypatch, "dcgm-migrate apply --phase ") == ["1", "2", "3"]
    assert _complete(monkeypatch, "dcgm-migrate rollback --phase 2") == ["2"]
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({"contexts": [
        {"name": "prod", "context": {}}, {"name": "staging", "context": {}}]}))
    monkeypatch.setenv("KUBECONFIG", str(config))
    assert _complete(monkeypatch, "dcgm-migrate plan --context ") == ["prod", "staging"]
    assert _complete(monkeypatch, "dcgm-migrate status --context st") == ["staging"]
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert _complete(monkeypatch, "dcgm-migrate plan --context ") == []


def test_a_tab_completes_through_the_console_entry_point() -> None:
    env = {**os.environ, "_DCGM_MIGRATE_COMPLETE": "complete_bash",
           "COMP_WORDS": "dcgm-migrate apply --ph", "COMP_CWORD": "2", "PYTHONPATH": str(REPO)}
    code = "import sys\nsys.argv[0] = 'dcgm-migrate'\nfrom migrator.cli.app import main\nmain()\n"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert res.stdout.split() == ["--phase"], res.stdout + res.stderr
    assert res.returncode == 0 and not res.stderr, res.stderr


def test_the_plugin_help_shows_the_kubectl_command_line() -> None:
    res = CliRunner().invoke(app, ["apply", "--help"], prog_name="kubectl dcgm-migrate")
    assert res.exit_code == 0
    flat = " ".join(res.stdout.split())
    assert flat.startswith("Usage: kubectl dcgm-migrate apply")
    assert "Example: kubectl dcgm-migrate apply --phase 2 --yes" in flat
    assert "Example: dcgm-migrate" not in flat
    # Computed per call: the shared app is not rewritten for the next invocation.
    again = " ".join(CliRunner().invoke(app, ["apply", "--help"],
                                        prog_name="dcgm-migrate").stdout.split())
    assert "Example: dcgm-migrate apply --phase 2 --yes" in again and "kubectl" not in again
    sim = " ".join(CliRunner().invoke(app, ["sim", "serve", "--help"],
                                      prog_name="kubectl dcgm-migrate").stdout.split())
    assert "Example: kubectl dcgm-migrate sim serve" in sim


# ---- the README's serial test command works ----------------------------------------------------

def test_the_readme_serial_test_command_runs() -> None:
    readme = (REPO / "README.md").read_text()
    assert "`python3 -m pytest -n 0` runs it\nserially" in readme
    res = subprocess.run([sys.executable, "-m", "pytest", "-n", "0", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "tests/cli/test_docs.py"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "unrecognized arguments" not in res.stderr
