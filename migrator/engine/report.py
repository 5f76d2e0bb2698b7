"""The report every command renders: per phase, what would change (object, field,
before → after), every gate's status now, notes, and warnings. Pure: snapshot + state in,
a JSON-ready dict out (the `-o json` document: docs/design.md, "Command line", and
docs/output.schema.json) — `build` —, or with it the typed data it was made from (`assemble`:
each phase's status and gates, the verdict), for a command that judges the report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migrator import phases
from migrator.engine import walk
from migrator.engine.state import PhaseRecord, State
from migrator.model import monitoring, outcome
from migrator.model.discovery import Discovery, discover
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import CreateAlias, SetLabels, SetSelector

DRIFT_RISK = (
    "Drift risk after phase 3: phase 1 writes the common labels itself because the running "
    "operator does not render them. The operator's next re-render of these DaemonSets (an "
    "upgrade or a CR edit) drops the labels, the pods roll without them, and every Service "
    "switched to the common selector drains. Run `dcgm-migrate guard` (docs/guard.yaml), which "
    "holds the tool's aliases on the app label while the labels are missing, or roll back "
    "phase 3 before any operator change that does not render the common labels; "
    "`dcgm-migrate verify` exits 1 when it happens."
)

OWNED_AFTER_SWITCH = (
    "--include-operator-owned changes nothing now: phase 3 is completed, so {services} stay "
    "as they are; to switch them too, run `dcgm-migrate rollback --phase 3`, then "
    "`dcgm-migrate apply --phase 3 --include-operator-owned`"
)

LOST_STATE = (
    "No state, yet the cluster carries the tool's marks ({marks}): the state ConfigMap "
    "{ns}/{cm} was deleted or never restored, so rollback does not know what to "
    "undo. Restore it from your backup (docs/runbook.md, 'Restoring the state'); until then "
    "`apply` and `rollback` refuse and `status`/`verify` exit 1"
)


@dataclass
class PhaseView:
    """One phase in the report, as `as_dict` renders it under `phases`."""

    number: int
    name: str
    status: str
    changes: list[dict[str, Any]]
    gates: list[GateResult]
    notes: list[str]
    error: str | None
    blocked: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "name": self.name,
            "status": self.status,
            "changes": self.changes,
            "gates": [g.as_dict() for g in self.gates],
            "notes": self.notes,
            "blocked": self.blocked,
            "error": self.error,
        }


def _view(number: int, name: str, status: str, changes: list[dict[str, Any]],
          gates: list[GateResult], notes: list[str], error: str | None,
          blocked: str | None = None) -> dict[str, Any]:
    """One phase's view as a dict (`engine/preview` builds its phases with it)."""
    return PhaseView(number, name, status, changes, gates, notes, error, blocked).as_dict()


@dataclass
class Report:
    """The report `document` (the `-o json` dict, which a command may extend) and the typed
    data it was made from, to judge it by."""

    document: dict[str, Any]
    phases: list[PhaseView]
    verdict: outcome.Verdict

    def holds(self, upto: int) -> bool:
        """Phases 1..upto completed and every verification gate of theirs passes now."""
        return all(v.status == "completed" and all(g.ok for g in v.gates)
                   for v in self.phases if v.number <= upto)

    def verdict_fails(self, upto: int | None = None) -> list[outcome.Finding]:
        """The verdict's failed checks; with `upto`, only those phases 1..upto answer for
        (what `apply --phase upto` must leave right; a check no phase fixes is the cluster's
        or the operator's, reported but not the run's failure)."""
        return self.verdict.failures(upto)


def _exporters(found: Discovery) -> list[str]:
    return [c.daemonset for c in found.components if c.exporter]


# Warnings that count objects and name one example ("… 3 exporter pods …, e.g. <pod>"): the
# same warning, read before and after a run, names other pods; one of each kind is kept.
COUNTED = ("duplicate scraping now", "possible duplicate scraping",
           "duplicate scraping through the tool's aliases")


def warning_kind(text: str) -> str:
    """What makes two warnings the same one: a counted warning's kind, else its text."""
    head = text.split(":", 1)[0]
    return head if head in COUNTED else text


def merge_warnings(*groups: list[str]) -> list[str]:
    """The warnings of several reports of one command, each kind once (the first group's
    wording wins: the newest report comes first)."""
    out: dict[str, str] = {}
    for group in groups:
        for text in group:
            out.setdefault(warning_kind(text), text)
    return list(out.values())


def _switched(rec: PhaseRecord, decision: walk.Decision) -> bool:
    """The phase switched a Service to the common selector that is still the tool's (not
    rolled back, not handed over to an operator release that renders its own labels)."""
    if rec.status == "rolled-back":
        return False
    retired = {r.step_id for r in decision.retire}
    return any(isinstance(r, SetSelector) and r.id not in retired for r in rec.done_steps())


def build(snapshot: Snapshot, catalog: Catalog, state: State | None, options: Options,
          *, forward: bool = True) -> dict[str, Any]:
    return assemble(snapshot, catalog, state, options, forward=forward).document


def assemble(snapshot: Snapshot, catalog: Catalog, state: State | None, options: Options,
             *, forward: bool = True) -> Report:
    """The report. `forward`: warn about what the plan would do, too (plan, apply); a report
    of the cluster as it is (`status`, a rollback's result) warns only about what is true now
    — the drift risk only while a Service the tool switched selects by labels it wrote."""
    found = discover(snapshot, catalog)
    warnings: list[str] = list(found.warnings)
    views: list[PhaseView] = []
    projected = snapshot
    drift_risk = bool(state and any(r.wrote_labels for r in state.phases.values()
                                    if r.status != "rolled-back"))
    switches = False  # a Service is (or is to be) switched to the common selector
    for module in phases.PHASES:
        rec = state.phase(module.NUMBER) if state else None
        decision = walk.decide(module, rec, projected, catalog, found.components, options)
        status = decision.status
        if rec is not None and module.SWITCHES_SELECTORS:
            switches |= _switched(rec, decision)
        if status == "completed":
            ctx = PlanContext(projected, catalog, found.components, options)
            again = module.plan(ctx)
            warnings.extend(again.warnings)  # e.g. operator-owned, still true
            notes = decision.handed_over
            if module.SWITCHES_SELECTORS and options.include_operator_owned and again.steps:
                notes.append(OWNED_AFTER_SWITCH.format(services=", ".join(
                    s.object for s in again.steps)))
                warnings.append(notes[-1])
            views.append(PhaseView(module.NUMBER, module.NAME, status, [],
                                   list(decision.gates), notes, decision.record_error))
            continue
        plan = decision.plan
        assert plan is not None
        earlier = [v.number for v in views if v.status != "completed"]
        for step in plan.steps:
            if isinstance(step, CreateAlias):
                projected = monitoring.with_service(projected, step.body)
            if isinstance(step, SetLabels) and step.rolls_pods() and forward:
                drift_risk = True
            if isinstance(step, SetSelector) and module.SWITCHES_SELECTORS and forward:
                switches = True
        warnings.extend(plan.warnings)
        changes = [c.as_dict() for step in plan.steps for c in step.changes()]
        notes = list(plan.notes)
        if earlier and any(not g.ok for g in plan.gates):
            notes.append(f"gates show the cluster as it is now; they are expected to pass once "
                         f"phase {', '.join(map(str, earlier))} completes")
        if plan.blocked and plan.blocked not in notes:
            notes.append(plan.blocked)
        views.append(PhaseView(module.NUMBER, module.NAME, status, changes, list(plan.gates),
                               notes, decision.record_error, plan.blocked))
    certain = monitoring.certain_duplicates(snapshot, _exporters(found))
    if certain:
        pod, paths = next(iter(sorted(certain.items())))
        warnings.append(f"duplicate scraping now: {len(certain)} exporter pods scraped more "
                        f"than once, e.g. {pod} via {'; '.join(map(str, paths))}")
    possible = monitoring.possible_duplicates(snapshot, _exporters(found))
    if possible:
        paths = monitoring.scrape_paths(snapshot, _exporters(found))[possible[0]]
        warnings.append(f"possible duplicate scraping: {len(possible)} exporter pods are "
                        "reached both by annotation discovery and by a ServiceMonitor, e.g. "
                        f"{possible[0]} via {'; '.join(map(str, paths))} — scraped twice if one "
                        "Prometheus uses both; pick one mechanism (docs/monitoring.md)")
    warnings.extend(monitoring.conflicting_monitors(snapshot))
    ours = [n for n, s in snapshot.services.items() if catalog.common.tool_owned(s)]
    tool_dups = monitoring.duplicates_through(snapshot, _exporters(found), ours)
    if tool_dups:
        warnings.append(f"duplicate scraping through the tool's aliases: {len(tool_dups)} "
                        f"exporter pods, e.g. {tool_dups[0]}")
    if drift_risk and switches and found.components:
        warnings.append(DRIFT_RISK)
    lost = outcome.tool_marks(snapshot, catalog) if state is None else []
    if lost:
        warnings.append(LOST_STATE.format(ns=snapshot.namespace, cm=catalog.common.state_configmap,
                                          marks=", ".join(lost[:4])))
    warnings.extend(monitoring.truncated_endpoints(snapshot))
    if state is not None and state.stack_changed(found.stack):
        change = (f"the GPU Operator stack changed from {state.stack} (recorded) to "
                  f"{found.stack}: the completed phases were planned for {state.stack}; "
                  f"`dcgm-migrate apply --phase 3` re-plans them for {found.stack} "
                  "(docs/runbook.md, 'Changing stack')")
        warnings.insert(0, change)
        first = next(v for v in views if v.status == "completed")
        first.gates.insert(0, GateResult("stack-unchanged", False, change))
    verdict = outcome.verdict(snapshot, catalog)
    document = {
        "stack": found.stack,
        "namespace": snapshot.namespace,
        "fingerprint": snapshot.fingerprint(),
        "components": [f"{c.stack}/{c.component}" for c in found.components],
        "phases": [v.as_dict() for v in views],
        "warnings": warnings,
        "toolDuplicates": len(tool_dups),
        "scrapeDuplicates": len(certain),
        "verdict": verdict.as_dict(),
        "lostState": lost,
    }
    return Report(document, views, verdict)


def all_gates_ok(report: dict[str, Any], *, completed_only: bool = False) -> bool:
    for phase in report["phases"]:
        if completed_only and phase["status"] != "completed":
            continue
        if any(not g["ok"] for g in phase["gates"]):
            return False
    return True


def _span(numbers: list[int]) -> str:
    return (f"{numbers[0]}-{numbers[-1]}" if len(numbers) > 1 and
            numbers == list(range(numbers[0], numbers[-1] + 1)) else ", ".join(map(str, numbers)))


def _status_faults(document: Mapping[str, Any]) -> list[str]:
    """Why `status` fails beyond the verdict: the state's side of the answer."""
    out = []
    run = document.get("run") or {}
    if run.get("state") == "interrupted":
        out.append(f"a run was interrupted; resume: {run.get('resume')}")
    if document.get("lostState"):
        out.append("the state is lost (Warnings)")
    if not all_gates_ok(dict(document), completed_only=True):
        out.append("a completed phase no longer holds (above)")
    if not (document.get("verdict") or {}).get("ok", True):
        out.append("the stable identity is broken (verdict above)")
    return out or ["see above"]


def closing(document: Mapping[str, Any]) -> list[str]:
    """The report's last lines, worded alike for every command: the verdict on the live
    cluster (the one `verify` gives), and, after `apply` or `rollback`, what the run itself
    achieved — both, when the run's own work is done but the identity is not whole yet (a
    check no phase answers for: the guard not running yet, a node's pod not Ready)."""
    lines = []
    verdict = document.get("verdict")
    if verdict is not None:
        checks = verdict["checks"]
        bad = [c for c in checks if not c["ok"]]
        lines.append(f"verdict: OK — the stable identity works ({len(checks)} checks)" if not bad
                     else f"verdict: NOT OK — {len(bad)} of {len(checks)} checks fail")
    result = document.get("result")
    if result is None:
        if document.get("ok") is False and "run" in document:  # status and verify
            lines.append("status: NOT OK — " + "; ".join(_status_faults(document)))
        return lines
    if "ok" not in document:
        return lines
    rollback = result.get("operation") == "rollback"
    phases_done = [p["number"] for p in document["phases"]
                   if p["status"] == ("rolled-back" if rollback else "completed")]
    done = (f"phase{'s' if len(phases_done) > 1 else ''} {_span(phases_done)} "
            f"{'rolled back' if rollback else 'done'}" if phases_done else "no phase done")
    if result.get("dryRun"):
        lines.append("dry run: OK — the run would go through" if document["ok"] else
                     "dry run: NOT OK — the run would stop at a gate (above)")
    elif not document["ok"]:
        lines.append(f"run: NOT OK — {done}; a gate of the phases it ran fails (above)")
    elif verdict is not None and not verdict["ok"]:
        bad = sorted((c for c in verdict["checks"] if not c["ok"]),
                     key=lambda c: not c["name"].startswith("guard-live/"))  # the root cause
        fix = f"; fix: {bad[0]['fix']}" if bad[0].get("fix") else ""
        lines.append(f"run: OK — {done}; the stable identity is not whole yet "
                     f"({', '.join(c['name'] for c in bad)}), which no phase answers for{fix}")
    else:
        lines.append(f"run: OK — {done}")
    return lines
