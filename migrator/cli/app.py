"""`dcgm-migrate`: parse options, call `migrator.commands`, render the result. Errors map to
exit codes in `migrator.errors.exit_code_for`, applied in one decorator (cli/failures.py)."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from migrator import __version__, commands
from migrator.cli import render
from migrator.cli.documents import to_document
from migrator.cli.durations import parse_duration
from migrator.cli.failures import handles_errors
from migrator.cli.group import RootGroup
from migrator.cli.guard_cmd import guard
from migrator.cli.options import (
    AllowForeignPods,
    Context,
    Debug,
    DryRun,
    IncludeOperatorOwned,
    Kubeconfig,
    Namespace,
    Output,
    OutputOpt,
    PrepareFor,
    Rolling,
    RollOnDelete,
    Settle,
    Timeout,
    Yes,
    complete_phase,
)
from migrator.cli.plugins import INSTALL_HINT
from migrator.cli.sessions import Confirm, session
from migrator.cli.stack_cmd import change_stack
from migrator.cli.watched import watched
from migrator.commands import RunRequest, save_plan
from migrator.engine import interrupts
from migrator.engine.loop import RunSettings
from migrator.engine.reports import (
    PlanReport,
    PreflightReport,
    Report,
    RunReport,
    StatusReport,
)
from migrator.errors import Interrupted, UsageError, exit_code_for
from migrator.model.planning import Options
from migrator.model.stacks import load_catalog

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


# ---- commands --------------------------------------------------------------------------------

@app.command()
@handles_errors
def plan(
    out: Annotated[Path | None, typer.Option("--out", help="Save the plan (with a fingerprint "
                                             "of the objects it read) to FILE.")] = None,
    include_operator_owned: IncludeOperatorOwned = False,
    roll_on_delete: RollOnDelete = False,
    rolling: Rolling = False,
    allow_foreign_pods: AllowForeignPods = False,
    prepare_for: PrepareFor = "",
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Show per phase exactly what would change, every gate's status now, and warnings.

    Example: dcgm-migrate plan --out plan.json
    """
    options = _options(include_operator_owned, roll_on_delete, allow_foreign_pods, prepare_for,
                       rolling)
    with session(kubeconfig, context, namespace, output) as s:
        report = _saved(commands.plan(s, options), out, options)
    _rendered(report, output)


def _saved(report: PlanReport, out: Path | None, options: Options) -> PlanReport:
    """`plan --out`: the plan file keeps the report's document and its planning options."""
    if out is not None:
        save_plan(out, to_document(report), report.objects, asdict(options))
    return report


def _options(include_operator_owned: bool, roll_on_delete: bool, allow_foreign_pods: bool,
             prepare_for: str, rolling: bool = False) -> Options:
    """The planning options, `--prepare-for` checked against plans/releases.yaml."""
    known = [r.name for r in load_catalog().releases]
    if prepare_for and prepare_for not in known:
        raise UsageError(f"--prepare-for {prepare_for!r} names no GPU Operator release the "
                         "tool knows.", f"pass one of: {', '.join(known)}")
    return Options(include_operator_owned, roll_on_delete, allow_foreign_pods, prepare_for,
                   rolling)


def _run_request(phase: int, yes: bool, output: Output, timeout: str, settle: str,
                 include_operator_owned: bool, roll_on_delete: bool,
                 plan_file: Path | None = None, allow_foreign_pods: bool = False,
                 prepare_for: str = "", dry_run: bool = False,
                 rolling: bool = False) -> RunRequest:
    options = _options(include_operator_owned, roll_on_delete, allow_foreign_pods, prepare_for,
                       rolling)
    wait = parse_duration(timeout)
    if wait <= 0:  # every wait would fail right after its write: a half-done run, not a run
        raise UsageError(f"--timeout {timeout!r} leaves no time to wait for a rollout.",
                         "pass a positive duration such as 90s or 10m (the default)")
    settings = RunSettings(timeout=wait, settle=parse_duration(settle, "--settle"),
                           options=options)
    return RunRequest(phase=phase, settings=settings, plan_file=plan_file,
                      confirm=Confirm(yes, output), dry_run=dry_run)


def _rendered(report: Report, output: Output, shown: tuple[str, ...] = ()) -> None:
    """How every cluster command ends, after its session closed: render the report, exit 1
    when it says not ok. `shown`: the warnings the question before the run printed."""
    render.document(report, output, shown=shown)
    if isinstance(report, RunReport | StatusReport | PreflightReport) and not report.ok:
        raise typer.Exit(1)


@app.command()
@handles_errors
def apply(
    phase: Annotated[int, typer.Option("--phase", help="Run phases 1..N (1 label, 2 alias, "
                                       "3 switch).", autocompletion=complete_phase)],
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Refuse to run if the "
                                                   "cluster changed since this saved plan.")]
    = None,
    yes: Yes = False,
    dry_run: DryRun = False,
    timeout: Timeout = "10m",
    settle: Settle = "30s",
    include_operator_owned: IncludeOperatorOwned = False,
    roll_on_delete: RollOnDelete = False,
    rolling: Rolling = False,
    allow_foreign_pods: AllowForeignPods = False,
    prepare_for: PrepareFor = "",
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Run every phase up to N that is not completed yet, each gated; resumable.

    Example: dcgm-migrate apply --phase 2 --yes
    """
    request = _run_request(phase, yes, output, timeout, settle, include_operator_owned,
                           roll_on_delete, plan_file, allow_foreign_pods, prepare_for, dry_run,
                           rolling)
    with session(kubeconfig, context, namespace, output) as s:
        report = commands.apply(s, request=request)
    _rendered(report, output,
              request.confirm.shown if isinstance(request.confirm, Confirm) else ())


@app.command()
@handles_errors
def rollback(
    phase: Annotated[int, typer.Option("--phase", help="Undo phases down to and including N.",
                                       autocompletion=complete_phase)],
    yes: Yes = False,
    dry_run: DryRun = False,
    timeout: Timeout = "10m",
    settle: Settle = "30s",
    roll_on_delete: RollOnDelete = False,
    rolling: Rolling = False,
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Undo phases newest first from what the state recorded, with the same gates.

    Example: dcgm-migrate rollback --phase 1 --yes
    """
    request = _run_request(phase, yes, output, timeout, settle, False, roll_on_delete,
                           dry_run=dry_run, rolling=rolling)
    with session(kubeconfig, context, namespace, output) as s:
        report = commands.rollback(s, request=request)
    _rendered(report, output)


@app.command()
@handles_errors
def status(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until interrupted "
                                        "(-o json: one document per line, JSON Lines; -o "
                                        "yaml: a YAML stream).")] = False,
    interval: Annotated[float, typer.Option("--interval", min=1.0, help="Seconds between "
                                            "refreshes with --watch (at least 1).")] = 5.0,
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """State, live verification of completed phases, and drift (exit 1 when drifted).

    Example: dcgm-migrate status -o json
    """
    with session(kubeconfig, context, namespace, output) as s:
        report = commands.status(s)
        watched(report, output, watch)
        try:
            while watch and report.state_error is None:
                interrupts.check()  # a Ctrl-C Python dropped while refreshing (interrupts.py)
                time.sleep(interval)
                report = commands.status(s)
                watched(report, output, watch)
        except KeyboardInterrupt as exc:  # how --watch ends: nothing to resume; after
            if isinstance(exc, Interrupted):  # Ctrl-C the last answer decides the exit code
                raise typer.Exit(exc.exit_code) from None
    if report.state_error is not None:  # the verdict is shown; the state's error ends it
        if output is Output.table:
            raise report.state_error
        raise typer.Exit(exit_code_for(report.state_error))  # the document carries it
    if not report.ok:
        raise typer.Exit(1)



@app.command()
@handles_errors
def verify(
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Gates only, for runbooks and cron: exit 0 when everything holds, 1 when not.

    Example: dcgm-migrate verify || page-oncall
    """
    with session(kubeconfig, context, namespace, output) as s:
        report = commands.verify(s)
    _rendered(report, output)


@app.command()
@handles_errors
def unlock(
    force: Annotated[bool, typer.Option("--force", help="Release the lock even while its "
                                        "holder is still renewing it (only when you are sure "
                                        "that run is dead).")] = False,
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Release a stuck lock; a lock its holder still renews is refused (exit 4) without --force.

    Example: dcgm-migrate unlock
    """
    with session(kubeconfig, context, namespace, output) as s:
        report = commands.unlock(s, force=force)
    render.document(report, output)


@app.command()
@handles_errors
def preflight(
    kubeconfig: Kubeconfig = None, context: Context = None,
    namespace: Namespace = "gpu-operator", output: OutputOpt = Output.table,
    debug: Debug = False,
) -> None:
    """Check API reachability, CRDs and every permission the migration needs (exit 1 if not).

    Example: dcgm-migrate preflight --context prod
    """
    with session(kubeconfig, context, namespace, output) as s:
        report = commands.preflight(s)
    _rendered(report, output)


app.command("guard")(handles_errors(guard))
app.command("change-stack")(handles_errors(change_stack))


# Stand-ins for the commands the simulated cluster's distribution provides (cli/plugins.py):
# with it installed, its own `demo` and `sim` are found first; without it (the tool alone, its
# container image) these refuse in one sentence, with the fix, exit 2.
_PLUGGED_SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command("demo", context_settings=_PLUGGED_SETTINGS, add_help_option=False)
@handles_errors
def _demo() -> None:
    """Run the whole migration on a simulated GPU cluster started in-process (needs the
    simulated cluster installed: `python3 -m pip install ./simulator`)."""
    raise _missing("demo")


@app.command("sim", context_settings=_PLUGGED_SETTINGS, add_help_option=False)
@handles_errors
def _sim() -> None:
    """The simulated GPU cluster as a standalone server (needs it installed:
    `python3 -m pip install ./simulator`)."""
    raise _missing("sim")


def _missing(command: str) -> UsageError:
    return UsageError(f"`dcgm-migrate {command}` needs the simulated cluster, which is not "
                      "installed here (the tool's own package and its image do not carry it)",
                      INSTALL_HINT)


def prog_name(argv0: str) -> str | None:
    """`kubectl dcgm-migrate` when kubectl runs us as its plugin (`kubectl-dcgm_migrate`), so
    usage lines show what the user typed; otherwise click's default."""
    return "kubectl dcgm-migrate" if Path(argv0).name.startswith("kubectl-") else None


def main() -> None:
    """Console-script entry point (`dcgm-migrate`, `kubectl-dcgm_migrate`)."""
    app(prog_name=prog_name(sys.argv[0]))


if __name__ == "__main__":
    main()
