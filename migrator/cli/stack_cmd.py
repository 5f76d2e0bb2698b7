"""`dcgm-migrate change-stack` (docs/runbook.md, "Changing stack"): its options parsed, the
change run by `migrator/stackcommands.py`, the outcome rendered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from migrator import stackcommands
from migrator.cli import render
from migrator.cli.options import Cluster, Output, Yes, parse_duration
from migrator.cli.sessions import ask, interactive, session
from migrator.errors import UsageError
from migrator.model import stackchange as sc


def _load_cr(path: Path | None) -> dict[str, Any] | None:
    if path is None:  # resuming: the stopped change's recorded CR (stackcommands.plan)
        return None
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
                                               "manifest (one ClusterPolicy or GPUCluster); "
                                               "a stopped change resumes without it.")]
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
            done, back_to = stackcommands.rollback_stack(s, wait, gap)
            if output is Output.table:
                typer.echo("\n".join([*done, "rolled back: run `dcgm-migrate apply --phase 3` "
                                      "for the stack now running"]))
            else:
                _emit({"rolledBack": done, "to": back_to}, output)
            return
        request = stackcommands.StackRequest(to, _load_cr(file), delete_cr, wait, gap,
                               parse_duration(settle, "--settle"))
        if dry_run:
            planned = stackcommands.plan(s, request)
            _emit(_doc(planned.change, planned.record, "dry run: nothing written"), output)
            return
        outcome = stackcommands.change_stack(
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
