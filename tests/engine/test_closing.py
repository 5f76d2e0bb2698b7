"""The report's closing lines (engine/assemble.py `closing`), on typed reports: the verdict
worded alike for every command, and after a run what the run achieved, both when they differ."""

from __future__ import annotations

from migrator.engine import assemble
from migrator.engine.reports import (
    Closing,
    PhaseView,
    PlanReport,
    RunOutcome,
    RunReport,
    RunView,
    StatusReport,
)
from migrator.model.outcome import Finding, Verdict
from migrator.model.phasestatus import PhaseStatus


def _report(verdict_ok: bool, statuses: tuple[str, ...]) -> PlanReport:
    checks = (Finding("stable-name", "Service/nvidia-dcgm", True, "exists"),
              Finding("nodes-covered", "Service/nvidia-dcgm", verdict_ok, "2 of 4",
                      "" if verdict_ok else "run the guard", phase=0))
    return PlanReport("gpucluster", "gpu-operator", "sha256:" + "0" * 64, (),
                      tuple(PhaseView(i + 1, name, PhaseStatus(st), (), (), (), None)
                            for i, (name, st) in enumerate(zip(("label", "alias", "switch"),
                                                               statuses, strict=True))),
                      (), 0, 0, Verdict("gpucluster", checks), ())


def _doc(verdict_ok: bool, *, ok: bool | None = None, operation: str | None = None,
         statuses: tuple[str, ...] = ("completed", "completed", "completed"),
         run: RunView | None = None) -> PlanReport | RunReport | StatusReport:
    report = _report(verdict_ok, statuses)
    if run is not None:
        assert ok is not None
        return StatusReport(report, None, run, ok)
    if operation is not None:
        assert ok is not None
        return RunReport(report, RunOutcome(operation, 1, False, {}), ok)
    return report


def closing(shown: PlanReport | RunReport | StatusReport) -> list[str]:
    """The typed closing lines as the table reads them."""
    lines = assemble.closing(shown)
    assert all(isinstance(line, Closing) for line in lines)
    return [str(line) for line in lines]


BROKEN = ("verdict: NOT OK — 1 of 2 checks fail; consumers' traffic is misrouted or dropped: "
          "nodes-covered/nvidia-dcgm")  # a traffic-critical check (model/findings.py)


def test_plan_and_verify_say_the_verdict_only() -> None:
    assert closing(_doc(True)) == ["verdict: OK — the stable identity works (2 checks)"]
    assert closing(_doc(False)) == [BROKEN]


def test_a_run_whose_phases_are_done_on_a_broken_identity_says_both() -> None:
    assert closing(_doc(False, ok=True, operation="apply")) == [
        BROKEN,
        "run: OK — phases 1-3 done; the stable identity is not whole yet "
        "(nodes-covered/nvidia-dcgm), which no phase answers for; fix: run the guard"]
    assert closing(_doc(True, ok=True, operation="apply")) == [
        "verdict: OK — the stable identity works (2 checks)", "run: OK — phases 1-3 done"]


def test_a_failed_run_and_a_rollback_name_what_they_did() -> None:
    assert closing(_doc(True, ok=False, operation="apply",
                        statuses=("completed", "failed", "pending")))[1] == (
        "run: NOT OK — phase 1 done; a gate of the phases it ran fails (above)")
    assert closing(_doc(True, ok=True, operation="rollback",
                        statuses=("completed", "rolled-back", "rolled-back")))[1] == (
        "run: OK — phases 2-3 rolled back")


def test_status_names_why_it_fails_beyond_the_verdict() -> None:
    doc = _doc(True, ok=False, run=RunView("interrupted", "rollback", 1, 1, None,
                                           "dcgm-migrate rollback --phase 1 -n x", None, None,
                                           None))
    assert closing(doc)[1] == ("status: NOT OK — a run was interrupted; resume: "
                               "`dcgm-migrate rollback --phase 1 -n x`")
