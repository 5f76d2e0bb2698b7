"""`python3 -m benchmarks.guard` keeps working: one run at 8 nodes (4 per stack), one takeover,
a 2-second steady window. It checks only that every figure is produced, never a timing."""

from __future__ import annotations

import json

import pytest

from benchmarks.guard import main


def test_guard_benchmark_produces_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    # the steady window holds at least two Lease renewals (client-go retry period: 2 s)
    main(["--nodes", "8", "--takeovers", "1", "--steady-seconds", "5", "--timeout", "120"])
    out = capsys.readouterr().out.strip().splitlines()
    assert "takeover reaction" in "\n".join(out)
    doc = json.loads(out[-1])
    assert doc["benchmark"] == "guard" and doc["nodes"] == 8 and doc["gpucluster_nodes"] == 4
    assert doc["rss_peak_mb"] > 0 and doc["share_real_s"] > 0
    assert len(doc["reactions_s"]) == 2  # one per stable name
    assert doc["reaction_median_s"] is not None and doc["reaction_max_s"] is not None
    assert doc["steady_bytes"] > 0 and doc["bytes_per_hour"] > 0
