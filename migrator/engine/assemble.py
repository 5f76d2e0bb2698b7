"""The report every command renders, pure: per phase (the one loop's, on the report back end,
`projecting.walked`) what would change and every gate, the warnings and the verdict, and the
closing lines every command's table ends with."""

from __future__ import annotations

from collections.abc import Iterable

from migrator import phases
from migrator.engine import projecting, recovered, reports
from migrator.engine.progress import merged
from migrator.engine.reports import Closing, PlanReport, RunReport, RunView, StatusReport
from migrator.engine.state import PhaseStatus, State, holds
from migrator.model import monitoring, outcome, scrapechecks
from migrator.model import stackchange as sc
from migrator.model.discovery import discover
from migrator.model.findings import traffic_critical
from migrator.model.planning import Options
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import SetLabels, SetSelector

DRIFT_RISK = (
    "Drift risk after phase 3: phase 1 writes the common labels itself because the running "
    "operator does not render them. The operator's next re-render of these DaemonSets (an "
    "upgrade or a CR edit) drops the labels, the pods roll without them, and every Service "
    "switched to the common selector drains. Run `dcgm-migrate guard` (docs/guard.yaml), which "
    "holds the tool's aliases on the app label while the labels are missing, or roll back "
    "phase 3 before any operator change that does not render the common labels; "
    "`dcgm-migrate verify` exits 1 when it happens."
)

LOST_STATE = (
    "No state, yet the cluster carries the tool's marks ({marks}): the state ConfigMap "
    "{ns}/{cm} was deleted or never restored, so rollback does not know what to "
    "undo. Restore it from your backup (docs/runbook.md, 'Restoring the state'); until then "
    "`apply` and `rollback` refuse and `status`/`verify` exit 1"
)
LOST_PHASE_ONE = (
    "No state, yet phase 1 left its marks ({marks}): the state ConfigMap {ns}/{cm} was "
    "deleted or never restored. Restore it from your backup (docs/runbook.md, 'Restoring the "
    "state'), or undo phase 1 from the marks with `dcgm-migrate rollback --phase 1 -n {ns}` "
    "and start over; until then `apply` refuses and `status`/`verify` exit 1"
)


def build(snapshot: Snapshot, catalog: Catalog, state: State | None, options: Options,
          *, forward: bool = True, earlier: Iterable[str] = (),
          objects: bool = False, state_unreadable: bool = False) -> PlanReport:
    """The report. `forward`: warn about what the plan would do too (else only what is true
    now); `earlier`: the warnings this command said before, listed first; `objects`: keep what
    the fingerprint covers (`plan`); `state_unreadable`: claim no lost state."""
    found = discover(snapshot, catalog)
    exporters = [c.daemonset for c in found.components if c.exporter]
    drift_risk = bool(state and any(r.wrote_labels for r in state.phases.values()
                                    if r.status.applied))
    change = None
    if state is not None and state.stack_changed(found.stack):
        record = state.stack_change
        change = reports.StackChange(state.stack, found.stack, (
            sc.resume_command(record, state.namespace), sc.undo_command(state.namespace))
            if record is not None and sc.unfinished(record) else None)
    views, decisions, said = projecting.walked(snapshot, catalog, state, options)
    warnings: list[str] = [*found.warnings, *said]
    switches = False  # a Service is (or is to be) switched to the common selector
    for decision in decisions.values():
        module, rec, plan = decision.module, decision.record, decision.plan
        if state is not None and module.SWITCHES_SELECTORS and \
                rec.status.applied:  # switched a Service to it, and it is still the tool's
            retired = {r.step_id for r in decision.retire}
            switches |= any(isinstance(r, SetSelector) and r.id not in retired
                            for r in rec.done_steps())
        if rec.status is PhaseStatus.COMPLETED or plan is None or not forward:
            continue
        drift_risk |= any(isinstance(s, SetLabels) and (s.rolls_pods() or s.in_place)
                          for s in plan.steps)
        switches |= module.SWITCHES_SELECTORS and any(isinstance(s, SetSelector)
                                                      for s in plan.steps)
    paths = monitoring.scrape_paths(snapshot, exporters)
    certain = scrapechecks.certain(paths)
    if certain:
        pod, example = next(iter(sorted(certain.items())))
        warnings.append(f"duplicate scraping now: {len(certain)} exporter pods scraped more "
                        f"than once, e.g. {pod} via {'; '.join(map(str, example))}")
    possible = scrapechecks.possible(paths)
    if possible:
        warnings.append(f"possible duplicate scraping: {len(possible)} exporter pods are "
                        "reached both by annotation discovery and by a ServiceMonitor, e.g. "
                        f"{possible[0]} via {'; '.join(map(str, paths[possible[0]]))} — scraped "
                        "twice if one Prometheus uses both; pick one mechanism "
                        "(docs/monitoring.md)")
    warnings.extend(scrapechecks.conflicting_monitors(snapshot))
    ours = [n for n, s in snapshot.services.items() if catalog.common.tool_owned(s)]
    tool_dups = scrapechecks.duplicates_through(paths, ours)
    if tool_dups:
        warnings.append(f"duplicate scraping through the tool's aliases: {len(tool_dups)} "
                        f"exporter pods, e.g. {tool_dups[0]}")
    if drift_risk and switches and found.components:
        warnings.append(DRIFT_RISK)
    lost = outcome.tool_marks(snapshot, catalog) if state is None and not state_unreadable \
        else []
    if lost:
        text = LOST_PHASE_ONE if recovered.phase_one_only(snapshot, catalog) else LOST_STATE
        warnings.append(text.format(ns=snapshot.namespace, cm=catalog.common.state_configmap,
                                    marks=", ".join(lost[:4])))
    warnings.extend(scrapechecks.truncated_endpoints(snapshot))
    return PlanReport(
        stack=found.stack, namespace=snapshot.namespace, fingerprint=snapshot.fingerprint(),
        components=tuple(f"{c.stack}/{c.component}" for c in found.components),
        phases=views, warnings=merged(earlier, [str(change)] if change else [], warnings),
        tool_duplicates=len(tool_dups), scrape_duplicates=len(certain),
        verdict=outcome.verdict(snapshot, catalog, phases.answers(),
                                completed=state.completed_phase() if state else 0,
                                allowed_foreign=state.foreign_allowed() if state else ()),
        lost_state=tuple(lost), stack_change=change,
        objects=snapshot.fingerprint_fields() if objects else None)


def _span(numbers: list[int]) -> str:
    """"phase 2" or "phases 1-3" (or "phases 1, 3")."""
    run = len(numbers) > 1 and numbers == list(range(numbers[0], numbers[-1] + 1))
    return f"phase{'s' if len(numbers) > 1 else ''} " + (
        f"{numbers[0]}-{numbers[-1]}" if run else ", ".join(map(str, numbers)))


def status_faults(report: PlanReport, run: RunView) -> list[str]:
    """Why `status` (and `verify`) fails, for its exit code and its closing line alike."""
    out = []
    if run.state == "interrupted":
        out.append(f"a run was interrupted; resume: `{run.resume}`")
    if report.lost_state:
        out.append("the state is lost (Warnings)")
    if report.stack_change is not None:
        out.append("the completed phases were planned for another GPU Operator stack "
                   "(Warnings)")
    if not all(r.ok for v in report.phases if v.status is PhaseStatus.COMPLETED
               for r in v.gates):
        out.append("a completed phase no longer holds (above)")
    if report.unexpected_failures():
        out.append("the stable identity is broken (verdict above)")
    return out


def closing(shown: PlanReport | RunReport | StatusReport) -> list[Closing]:
    """The report's last lines, alike for every command: the verdict on the live cluster and,
    after `apply` or `rollback`, what the run itself achieved."""
    report = shown if isinstance(shown, PlanReport) else shown.report
    checks = report.verdict.findings
    bad = [c for c in checks if not c.ok]
    run = shown if isinstance(shown, RunReport) else None
    undone = report.rolled_back and not (run is not None and run.result.dry_run)
    traffic = [c.name for c in bad if traffic_critical(c.name)]
    lines = _rolled_back(report) if undone else [
        Closing("verdict", not bad, f"the stable identity works ({len(checks)} checks)"
                if not bad else f"{len(bad)} of {len(checks)} checks fail" + (
                    f"; consumers' traffic is misrouted or dropped: {', '.join(traffic)}"
                    if traffic else ""))]
    if isinstance(shown, StatusReport) and not shown.ok:
        lines.append(Closing("status", False, "; ".join(status_faults(shown.report, shown.run)
                                                        or ["see above"])))
    if run is None:
        return lines
    result = run.result
    rolled = [p.number for p in report.phases if p.status is PhaseStatus.ROLLED_BACK]
    phases_done = rolled if result.operation == "rollback" else [
        p.number for p in report.phases if holds(p.status)]
    done = (f"{_span(phases_done)} {'rolled back' if result.operation == 'rollback' else 'done'}"
            if phases_done else "no phase done")
    if undone:
        lines.append(Closing("run", run.ok, f"{_span(rolled)} rolled back" if run.ok else
                             "a gate of the phases it ran fails (above)"))
    elif result.dry_run:
        lines.append(Closing("dry run", run.ok, "the run would go through" if run.ok
                             else "the run would stop at a gate (above)"))
    elif not run.ok:
        lines.append(Closing("run", False, f"{done}; a gate of the phases it ran fails "
                             "(above)"))
    elif bad:
        bad.sort(key=lambda c: not c.name.startswith("guard-live/"))  # the root cause first
        fix = f"; fix: {bad[0].fix}" if bad[0].fix else ""
        nobody = ", which no phase answers for" if all(c.phase == 0 for c in bad) else ""
        lines.append(Closing("run", True, f"{done}; the stable identity is not whole yet "
                             f"({', '.join(c.name for c in bad)}){nobody}{fix}"))
    else:
        lines.append(Closing("run", True, done))
    return lines


def _rolled_back(report: PlanReport) -> list[Closing]:
    """The verdict lines of a migration rolled back on purpose (the phases' checks are
    expected to fail), and any failing check no phase answers for."""
    checks = report.verdict.findings
    expected = [c for c in checks if not c.ok and c.phase]
    unexpected = report.unexpected_failures()
    last = max((p.number for p in report.phases), default=1)
    undone = [p.number for p in report.phases if p.status is PhaseStatus.ROLLED_BACK]
    lines = [Closing("rolled back", True, f"the migration is undone ({_span(undone)} rolled "
                     "back): the cluster is as before it"
                     + (f", so {len(expected)} of {len(checks)} verdict checks fail as they "
                        f"did then ({', '.join(c.name for c in expected[:4])}"
                        f"{' …' if len(expected) > 4 else ''}); `dcgm-migrate apply --phase "
                        f"{last}` migrates it again" if expected else ""))]
    if unexpected:
        fix = f"; fix: {unexpected[0].fix}" if unexpected[0].fix else ""
        lines.append(Closing("verdict", False, f"{len(unexpected)} of {len(checks)} checks "
                             "fail that no phase answers for ("
                             f"{', '.join(c.name for c in unexpected)}){fix}"))
    return lines
