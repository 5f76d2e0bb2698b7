"""`dcgm-migrate`: parse options, call `migrator.commands`, render the result. Errors map to
exit codes in `migrator.errors.exit_code_for`, applied in one decorator (cli/failures.py)."""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from migrator import __version__, commands
from migrator.cli import render
from migrator.cli.failures import handles_errors
from migrator.cli.group import RootGroup
from migrator.cli.guard_cmd import guard
from migrator.cli.options import (
    Cluster,
    Output,
    Planning,
    Rolling,
    RollOnDelete,
    Running,
    complete_phase,
    spread,
)
from migrator.cli.plugins import INSTALL_HINT
from migrator.cli.sessions import Confirm, session
from migrator.cli.stack_cmd import change_stack
from migrator.engine import interrupts
from migrator.engine.planfile import save_plan
from migrator.engine.reports import PreflightReport, Report, RunReport, StatusReport
from migrator.errors import Interrupted, UsageError, exit_code_for
from migrator.model.planning import Options

EPILOG_EXIT = ("Exit codes: 0 done; 1 a gate stopped the run safely; 2 bad input; "
               "3 cluster/API error; 4 lock held or stale plan.")

app = typer.Typer(
    name="dcgm-migrate",
    cls=RootGroup,
    help="Move a live GPU Operator cluster to one stable DCGM / DCGM Exporter identity, in "
         "three gated, resumable phases: label, alias, switch.",
    epilog=EPILOG_EXIT,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

def _version(value: bool) -> None:
    if value:
        typer.echo(f"dcgm-migrate {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """dcgm-migrate: stable DCGM discovery across ClusterPolicy and GPUCluster stacks."""


def command(name: str | None = None, **settings: Any) -> Callable[[Callable[..., None]], Any]:
    """Register a command: its option groups spread (options.spread), its errors handled."""

    def register(fn: Callable[..., None]) -> Any:
        signature, regroup = spread(fn)
        call = handles_errors(fn, regroup)  # one frame: the stack to the first write stays short
        call.__signature__ = signature  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return app.command(name, **settings)(call)

    return register


def _rendered(report: Report, output: Output, shown: tuple[str, ...] = ()) -> None:
    """Render the report, exit 1 when it says not ok (`shown`: warnings the question printed)."""
    render.document(report, output, shown=shown)
    if isinstance(report, RunReport | StatusReport | PreflightReport) and not report.ok:
        raise typer.Exit(1)


@command()
def plan(
    *,
    out: Annotated[Path | None, typer.Option("--out", help="Save the plan (with a fingerprint "
                                             "of the objects it read) to FILE.")] = None,
    planning: Planning, cluster: Cluster,
) -> None:
    """Show per phase exactly what would change, every gate's status now, and warnings.

    Example: dcgm-migrate plan --out plan.json
    """
    options = planning.options()
    with session(cluster) as s:
        report = commands.plan(s, options)
        if out is not None:  # the plan file keeps the report's document and its options
            save_plan(out, render.to_document(report), report.objects, asdict(options))
    _rendered(report, cluster.output)


@command()
def apply(
    *,
    phase: Annotated[int, typer.Option("--phase", help="Run phases 1..N (1 label, 2 alias, "
                                       "3 switch).", autocompletion=complete_phase)],
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Refuse to run if the "
                                                   "cluster changed since this saved plan.")]
    = None,
    running: Running, planning: Planning, cluster: Cluster,
) -> None:
    """Run every phase up to N that is not completed yet, each gated; resumable.

    Example: dcgm-migrate apply --phase 2 --yes
    """
    confirm = Confirm(running.yes, cluster.output)
    request = running.request(phase, planning.options(), confirm, plan_file)
    with session(cluster) as s:
        report = commands.apply(s, request=request)
    _rendered(report, cluster.output, confirm.shown)


@command()
def rollback(
    *,
    phase: Annotated[int, typer.Option("--phase", help="Undo phases down to and including N.",
                                       autocompletion=complete_phase)],
    running: Running, roll_on_delete: RollOnDelete = False, rolling: Rolling = False,
    cluster: Cluster,
) -> None:
    """Undo phases newest first from what the state recorded, with the same gates.

    Example: dcgm-migrate rollback --phase 1 --yes
    """
    options = Options(roll_on_delete=roll_on_delete, rolling=rolling)
    request = running.request(phase, options, Confirm(running.yes, cluster.output))
    with session(cluster) as s:
        report = commands.rollback(s, request=request)
    _rendered(report, cluster.output)


def _watched(report: StatusReport, output: Output, watch: bool) -> None:
    """One `status` answer; under --watch, -o json is JSON Lines (one compact document per
    line) and -o yaml a stream of documents (each after `---`) (README.md, "Usage")."""
    if not watch or output is Output.table:
        render.document(report, output)
    elif output is Output.json:
        sys.stdout.write(json.dumps(render.to_document(report), separators=(",", ":"), default=str)
                         + "\n")
        sys.stdout.flush()
    else:
        sys.stdout.write("---\n")
        render.document(report, output)


@command()
def status(
    *,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until interrupted "
                                        "(-o json: one document per line, JSON Lines; -o "
                                        "yaml: a YAML stream).")] = False,
    interval: Annotated[float, typer.Option("--interval", min=1.0, help="Seconds between "
                                            "refreshes with --watch (at least 1).")] = 5.0,
    cluster: Cluster,
) -> None:
    """State, live verification of completed phases, and drift (exit 1 when drifted).

    Example: dcgm-migrate status -o json
    """
    output = cluster.output
    with session(cluster) as s:
        report = commands.status(s)
        _watched(report, output, watch)
        try:
            while watch and report.state_error is None:
                interrupts.check()  # a Ctrl-C Python dropped while refreshing (interrupts.py)
                time.sleep(interval)
                report = commands.status(s)
                _watched(report, output, watch)
        except KeyboardInterrupt as exc:  # how --watch ends: nothing to resume; after
            if isinstance(exc, Interrupted):  # Ctrl-C the last answer decides the exit code
                raise typer.Exit(exc.exit_code) from None
    if report.state_error is not None:  # the verdict is shown; the state's error ends it
        if output is Output.table:
            raise report.state_error
        raise typer.Exit(exit_code_for(report.state_error))  # the document carries it
    if not report.ok:
        raise typer.Exit(1)


@command()
def verify(cluster: Cluster) -> None:
    """Gates only, for runbooks and cron: exit 0 when everything holds, 1 when not.

    Example: dcgm-migrate verify || page-oncall
    """
    with session(cluster) as s:
        report = commands.status(s)
    _rendered(report, cluster.output)


@command()
def unlock(
    *,
    force: Annotated[bool, typer.Option("--force", help="Release the lock even while its "
                                        "holder is still renewing it (only when you are sure "
                                        "that run is dead).")] = False,
    cluster: Cluster,
) -> None:
    """Release a stuck lock; a lock its holder still renews is refused (exit 4) without --force.

    Example: dcgm-migrate unlock
    """
    with session(cluster) as s:
        report = commands.unlock(s, force=force)
    render.document(report, cluster.output)


@command()
def preflight(cluster: Cluster) -> None:
    """Check API reachability, CRDs and every permission the migration needs (exit 1 if not).

    Example: dcgm-migrate preflight --context prod
    """
    with session(cluster) as s:
        report = commands.preflight(s)
    _rendered(report, cluster.output)


command("guard")(guard)
command("change-stack")(change_stack)


# Stand-ins for the simulated cluster's `demo` and `sim` (cli/plugins.py), refusing with exit 2.
def _stand_in(name: str, text: str) -> None:
    def refuse() -> None:
        raise UsageError(f"`dcgm-migrate {name}` needs the simulated cluster, which is not "
                         "installed here (the tool's own package and its image do not carry it)",
                         INSTALL_HINT)

    command(name, help=text, add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(refuse)


_stand_in("demo", "Run the whole migration on a simulated GPU cluster started in-process (needs "
          "the simulated cluster installed: `python3 -m pip install ./simulator`).")
_stand_in("sim", "The simulated GPU cluster as a standalone server (needs it installed: "
          "`python3 -m pip install ./simulator`).")


def prog_name(argv0: str) -> str | None:
    """`kubectl dcgm-migrate` when run as kubectl's plugin, else click's default."""
    return "kubectl dcgm-migrate" if Path(argv0).name.startswith("kubectl-") else None


def main() -> None:
    """Console-script entry point (`dcgm-migrate`, `kubectl-dcgm_migrate`). The objects the
    imports made live until exit: frozen, no collection walks them again, the interpreter's
    last ones at exit included (about 0.07 s of every command's start-up;
    docs/performance.md)."""
    gc.freeze()
    app(prog_name=prog_name(sys.argv[0]))


if __name__ == "__main__":
    main()
