"""Render reports: rich tables for people, one JSON/YAML document for scripts (its keys in
docs/output.schema.json's order)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from migrator.cli.commandline import Selection, complete, completed, resume
from migrator.cli.options import Output
from migrator.engine.assemble import closing
from migrator.engine.reports import (
    GuardReport,
    LockView,
    Lowest,
    PhasePreview,
    PhaseView,
    PlanReport,
    PreflightReport,
    Question,
    Report,
    RollbackPhase,
    RollbackStep,
    RunOutcome,
    RunReport,
    RunView,
    StackChange,
    StateDigest,
    StatusReport,
    Target,
    UnlockReport,
)
from migrator.errors import MigrateError, exit_code_for
from migrator.model.phasestatus import PhaseStatus
from migrator.model.steps import Change


class _Pointed(Console):
    """A console whose printed text has its commands pointed at this invocation's cluster
    (cli/commandline.py)."""

    def __init__(self, stderr: bool = False) -> None:
        stream = sys.stderr if stderr else sys.stdout
        width = None if stream.isatty() else 160  # logs and CI: wide enough not to fold names
        super().__init__(stderr=stderr, highlight=False, soft_wrap=stderr, width=width)
        self.selection = Selection.current()

    def print(self, *objects: Any, **settings: Any) -> None:
        super().print(*(complete(o, self.selection) if isinstance(o, str) else o
                        for o in objects), **settings)


_console = _Pointed  # tests narrow it


def document(report: Report, output: Output, shown: Sequence[str] = ()) -> None:
    """Print a report in the chosen format (json/yaml: one document on stdout); `shown`: the
    warnings the question before the run printed (not repeated)."""
    if output is not Output.table:
        selection = Selection.current()
        doc = completed(to_document(report), selection)
        if isinstance(report, StatusReport) and report.run.resume:
            doc["run"]["resume"] = resume(report.run.resume, selection)
        raw(doc, output)
    elif isinstance(report, UnlockReport):
        sys.stdout.write(unlocked(report) + "\n")
    elif isinstance(report, PreflightReport):
        con = _console()
        for c in report.checks:
            con.print(f"{_mark(c.ok)} {esc(c.name)}: {esc(c.detail)}")
    elif isinstance(report, GuardReport):
        guard_lines(report)
    else:
        report_table(report, shown)
    sys.stdout.flush()


def raw(doc: dict[str, Any], output: Output) -> None:
    """A document as JSON or YAML on stdout."""
    if output is Output.json:
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    sys.stdout.flush()


def esc(text: Any) -> str:
    return str(escape(str(text)))


def _val(v: Any) -> str:
    if v is None:
        return "∅"
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items()) or "{}"
    return str(v)


def _mark(ok: bool) -> str:
    return "[green]✓[/green]" if ok else "[red]✗[/red]"


def report_table(shown_report: PlanReport | Question | RunReport | StatusReport,
                 shown: Sequence[str] = ()) -> None:
    con = _console()
    target = shown_report.target if isinstance(shown_report, Question) else None
    doc = shown_report if isinstance(shown_report, PlanReport) else shown_report.report
    if target:  # the question before a write: where it writes
        con.print(f"[bold]about to write to[/bold] context {esc(target.context)} "
                  f"(server {esc(target.server)}), namespace {esc(target.namespace)}")
    con.print(f"[bold]stack[/bold] {doc.stack}   [bold]namespace[/bold] {doc.namespace}"
              + (f"   [bold]components[/bold] {', '.join(doc.components)}"
                 if doc.components else ""))
    if isinstance(shown_report, StatusReport):
        run_lines(con, shown_report.run)
    verdict = doc.verdict
    head = "the stable identity works" if verdict.ok else "the stable identity is broken"
    con.print(f"\n[bold]Verdict — {head}[/bold] (live cluster, no state needed)")
    for c in verdict.findings:
        fix = f" [dim]fix: {esc(c.fix)}[/dim]" if c.fix and not c.ok else ""
        con.print(f"  {_mark(c.ok)} {esc(c.name)}: {esc(c.detail)}{fix}")
    for phase in doc.phases:
        title = f"Phase {phase.number} — {phase.name}: {phase.status.value}"
        preview = phase.preview  # apply --dry-run: what the run would do
        if preview:
            title += f" — dry run: {preview.outcome.replace('-', ' ')}"
        con.print(f"\n[bold]{title}[/bold]")
        if phase.changes:
            changes_table(con, phase.changes)
        elif phase.status is not PhaseStatus.COMPLETED:
            con.print("  no changes")
        for g in phase.gates:
            con.print(f"  {_mark(g.ok)} {esc(g.name)}: {esc(g.detail)}")
        for note in phase.notes:
            con.print(f"  • {esc(note)}")
        for wait in preview.would_wait_for if preview else ():
            con.print(f"  … would wait for {esc(wait)}")
        if phase.error:
            con.print(f"  [red]last error:[/red] {esc(phase.error)}")
    state = shown_report.state if isinstance(shown_report, StatusReport) else None
    if state is not None and state.history:
        con.print(f"\n[bold]History[/bold] (last {len(state.history)} events, oldest first)")
        for event in state.history:
            con.print(f"  {esc(_event(event))}")
    fresh = [w for w in doc.warnings if w not in shown]
    if fresh:
        con.print("\n[bold yellow]Warnings[/bold yellow]")
        for w in fresh:
            con.print(f"  ! {esc(w)}")
    if len(fresh) < len(doc.warnings):
        con.print(f"\n({len(doc.warnings) - len(fresh)} warnings shown before the question)")
    if isinstance(shown_report, RunReport):
        result = shown_report.result
        con.print(f"\n[bold]writes[/bold] {result.writes}"
                  + ("  (server-side dry run: nothing persisted)" if result.dry_run else ""))
    con.print()
    for line in closing(doc if isinstance(shown_report, Question) else shown_report):
        color = "green" if line.ok else "red"
        con.print(f"[bold]{esc(line.subject)}[/bold] "
                  f"[{color}]{'OK' if line.ok else 'NOT OK'}[/{color}] — {esc(line.detail)}")


def changes_table(con: Console, changes: Sequence[Change]) -> None:
    """Object, field, before, after, names never split: when the columns' longest words do not
    fit side by side, each object, then indented below each field and before → after."""
    rows = [(str(c.object), str(c.field), _val(c.before), _val(c.after)) for c in changes]
    heads = ("object", "field", "before", "after")
    widest = [max(len(word) for r in [heads, *rows] for word in r[i].split(" "))
              for i in range(4)]
    if sum(widest) + 2 * 3 <= con.width:  # two spaces between columns
        t = Table(show_edge=False, pad_edge=False, box=None)
        for i, col in enumerate(heads):
            t.add_column(col, no_wrap=i < 2, min_width=widest[i], overflow="fold")
        for r in rows:
            t.add_row(*map(esc, r))
        con.print(t)
        return
    last = None
    for obj, fld, before, after in rows:
        if obj != last:
            con.print(f"  {esc(obj)}")
            last = obj
        con.print(f"    {esc(fld)}: {esc(before)} → {esc(after)}")


_RUN_HEADS = {"idle": "idle (no run in progress)", "running": "[bold]running[/bold]",
              "rolling-back": "[bold]rolling back[/bold]",
              "interrupted": "[bold red]interrupted[/bold red]"}


def _event(event: Mapping[str, Any]) -> str:
    details = " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                       for k, v in event.items() if k not in ("at", "event"))
    return f"{event.get('at', '')} {event.get('event', '')}" + (f" {details}" if details else "")


def run_lines(con: _Pointed, run: RunView) -> None:
    """`status`: the run going on or interrupted, its lock, the command that resumes it, and a
    rollback's steps (docs/output.schema.json, `$defs/run`)."""
    head = f"[bold]run[/bold] {_RUN_HEADS.get(run.state, run.state)}"
    if run.operation:
        head += f" — {run.operation}" + (f" --phase {run.target}" if run.target else "")
        if run.phase:
            head += f", at phase {run.phase}"
    lock = run.lock
    if run.state == "interrupted":
        head += (", and its lock's holder is gone" if lock and lock.gone else
                 ", and no run holds the lock")
    con.print(head)
    if lock:
        when = (f"since {esc(lock.acquired)}, " if lock.acquired else "") + (
            f"holder gone ({esc(lock.gone)}): the next run takes it over at once"
            if lock.gone else
            f"renewed until {esc(lock.expires)}" if lock.live else
            f"expired at {esc(lock.expires)} (anyone's to take over)")
        con.print(f"  lock: {esc(lock.holder)}, {when}")
    if run.waits_for:
        con.print(f"  waits for: {esc(run.waits_for)}")
    if run.last_event:
        con.print(f"  last event: {esc(_event(run.last_event))}")
    if run.resume:
        con.print(f"  [bold]resume:[/bold] {esc(resume(run.resume, con.selection))}")
    for phase in run.rollback or ():
        con.print(f"  rollback of phase {phase.phase} — {phase.name} ({phase.status.value})")
        for step in phase.steps:
            mark = "✓" if step.status in ("done", "skipped") else "…"
            con.print(f"    {mark} {esc(step.status)}: {esc(step.object)} "
                      f"({esc(step.type)})")
            for c in step.changes:
                con.print(f"        {esc(c.field)}: {esc(_val(c.before))} → "
                          f"{esc(_val(c.after))}")


def unlocked(report: UnlockReport) -> str:
    holder = report.released
    if not holder:
        return "no lock was held"
    if report.forced:
        return f"released the live lock of {holder} (--force)"
    if report.holder_gone:
        return f"released the lock of {holder}: {report.holder_gone}"
    return f"released the lock of {holder}"


def guard_lines(report: GuardReport) -> None:
    """`guard --once`: the aliases seen, what was corrected or skipped, the verdict."""
    lines = []
    for alias in report.passed.aliases:
        state = f"held: {alias['held']}" if alias["held"] else "not held"
        lines.append(f"Service/{alias['name']} → {alias['selector']} ({state})")
    lines += [f"{c.action} Service/{c.service}: {c.reason}" for c in report.passed.applied]
    lines += [f"skipped {skipped}" for skipped in report.passed.skipped]
    if not report.passed.applied:
        lines.append("nothing to correct")
    lines.append(f"verdict: {report.verdict.summary()}")
    selection = Selection.current()
    sys.stdout.write("".join(f"{complete(line, selection)}\n" for line in lines))


def error(exc: MigrateError, hint: str | None = None) -> None:
    """The message, then its fix (`hint`: as `fix_line` completed it), on stderr."""
    con = _console(stderr=True)
    con.print(f"[red]error:[/red] {esc(exc.message)}")
    hint = exc.hint if hint is None else hint
    if hint:
        con.print(f"[bold]fix:[/bold] {esc(hint)}")


# ---- a report as its `-o json|yaml` document (docs/output.schema.json) ------------------------

Doc = dict[str, Any]

# Each report type's document: its fields in the schema's order, keyed in camelCase.
# `*field`: that field's document spread into this one; `field?`: left out while None.
_FIELDS: dict[type, tuple[str, ...]] = {
    PlanReport: ("stack", "namespace", "fingerprint", "components", "phases", "warnings",
                 "tool_duplicates", "scrape_duplicates", "verdict", "lost_state",
                 "stack_change"),
    PhaseView: ("number", "name", "status", "changes", "gates", "notes", "blocked", "error",
                "preview?"),
    PhasePreview: ("outcome", "would_wait_for"),
    StackChange: ("recorded", "live"),
    Question: ("*report", "target"),
    Target: ("context", "server", "namespace"),
    RunReport: ("*report", "result", "ok"),
    RunOutcome: ("operation", "writes", "dry_run", "lowest_endpoints", "notes?"),
    Lowest: ("lowest", "baseline"),
    StatusReport: ("*report", "state", "run", "ok", "state_error?"),
    StateDigest: ("plan_fingerprint", "updated", "last_error", "history"),
    RunView: ("state", "operation", "target", "phase", "lock", "resume", "last_event",
              "waits_for", "rollback"),
    LockView: ("holder", "acquired", "expires", "live", "gone"),
    RollbackPhase: ("phase", "name", "status", "steps"),
    RollbackStep: ("object", "type", "status", "changes"),
    UnlockReport: ("namespace", "released", "forced", "holder_gone"),
    PreflightReport: ("namespace", "server", "checks", "ok"),
    GuardReport: ("namespace", "*passed", "verdict"),
}


@runtime_checkable
class _Dictable(Protocol):
    """A value that is its own document (gates, changes, the verdict, a guard pass)."""

    def as_dict(self) -> Doc: ...


def to_document(report: object) -> Doc:
    fields = _FIELDS.get(type(report))
    if fields is None:
        raise TypeError(f"no document for {type(report).__name__}")
    doc: Doc = {}
    for spec in fields:
        name = spec.strip("*?")
        value = _value(getattr(report, name))
        if spec.startswith("*"):
            doc.update(value)
        elif value is not None or not spec.endswith("?"):
            doc[_camel(name)] = value
    return doc


def _value(value: Any) -> Any:
    """A field's value as JSON/YAML data."""
    if type(value) in _FIELDS:
        return to_document(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, MigrateError):
        return error_document(value)
    if isinstance(value, _Dictable):
        return value.as_dict()
    if isinstance(value, Mapping):
        return {k: _value(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_value(v) for v in value]
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def error_document(error: MigrateError, hint: str | None = None) -> Doc:
    """An error as `-o json|yaml` shows it (`hint`: as the CLI completed it)."""
    return {"message": error.message, "hint": error.hint if hint is None else hint,
            "exitCode": exit_code_for(error), "type": type(error).__name__}
