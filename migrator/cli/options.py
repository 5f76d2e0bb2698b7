"""kubectl-style options shared by every cluster command (docs/design.md, "Command line")."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


Kubeconfig = Annotated[str | None, typer.Option(
    "--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
    "or in-cluster).", envvar=None)]
Context = Annotated[str | None, typer.Option("--context", help="Kubeconfig context to use.")]
Namespace = Annotated[str, typer.Option("-n", "--namespace",
                                        help="Namespace the GPU Operator runs in.")]
OutputOpt = Annotated[Output, typer.Option("-o", "--output", help="table, json or yaml.",
                                           case_sensitive=False)]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before writing.")]
IncludeOperatorOwned = Annotated[bool, typer.Option(
    "--include-operator-owned",
    help="Also switch Services the operator owns (it reverts them on its next reconcile).")]
RollOnDelete = Annotated[bool, typer.Option(
    "--roll-on-delete",
    help="For updateStrategy OnDelete: delete old pods one node at a time to roll them.")]
AllowForeignPods = Annotated[bool, typer.Option(
    "--allow-foreign-pods",
    help="Let phase 3 switch a selector that also picks up pods outside the DCGM/exporter "
         "DaemonSets (recorded in the state).")]
Timeout = Annotated[str, typer.Option("--timeout", help=(
    "Progress deadline (e.g. 90s, 10m, 1h): a wait fails when nothing moved for this long "
    "(no pod became updated or available in a rollout; gates still failing), not after this "
    "long in total, so a 1,000-node rollout may take hours."))]
Settle = Annotated[str, typer.Option("--settle", help="Wait after a selector change before "
                                     "removing what the old selector needed.")]
