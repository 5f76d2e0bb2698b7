"""The benchmark harness keeps working: one run at 10 nodes end to end, and its pure parts
(rollout floor, statistics, request-log accounting, target judging). No timing is asserted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks import floor, inplace, report, stats
from benchmarks.__main__ import main
from benchmarks.breakdown import group_of
from benchmarks.simproc import Traffic


def _ds(name: str, desired: int, max_unavailable: Any) -> dict[str, Any]:
    rolling = {} if max_unavailable is None else {"maxUnavailable": max_unavailable}
    return {"metadata": {"name": name},
            "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}},
            "status": {"desiredNumberScheduled": desired}}


def test_floor_sums_waves_of_each_daemonset_in_turn() -> None:
    total, parts = floor.phase1_floor(
        [_ds("a", 10, 1), _ds("b", 10, "25%"), _ds("c", 0, 1)],
        pod_start_seconds=30, termination_seconds=1, time_scale=0.01)
    assert [(p.waves, p.max_unavailable) for p in parts] == [(10, 1), (4, 3), (0, 1)]
    assert total == pytest.approx((10 + 4) * 31 * 0.01)


def test_floor_counts_the_readiness_probe_delay() -> None:
    ds = _ds("a", 4, 1)
    ds["spec"]["template"] = {"spec": {"containers": [
        {"name": "x", "readinessProbe": {"initialDelaySeconds": 45}}, {"name": "y"}]}}
    part = floor.daemonset_floor(ds, pod_start_seconds=2, termination_seconds=1, time_scale=1.0)
    assert part.seconds == 4 * 48.0


def test_floor_defaults_to_one_node_at_a_time() -> None:
    part = floor.daemonset_floor(_ds("a", 7, None), pod_start_seconds=2,
                                 termination_seconds=1, time_scale=1.0)
    assert (part.waves, part.seconds) == (7, 21.0)


def test_summary_reports_median_and_spread() -> None:
    s = stats.summary([2.0, 1.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["spread"]) == (2.0, 1.0, 4.0, 1.5)
    assert stats.summary([])["median"] is None
    assert stats.ratio(1.0, 0.0) is None


def test_traffic_separates_continue_pages_and_verbs() -> None:
    t = Traffic.of([
        {"verb": "list", "query": "limit=500", "bytes_sent": 10},
        {"verb": "list", "query": "limit=500&continue=abc", "bytes_sent": 5},
        {"verb": "watch", "query": "watch=1", "bytes_sent": 0},
        {"verb": "patch", "query": "", "bytes_sent": 1},
    ])
    assert (t.requests, t.first_pages, t.pages, t.watches, t.writes, t.bytes_sent) == (
        4, 3, 1, 1, 1, 16)


def test_targets_flag_requests_that_grow_with_nodes() -> None:
    def read(nodes: int, first: int) -> dict[str, Any]:
        cmd = {"traffic": {"first_pages": first}, "wall_s": {"median": 1.0},
               "peak_rss_mb": {"max": 50.0}}
        return {"nodes": nodes, "stack": "gpucluster", "commands": {"plan": cmd, "status": cmd}}

    judged = report.targets({"reads": [read(10, 14), read(100, 15)]})
    plan = next(t for t in judged if t["target"].startswith("`plan`"))
    assert plan["met"] is False
    assert "100 nodes 15" in plan["figure"]


def test_targets_judge_api_bytes_per_apply_in_full_reads() -> None:
    def applied(nodes: int, per_apply: float) -> dict[str, Any]:
        return {"nodes": nodes, "stack": "gpucluster", "reads_per_apply": {"max": per_apply},
                "ratio_to_floor": {"median": 1.0}, "wall_s": {"median": 1.0}, "floor_s": 1.0,
                "peak_rss_mb": {"max": 50.0}}

    def judged(*applies: dict[str, Any]) -> dict[str, Any]:
        return next(t for t in report.targets({"apply": list(applies)})
                    if "full reads" in t["target"])

    assert judged(applied(10, 1.2), applied(100, 1.4))["met"] is True
    over = judged(applied(10, 1.2), applied(100, 2.3))
    assert over["met"] is False and "100 nodes gpucluster 2.3" in over["figure"]
    assert judged()["met"] is None
    alone = dict(applied(100, 2.3), switch_reads_per_apply={"max": 1.1})
    phase3 = next(t for t in report.targets({"apply": [alone]})
                  if t["target"].startswith("apply --phase 3 with phases 1-2 done"))
    assert phase3["met"] is True and "100 nodes gpucluster 1.1" in phase3["figure"]


def test_targets_judge_status_against_kubectl_at_fleet_sizes_only() -> None:
    def read(nodes: int, ratio: float) -> dict[str, Any]:
        cmd = {"traffic": {"first_pages": 14}, "wall_s": {"median": 1.0},
               "peak_rss_mb": {"max": 50.0}}
        return {"nodes": nodes, "stack": "gpucluster", "ratios": {"status_vs_kubectl": ratio},
                "commands": {"plan": cmd, "status": cmd, "kubectl": cmd}}

    def judged(*reads: dict[str, Any]) -> list[tuple[str, bool | None]]:
        return [(t["target"], t["met"]) for t in report.targets({"reads": list(reads)})
                if t["target"].startswith("status/kubectl")]

    # a small cluster pays the fixed start, which the start-up target judges instead
    assert judged(read(10, 2.9), read(100, 2.0)) == []
    assert judged(read(10, 2.9), read(1000, 0.5), read(5000, 0.2)) == [
        ("status/kubectl <= 1 at 1000 nodes (gpucluster)", True),
        ("status/kubectl <= 1 at 5000 nodes (gpucluster)", True)]
    assert judged(read(1000, 1.1), read(5000, 1.3)) == [
        ("status/kubectl <= 1 at 1000 nodes (gpucluster)", False),
        ("status/kubectl <= 1 at 5000 nodes (gpucluster)", False)]


def test_targets_judge_the_cli_start_against_one_second() -> None:
    def start(median: float) -> list[tuple[str, bool | None]]:
        return [(t["target"], t["met"]) for t in report.targets(
            {"cli_start": {"wall_s": {"median": median}}}) if t["target"].startswith("CLI")]

    assert start(0.94) == [("CLI start (--help) under 1s", True)]
    assert start(1.07) == [("CLI start (--help) under 1s", False)]


def test_breakdown_groups_requests_by_verb_resource_name_and_selector() -> None:
    record = {"verb": "watch", "resource": "daemonsets", "name": "",
              "query": "watch=1&fieldSelector=metadata.name%3Dnvidia-dcgm&includeObject=None"}
    assert group_of(record) == ("watch", "daemonsets", "",
                                "fieldSelector=metadata.name=nvidia-dcgm")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_benchmark_runs_at_ten_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.json"
    code = main(["--sizes", "10", "--runs", "1", "--stacks", "gpucluster", "--help-runs", "1",
                 "--out", str(out)])
    assert code == 0
    results = json.loads(out.read_text())
    read = results["reads"][0]
    assert read["nodes"] == 10 and read["stack"] == "gpucluster"
    # status judges the unmigrated cluster honestly: the stable names do not exist yet (exit 1)
    for name, code in (("plan", 0), ("status", 1), ("kubectl", 0)):
        command = read["commands"][name]
        assert command["exit_codes"] == [code], name
        assert command["traffic"]["requests"] > 0
        assert command["traffic"]["bytes_sent"] > 0
        assert command["peak_rss_mb"]["median"] > 0
    applied = results["apply"][0]
    assert applied["exit_codes"] == [0]
    assert applied["traffic"]["writes"] > 0 and applied["traffic"]["watches"] > 0
    assert [p["waves"] for p in applied["floor_parts"]] == [10, 10]
    assert applied["floor_s"] > 0
    assert applied["sim_alone"]["wall_s"] > 0
    assert applied["full_read_mb"] > 0 and applied["reads_per_apply"]["median"] > 0
    # Phase 3 alone (rolled back, applied again) reads at least the plan's one full read,
    # and less than the whole migration, whose rollouts replaced every pod.
    alone = applied["switch_reads_per_apply"]["median"]
    assert 1.0 <= alone < applied["reads_per_apply"]["median"]
    printed = capsys.readouterr().out
    assert "== 10 nodes, gpucluster" in printed
    assert "Targets (docs/performance.md, 'Targets'):" in printed
    assert "full reads per apply" in printed


def test_inplace_benchmark_runs_at_ten_nodes(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks.inplace end to end at 10 nodes: in place measured (no pod restarted, no
    endpoint lost, a patch per pod), rolling estimated from the fixtures' timings and
    labelled so, both in one table. No timing is asserted."""
    out = tmp_path / "inplace.json"
    assert inplace.main(["--sizes", "10", "--measure-rolling-upto", "0",
                         "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["path"], r["basis"]) for r in rows] == [("in place", "measured"),
                                                      ("rolling", "estimated")]
    here, rolled = rows
    assert here["exit"] == 0 and here["pods"] == 20 and here["pods_restarted"] == 0
    assert here["pod_writes"] == 20
    assert all(low == before for low, before in here["lowest_ready"].values())
    assert rolled["pods_restarted"] == 20
    # 10 waves of 1 s termination + 2 s start + the probe delay: 15 s DCGM, 45 s exporter
    assert rolled["sim_seconds"] == 10 * 18 + 10 * 48
    printed = capsys.readouterr().out
    assert "in place measured" in printed and "rolling  estimated" in printed
