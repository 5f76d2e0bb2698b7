"""`dcgm-migrate demo`: its pure helpers, and whole runs in-process on both stacks (non-TTY)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from dcgm_sim_cli.demo import (
    MAX_TIME_SCALE,
    Stage,
    auto_time_scale,
    lowest_after_reaching,
    merge_lowest,
    service_rows,
)
from migrator.cli import plugins
from migrator.cli.app import app

FAST = ["--time-scale", "0.002"]  # 25 simulated seconds per pod restart -> 50 ms


# ---- pure helpers ---------------------------------------------------------------------------

def test_time_scale_targets_the_same_wall_time_at_any_size() -> None:
    small, large = auto_time_scale(2, 5, 5), auto_time_scale(1000, 5, 5)
    assert small == MAX_TIME_SCALE  # 2 nodes: 160 simulated s at 20x is 8 s
    # per node: both DaemonSets' pod stop + start, plus their probe delays (15 s + 45 s)
    assert large == pytest.approx(20 / (1000 * (2 * 10 + 60)))
    assert auto_time_scale(1000, 5, 5, probes=0) == pytest.approx(20 / (1000 * 20))
    assert auto_time_scale(0, 5, 5) == MAX_TIME_SCALE


def test_lowest_ignores_an_alias_filling_up_but_not_a_later_dip() -> None:
    assert lowest_after_reaching([0, 1, 2, 3, 3], 3) == 3
    assert lowest_after_reaching([0, 3, 2, 3], 3) == 2
    assert lowest_after_reaching([3, 3, 2, 3, 3], 3) == 2
    assert lowest_after_reaching([0, 1], 3) is None
    assert lowest_after_reaching([], 3) is None


def test_rows_merge_runs_and_flag_a_service_below_its_baseline() -> None:
    stages = [Stage("apply --phase 1", 1.0, 1, 2, {"a": (4, 4), "b": (4, 4)}),
              Stage("apply --phase 3", 1.0, 3, 1, {"a": (3, 4), "c": (2, 2)})]
    assert merge_lowest(stages) == {"a": (3, 4), "b": (4, 4), "c": (2, 2)}
    rows = service_rows(stages, {"a": [4, 3, 4], "b": [4, 4], "c": [0, 2]})
    assert rows == [("a", 4, 3, 3, False), ("b", 4, 4, 4, True), ("c", 2, 2, 2, True)]


# ---- whole runs -----------------------------------------------------------------------------

def _summary(stdout: str) -> str:
    assert "Summary" in stdout, stdout[-2000:]
    return stdout[stdout.rindex("Summary"):]


def test_demo_gpucluster_runs_plan_apply_status_and_summarises() -> None:
    res = CliRunner().invoke(app, ["demo", "--nodes", "3", *FAST], catch_exceptions=False)
    assert res.exit_code == 0, res.output[-3000:]
    out = res.stdout
    commands = re.findall(r"^\$ (dcgm-migrate .+)$", out, re.M)
    assert commands == ["dcgm-migrate plan", "dcgm-migrate apply --phase 1 --yes",
                        "dcgm-migrate apply --phase 2 --yes",
                        "dcgm-migrate apply --phase 3 --yes", "dcgm-migrate status"]
    summary = _summary(out)
    # phase 1 in place: hold, labels, restore per DaemonSet and a patch per pod (2 x 3 + 6)
    for phase, writes in (("1 label", 12), ("2 alias", 2), ("3 switch", 2)):
        assert re.search(rf"{phase}\s+completed\s+{writes}\s+\d+\.\d s", summary), summary
    for svc in ("nvidia-dcgm", "nvidia-dcgm-dra", "nvidia-dcgm-exporter",
                "nvidia-dcgm-exporter-dra"):
        row = re.search(rf"^ {svc}\s+(\d+)\s+(\d+)\s+(\d+)\s+(yes|NO)", summary, re.M)
        assert row, f"no row for {svc}:\n{summary}"
        baseline, gates_low, any_low, held = row.groups()
        assert (baseline, gates_low, held) == ("3", "3", "yes")
        # Phase 1 relabels the pods in place (none restarts) and phases 2 and 3 move no
        # pods: never below baseline.
        assert int(any_low) == 3, summary
    assert "verdict OK" in summary
    # non-TTY: progress is plain timestamped lines on stderr, never bars or escape codes
    assert re.search(r"^\d\d:\d\d:\d\d   rollout  DaemonSet/nvidia-dcgm-dra: updated 3/3",
                     res.stderr, re.M), res.stderr
    assert "phase 3 (switch) completed" in res.stderr
    assert "\x1b[" not in res.output and "━" not in res.output


def test_demo_clusterpolicy_keeps_legacy_names_and_switches_nothing_operator_owned() -> None:
    res = CliRunner().invoke(app, ["demo", "--stack", "clusterpolicy", "--nodes", "2", *FAST],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output[-3000:]
    summary = _summary(res.stdout)
    assert re.search(r"1 label\s+completed\s+10", summary)  # in place: 2 x 3 + 2 x 2 pods
    assert re.search(r"2 alias\s+completed\s+0", summary)  # the legacy stack gets no aliases
    assert re.search(r"3 switch\s+completed\s+0", summary)  # its Services are operator-owned
    assert "-dra" not in summary
    assert "not switched (--include-operator-owned" in " ".join(res.stdout.split())


def test_demo_rejects_an_unknown_stack_with_exit_2() -> None:
    res = CliRunner().invoke(app, ["demo", "--stack", "mixed"])
    assert res.exit_code == 2
    assert "gpucluster" in res.output and "clusterpolicy" in res.output


# ---- without the simulator (the container image) --------------------------------------------

@pytest.mark.parametrize("argv", [["demo", "--nodes", "2"], ["sim", "serve", "--nodes", "2"]])
def test_without_the_simulator_demo_and_serve_refuse_with_the_fix(
        argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An installation without the simulated cluster's distribution (the tool alone, its image:
    no entry point provides `demo` or `sim`) refuses in one sentence, the fix and exit 2,
    before anything starts. tests/cli/test_fresh_venv.py checks the same on a real install."""
    monkeypatch.setattr(plugins, "entry_points", lambda **_: ())
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert "needs the simulated cluster, which is not installed here" in res.output
    assert "fix: install the simulated cluster beside the tool from the source checkout: " \
        "`python3 -m pip install ./simulator`" in res.output
    assert "Traceback" not in res.output


def test_the_installed_simulator_provides_demo_and_sim_through_entry_points() -> None:
    """With the simulated cluster installed (as for the tests), its distribution's entry points
    are what `demo` and `sim` run: their help is the plugin's, with its options."""
    for argv, option in ((["demo", "--help"], "--nodes"), (["sim", "serve", "--help"],
                                                           "--kubeconfig-out")):
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, res.output
        assert option in res.output
