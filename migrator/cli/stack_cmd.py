"""`dcgm-migrate change-stack`: ClusterPolicy ↔ GPUCluster on an operator that refuses both at
once (docs/runbook.md, "Changing stack"), thin: the plan is `model/stackchange.py`'s, the
writes `engine/stackchange.py`'s, and the new stack's phases the ordinary `apply --phase 3`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from migrator import commands
from migrator.cli import render
from migrator.cli.durations import parse_duration
from migrator.cli.live import make_progress
from migrator.cli.options import Context, Debug, Kubeconfig, Namespace, Output, OutputOpt, Yes
from migrator.commands import RunRequest, Session
from migrator.engine.loop import RunSettings
from migrator.engine.progress import Quiet
from migrator.engine.reads import read_snapshot
from migrator.engine.stackchange import (
    COMPLETED,
    IN_PROGRESS,
    StackRun,
    begin,
    execute,
    finish,
    rollback,
)
from migrator.engine.stackgaps import GapMeter
from migrator.engine.state import RunSession, State, default_holder
from migrator.errors import UsageError
from migrator.kube.client import Kube
from migrator.model import stackchange as sc
from migrator.model.planning import Options


@contextmanager
def _session(kubeconfig: str | None, context: str | None, namespace: str) -> Iterator[Session]:
    progress = make_progress(quiet=False)
    kube = Kube.connect(kubeconfig, context)
    try:
        yield Session(kube, namespace, listener=progress or Quiet())
    finally:
        if progress is not None:
            progress.close()
        kube.close()


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


def _state(session: Session) -> tuple[State, str | None]:
    stored = session.store.load()
    if stored is None:
        return State(session.namespace, clock=session.clock), None
    where = (session.namespace, session.catalog.common.state_configmap)
    return State.from_document(stored.document, session.clock, where), stored.version


def _run(session: Session, rs: RunSession, state: State, timeout: float, max_gap: float
         ) -> StackRun:
    return StackRun(session.kube, session.namespace, session.catalog, session.clock,
                    session.listener, state, rs.save, timeout=timeout, max_gap=max_gap)


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
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Change the GPU Operator stack (ClusterPolicy ↔ GPUCluster) keeping nvidia-dcgm and
    nvidia-dcgm-exporter, with their ClusterIPs, throughout; resumable, --rollback undoes it.

    Example: dcgm-migrate change-stack --to gpucluster -f gpucluster.yaml --delete-cr
    cluster-policy --yes
    """
    wait, gap = parse_duration(timeout), parse_duration(max_gap, "--max-gap")
    with _session(kubeconfig, context, namespace) as s:
        if do_rollback:
            _rollback(s, wait, gap, output)
            return
        new_cr = _load_cr(file)
        snap = read_snapshot(s.kube, s.namespace, s.catalog, clock=s.clock)
        change = sc.plan(snap, s.catalog, to, new_cr, delete_cr)
        if dry_run:  # with what a stopped run already did, if one did
            recorded = _state(s)[0].stack_change
            same = recorded if recorded and recorded.get("to") == change.target else None
            _emit(_doc(change, same, "dry run: nothing written"), output)
            return
        if not yes and sys.stdin.isatty():
            _emit(_doc(change, None, ""), Output.table)
            typer.confirm(f"Change the stack to {change.target} in namespace {s.namespace}?",
                          abort=True, err=True)
        state, version = _state(s)
        with RunSession(s.store, version=version, holder=default_holder(), clock=s.clock,
                        listener=s.listener) as rs:
            run = _run(s, rs, state, wait, gap)
            record = begin(state, change, state.stamp())
            run.meter = GapMeter(s.kube, s.namespace, sc.stable_names(s.catalog), s.clock)
            run.meter.nodes.update({k: set(v) for k, v in (record.get("baseline") or {}
                                                            ).items()})
            run.meter.sample()
            record["baseline"] = {k: sorted(v) for k, v in run.meter.nodes.items()}
            rs.save(state)
            execute(run, change)
        report = commands.apply(s, request=RunRequest(
            phase=3, settings=RunSettings(timeout=wait, settle=parse_duration(settle, "--settle"),
                                          options=Options())))
        if not report.ok:
            if output is Output.table:  # -o json/yaml: one document on stdout, the one below
                render.document(report, Output.table)
            _emit(_doc(change, state.stack_change, "the new stack's phases stopped at a gate: "
                       "run the same change-stack again"), output)
            raise typer.Exit(1)
        state, version = _state(s)
        with RunSession(s.store, version=version, holder=default_holder(), clock=s.clock,
                        listener=s.listener) as rs:
            run = _run(s, rs, state, wait, gap)
            if state.stack_change and state.stack_change.get("status") == IN_PROGRESS:
                finish(run, change)
        _emit(_doc(change, state.stack_change, f"changed to the {change.target} stack"), output)


def _rollback(s: Session, wait: float, gap: float, output: Output) -> None:
    state, version = _state(s)
    if not state.stack_change or state.stack_change.get("status") not in (IN_PROGRESS,
                                                                          COMPLETED):
        raise UsageError("No stack change is recorded here, so there is nothing to roll back.",
                         "`dcgm-migrate status` shows the state")
    with RunSession(s.store, version=version, holder=default_holder(), clock=s.clock,
                    listener=s.listener) as rs:
        done = rollback(_run(s, rs, state, wait, gap))
    doc = {"rolledBack": done, "to": state.stack_change.get("from")}
    if output is Output.table:
        typer.echo("\n".join([*done, "rolled back: run `dcgm-migrate apply --phase 3` for the "
                              "stack now running"]))
    else:
        _emit(doc, output)
