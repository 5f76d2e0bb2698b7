"""`dcgm-migrate change-stack` (docs/runbook.md, "Changing stack"): the change planned
(model/stackchange.py), carried out with its record in the state (engine/stackchange.py), the new
stack's phases run by `commands.apply`, and its undo."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from migrator import commands
from migrator.cli import render
from migrator.cli.options import Cluster, Output, Yes, parse_duration
from migrator.cli.sessions import ask, interactive, session
from migrator.commands import RunRequest, Session
from migrator.engine.loop import RunSettings
from migrator.engine.reads import read_snapshot
from migrator.engine.reports import RunReport
from migrator.engine.stackchange import (
    COMPLETED,
    IN_PROGRESS,
    GapMeter,
    StackRun,
    begin,
    execute,
    finish,
    rollback,
)
from migrator.engine.state import RunSession, State, default_holder
from migrator.errors import UsageError
from migrator.model import stackchange as sc
from migrator.model.planning import Options


@dataclass(frozen=True)
class StackRequest:
    """What `change-stack` was asked (bounds in seconds)."""

    target: str
    new_cr: Mapping[str, Any]
    delete_cr: str | None
    timeout: float
    max_gap: float
    settle: float


@dataclass(frozen=True)
class StackOutcome:
    """A change's plan, its record, and the new stack's report when it stopped at a gate."""

    change: sc.ChangePlan
    record: dict[str, Any] | None
    stopped: RunReport | None = None


def _state(session: Session) -> tuple[State, str | None]:
    state, version = commands.load_state(session)
    return (state or State(session.namespace, clock=session.clock)), version


@contextlib.contextmanager
def _running(session: Session, loaded: tuple[State, str | None], timeout: float,
             max_gap: float) -> Iterator[StackRun]:
    """A stack run under the run lock, saving `loaded`'s state as it goes."""
    state, version = loaded
    with RunSession(session.store, version=version, holder=default_holder(),
                    clock=session.clock, listener=session.listener) as rs:
        yield StackRun(session.kube, session.namespace, session.catalog, session.clock,
                       session.listener, state, rs.save, timeout=timeout, max_gap=max_gap)


def _plan(session: Session, request: StackRequest) -> StackOutcome:
    """The change as it would run now, with what a stopped run did (not `observe`: a resumed
    change may find no DaemonSet)."""
    snap = read_snapshot(session.kube, session.namespace, session.catalog, clock=session.clock)
    change = sc.plan(snap, session.catalog, request.target, dict(request.new_cr),
                     request.delete_cr)
    recorded = _state(session)[0].stack_change
    return StackOutcome(change, recorded if (recorded or {}).get("to") == change.target else None)


def _change(session: Session, request: StackRequest,
            confirm: Callable[[sc.ChangePlan], bool]) -> StackOutcome:
    """Carry the change out (resuming a stopped one), then run the new stack's phases 1-3."""
    change = _plan(session, request).change
    if not confirm(change):
        raise UsageError("Aborted at the question.", commands.ABORTED_HINT)
    with _running(session, _state(session), request.timeout, request.max_gap) as run:
        state = run.state
        record = begin(state, change, state.stamp())
        run.meter = GapMeter(session.kube, session.namespace, sc.stable_names(session.catalog),
                             session.clock)
        run.meter.nodes.update({k: set(v) for k, v in (record.get("baseline") or {}).items()})
        run.meter.sample()
        record["baseline"] = {k: sorted(v) for k, v in run.meter.nodes.items()}
        run.save(state)
        execute(run, change)
    report = commands.apply(session, request=RunRequest(phase=3, settings=RunSettings(
        timeout=request.timeout, settle=request.settle, options=Options())))
    if not report.ok:
        return StackOutcome(change, state.stack_change, stopped=report)
    with _running(session, _state(session), request.timeout, request.max_gap) as run:
        if run.state.stack_change and run.state.stack_change.get("status") == IN_PROGRESS:
            finish(run, change)
    return StackOutcome(change, run.state.stack_change)


def _rollback(session: Session, timeout: float, max_gap: float) -> tuple[list[str], str | None]:
    """Undo the recorded change: what was undone, and the stack it went back to."""
    loaded = _state(session)
    recorded = loaded[0].stack_change or {}
    if recorded.get("status") not in (IN_PROGRESS, COMPLETED):
        raise UsageError("No stack change is recorded here, so there is nothing to roll back.",
                         "`dcgm-migrate status` shows the state")
    with _running(session, loaded, timeout, max_gap) as run:
        done = rollback(run)
    return done, recorded.get("from")


def _load_cr(path: Path | None) -> dict[str, Any]:
    if path is None:
        raise UsageError("change-stack needs the new CR's manifest.", "pass -f <cr.yaml>")
    try:
        docs = [d for d in yaml.load_all(path.read_text(), Loader=yaml.SafeLoader) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"-f {path} cannot be read as YAML ({exc}).",
                         "pass a CR manifest") from exc
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise UsageError(f"-f {path} holds {len(docs)} documents, not one CR.",
                         "pass a file with exactly the CR to create")
    return dict(docs[0])


def _emit(doc: dict[str, Any], output: Output) -> None:
    if output is Output.json:
        typer.echo(json.dumps(doc, indent=2))
    elif output is Output.yaml:
        typer.echo(yaml.safe_dump(doc, sort_keys=False))
    else:
        for step in doc.get("steps") or []:
            typer.echo(f"{step['status']:>9}  {step['action']} {step['kind']}/{step['name']}: "
                       f"{step['detail']}")
        for line in doc.get("warnings") or []:
            typer.echo(f"  ⚠ {line}")
        if doc.get("gaps"):
            typer.echo("per-node seconds without a Ready endpoint behind the stable names "
                       "(measured by the tool):")
            for node, per in sorted(doc["gaps"].items()):
                typer.echo(f"  {node}: " + ", ".join(f"{s} {v:.1f} s" for s, v in per.items()))
        typer.echo(doc.get("summary", ""))


def _doc(change: sc.ChangePlan, record: dict[str, Any] | None, summary: str) -> dict[str, Any]:
    steps = (record or {}).get("steps") or {}
    return {"from": change.source, "to": change.target, "summary": summary,
            "steps": [{"action": s.action, "kind": s.kind, "name": s.name, "detail": s.detail,
                       "status": (steps.get(s.id) or {}).get("status", "planned")}
                      for s in change.steps],
            "warnings": list(change.warnings), "gaps": (record or {}).get("gaps") or {}}


def change_stack(
    *,
    to: Annotated[str, typer.Option("--to", help="The stack to change to: gpucluster or "
                                    "clusterpolicy.")] = "",
    file: Annotated[Path | None, typer.Option("-f", "--filename", help="The new CR's "
                                               "manifest (one ClusterPolicy or GPUCluster).")]
    = None,
    delete_cr: Annotated[str | None, typer.Option(
        "--delete-cr", help="The old CR to delete, by name: the released GPU Operator refuses "
        "both CRs at once, so without it change-stack refuses.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")]
    = False,
    do_rollback: Annotated[bool, typer.Option("--rollback", help="Undo the recorded change: "
                                              "the new CR deleted, the old one created again.")]
    = False,
    yes: Yes = False,
    timeout: Annotated[str, typer.Option("--timeout", help="How long each wait may take.")]
    = "10m",
    max_gap: Annotated[str, typer.Option("--max-gap", help="The longest a node may go without "
                                         "a Ready endpoint behind a stable name.")] = "3m",
    settle: Annotated[str, typer.Option("--settle", help="apply's --settle for the new "
                                        "stack's phases.")] = "30s",
    cluster: Cluster,
) -> None:
    """Change the GPU Operator stack (ClusterPolicy ↔ GPUCluster) keeping nvidia-dcgm and
    nvidia-dcgm-exporter, with their ClusterIPs, throughout; resumable, --rollback undoes it.

    Example: dcgm-migrate change-stack --to gpucluster -f gpucluster.yaml --delete-cr
    cluster-policy --yes
    """
    wait, gap = parse_duration(timeout), parse_duration(max_gap, "--max-gap")
    output = cluster.output
    with session(cluster) as s:
        if do_rollback:
            done, back_to = _rollback(s, wait, gap)
            if output is Output.table:
                typer.echo("\n".join([*done, "rolled back: run `dcgm-migrate apply --phase 3` "
                                      "for the stack now running"]))
            else:
                _emit({"rolledBack": done, "to": back_to}, output)
            return
        request = StackRequest(to, _load_cr(file), delete_cr, wait, gap,
                               parse_duration(settle, "--settle"))
        if dry_run:
            planned = _plan(s, request)
            _emit(_doc(planned.change, planned.record, "dry run: nothing written"), output)
            return
        outcome = _change(
            s, request, lambda change: _confirmed(change, yes, s.namespace))
    if outcome.stopped is not None:
        if output is Output.table:  # -o json/yaml: one document on stdout, the one below
            render.document(outcome.stopped, Output.table)
        _emit(_doc(outcome.change, outcome.record, "the new stack's phases stopped at a gate: "
                   "run the same change-stack again"), output)
        raise typer.Exit(1)
    _emit(_doc(outcome.change, outcome.record, f"changed to the {outcome.change.target} stack"),
          output)


def _confirmed(change: sc.ChangePlan, yes: bool, namespace: str) -> bool:
    if yes or not interactive():
        return True
    _emit(_doc(change, None, ""), Output.table)
    return ask(f"Change the stack to {change.target} in namespace {namespace}?")
