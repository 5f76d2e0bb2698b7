"""A typed report (engine/reports.py) as its `-o json|yaml` document (docs/output.schema.json),
keys in the schema's order."""

from __future__ import annotations

from functools import singledispatch
from typing import Any

from migrator.engine.reports import (
    GuardReport,
    PhaseView,
    PlanReport,
    PreflightReport,
    Question,
    RollbackPhase,
    RunOutcome,
    RunReport,
    RunView,
    StateDigest,
    StatusReport,
    UnlockReport,
)
from migrator.errors import MigrateError, exit_code_for

Doc = dict[str, Any]


@singledispatch
def to_document(report: object) -> Doc:
    raise TypeError(f"no document for {type(report).__name__}")


def _phase(view: PhaseView) -> Doc:
    doc: Doc = {"number": view.number, "name": view.name, "status": view.status.value,
                "changes": [c.as_dict() for c in view.changes],
                "gates": [g.as_dict() for g in view.gates], "notes": list(view.notes),
                "blocked": view.blocked, "error": view.error}
    if view.preview is not None:
        doc["preview"] = {"outcome": view.preview.outcome,
                          "wouldWaitFor": list(view.preview.would_wait_for)}
    return doc


@to_document.register
def _plan(report: PlanReport) -> Doc:
    change = report.stack_change
    return {
        "stack": report.stack, "namespace": report.namespace, "fingerprint": report.fingerprint,
        "components": list(report.components), "phases": [_phase(v) for v in report.phases],
        "warnings": list(report.warnings), "toolDuplicates": report.tool_duplicates,
        "scrapeDuplicates": report.scrape_duplicates, "verdict": report.verdict.as_dict(),
        "lostState": list(report.lost_state),
        "stackChange": change and {"recorded": change.recorded, "live": change.live},
    }


@to_document.register
def _question(question: Question) -> Doc:
    target = question.target
    return {**_plan(question.report), "target": {
        "context": target.context, "server": target.server, "namespace": target.namespace}}


def _result(result: RunOutcome) -> Doc:
    doc: Doc = {"operation": result.operation, "writes": result.writes,
                "dryRun": result.dry_run,
                "lowestEndpoints": {k: {"lowest": v.lowest, "baseline": v.baseline}
                                    for k, v in result.lowest_endpoints.items()}}
    if result.notes is not None:
        doc["notes"] = list(result.notes)
    return doc


@to_document.register
def _run(report: RunReport) -> Doc:
    return {**_plan(report.report), "result": _result(report.result), "ok": report.ok}


def _state(digest: StateDigest) -> Doc:
    return {"planFingerprint": digest.plan_fingerprint, "updated": digest.updated,
            "lastError": digest.last_error, "history": [dict(e) for e in digest.history]}


def _rollback(phase: RollbackPhase) -> Doc:
    return {"phase": phase.phase, "name": phase.name, "status": phase.status.value,
            "steps": [{"object": s.object, "type": s.type, "status": s.status,
                       "changes": [c.as_dict() for c in s.changes]} for s in phase.steps]}


def run_view(run: RunView) -> Doc:
    lock = run.lock
    return {
        "state": run.state, "operation": run.operation, "target": run.target,
        "phase": run.phase, "lock": lock and {"holder": lock.holder, "acquired": lock.acquired,
                                              "expires": lock.expires, "live": lock.live,
                                              "gone": lock.gone},
        "resume": run.resume,
        "lastEvent": dict(run.last_event) if run.last_event is not None else None,
        "waitsFor": run.waits_for,
        "rollback": None if run.rollback is None else [_rollback(p) for p in run.rollback],
    }


@to_document.register
def _status(report: StatusReport) -> Doc:
    doc = {**_plan(report.report), "state": report.state and _state(report.state),
           "run": run_view(report.run), "ok": report.ok}
    if report.state_error is not None:
        doc["stateError"] = error_document(report.state_error)
    return doc


def error_document(error: MigrateError, hint: str | None = None) -> Doc:
    """An error as `-o json|yaml` shows it (`hint`: as the CLI completed it)."""
    return {"message": error.message, "hint": error.hint if hint is None else hint,
            "exitCode": exit_code_for(error), "type": type(error).__name__}


@to_document.register
def _unlock(report: UnlockReport) -> Doc:
    return {"namespace": report.namespace, "released": report.released,
            "forced": report.forced, "holderGone": report.holder_gone}


@to_document.register
def _preflight(report: PreflightReport) -> Doc:
    return {"namespace": report.namespace, "server": report.server,
            "checks": [c.as_dict() for c in report.checks], "ok": report.ok}


@to_document.register
def _guard(report: GuardReport) -> Doc:
    return {"namespace": report.namespace, **report.passed.as_dict(),
            "verdict": report.verdict.as_dict()}
