"""kubectl-style options shared by every cluster command (docs/design.md, "Command line"), and
the option groups (dataclasses of options) that `spread` lays out in a command's signature."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from collections.abc import Callable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer
import yaml

from migrator import phases
from migrator.commands import RunRequest
from migrator.engine.loop import RunSettings
from migrator.engine.state.lock import SERVICE_ACCOUNT_NAMESPACE, pod_namespace
from migrator.errors import UsageError
from migrator.kube.config import resolve_source
from migrator.model import yamldoc
from migrator.model.planning import Options
from migrator.model.stacks import load_catalog

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str = "--timeout") -> float:
    """A `--timeout 10m`-style duration in seconds (Go/kubectl style: 1h2m3.5s, or bare seconds)."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        pos, value = 0, 0.0
        for m in _PART.finditer(raw):
            if m.start() != pos:
                break
            value += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(raw) or not raw:
            raise UsageError(f"{option} {text!r} is not a duration.",
                             f"use a number of seconds or a duration like 90s, 10m or 1h30m "
                             f"for {option}") from None
    if value < 0:
        raise UsageError(f"{option} cannot be negative.", f"pass a positive {option}")
    return value


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


def complete_phase(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of --phase: the phases, with their names."""
    return [(str(p.NUMBER), p.NAME) for p in phases.PHASES if str(p.NUMBER).startswith(incomplete)]


def complete_context(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion of --context: the kubeconfig's context names, read as plain YAML."""
    given = (ctx.params or {}).get("kubeconfig")
    paths = [given] if given else (os.environ.get("KUBECONFIG") or "").split(os.pathsep)
    names: list[str] = []
    for path in [p for p in paths if p] or [str(Path.home() / ".kube" / "config")]:
        try:
            doc = yamldoc.safe_load(Path(path).expanduser().read_text())
        except (OSError, yaml.YAMLError):
            continue
        for entry in (doc or {}).get("contexts") or [] if isinstance(doc, dict) else []:
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name.startswith(incomplete) and name not in names:
                names.append(name)
    return names


OUTSIDE_A_POD = "gpu-operator"


def default_namespace(kubeconfig: str | None = None, service_account: Path | None = None,
                      environ: Mapping[str, str] | None = None) -> str:
    """-n's default: in a pod, its namespace (`pod_namespace`); else gpu-operator."""
    env = dict(os.environ if environ is None else environ)
    try:
        in_cluster = resolve_source(kubeconfig, env).in_cluster
    except UsageError:
        in_cluster = False
    if not in_cluster:
        return OUTSIDE_A_POD
    return pod_namespace(env, service_account or SERVICE_ACCOUNT_NAMESPACE) or OUTSIDE_A_POD


def _namespace_or_default(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
    """An -n not given is `default_namespace()` (--kubeconfig, declared first, is parsed)."""
    source = ctx.get_parameter_source(param.name) if param.name else None
    # typer's own click names its ParameterSource members as click's do
    if getattr(source, "name", "") != "DEFAULT":
        return value
    return default_namespace((ctx.params or {}).get("kubeconfig"))


Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask before writing.")]
RollOnDelete = Annotated[bool, typer.Option(
    "--roll-on-delete",
    help="For updateStrategy OnDelete: delete old pods one node at a time to roll them.")]
Rolling = Annotated[bool, typer.Option(
    "--rolling",
    help="Phase 1 (and its rollback): roll every DaemonSet's pods with a template change "
         "instead of relabelling them in place (docs/runbook.md, phase 1).")]


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where a command works and how it answers: the last options of every cluster command."""

    kubeconfig: Annotated[str | None, typer.Option(
        "--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, "
        "~/.kube/config, or in-cluster).", envvar=None)] = None
    context: Annotated[str | None, typer.Option(
        "--context", help="Kubeconfig context to use.", autocompletion=complete_context)] = None
    namespace: Annotated[str, typer.Option(
        "-n", "--namespace", callback=_namespace_or_default,
        help="Namespace the GPU Operator runs in (in a pod: the pod's own).")] = "gpu-operator"
    output: Annotated[Output, typer.Option("-o", "--output", help="table, json or yaml.",
                                           case_sensitive=False)] = Output.table
    debug: Debug = False


@dataclasses.dataclass(frozen=True)
class Planning:
    """The planning options of `plan` and `apply`."""

    include_operator_owned: Annotated[bool, typer.Option(
        "--include-operator-owned", help="Also switch Services the operator owns (it reverts "
        "them on its next reconcile).")] = False
    roll_on_delete: RollOnDelete = False
    rolling: Rolling = False
    allow_foreign_pods: Annotated[bool, typer.Option(
        "--allow-foreign-pods", help="Let phase 3 switch a selector that also picks up pods "
        "outside the DCGM/exporter DaemonSets (recorded in the state).")] = False
    prepare_for: Annotated[str, typer.Option(
        "--prepare-for", metavar="RELEASE", help="Phase 1 also puts this GPU Operator "
        "release's component labels on the pod templates, so its shared Services select every "
        "Ready pod the moment it takes the stable names over (plans/releases.yaml; e.g. "
        "shared-services).")] = ""

    def options(self) -> Options:
        """The planning options, `--prepare-for` checked against plans/releases.yaml."""
        known = [r.name for r in load_catalog().releases]
        if self.prepare_for and self.prepare_for not in known:
            raise UsageError(f"--prepare-for {self.prepare_for!r} names no GPU Operator release "
                             "the tool knows.", f"pass one of: {', '.join(known)}")
        return Options(**dataclasses.asdict(self))


@dataclasses.dataclass(frozen=True)
class Running:
    """How `apply` and `rollback` run."""

    yes: Yes = False
    dry_run: Annotated[bool, typer.Option("--dry-run", help=(
        "Preview the run against the cluster as its earlier writes would leave it, with "
        "server-side dry-run writes; nothing is persisted, no state is written; exit 1 if a "
        "gate would stop the run."))] = False
    timeout: Annotated[str, typer.Option("--timeout", help=(
        "Progress deadline (e.g. 90s, 10m, 1h): a wait fails when nothing moved for this long "
        "(no pod became updated or available in a rollout; gates still failing), not after "
        "this long in total, so a 1,000-node rollout may take hours."))] = "10m"
    settle: Annotated[str, typer.Option("--settle", help="Wait after a selector change before "
                                        "removing what the old selector needed.")] = "30s"

    def request(self, phase: int, options: Options, confirm: Callable[[Any], bool],
                plan_file: Path | None = None) -> RunRequest:
        wait = parse_duration(self.timeout)
        if wait <= 0:  # every wait would fail right after its write: a half-done run, not a run
            raise UsageError(f"--timeout {self.timeout!r} leaves no time to wait for a rollout.",
                             "pass a positive duration such as 90s or 10m (the default)")
        settings = RunSettings(timeout=wait, settle=parse_duration(self.settle, "--settle"),
                               options=options)
        return RunRequest(phase=phase, settings=settings, plan_file=plan_file, confirm=confirm,
                          dry_run=self.dry_run)


def spread(fn: Callable[..., None]
           ) -> tuple[inspect.Signature, Callable[[dict[str, Any]], dict[str, Any]]]:
    """`fn`'s signature as typer reads it, each parameter typed by an option group given as the
    group's options in their order; and the function that builds the groups back from them."""
    hints = get_type_hints(fn, include_extras=True)
    groups: dict[str, Any] = {}
    params: list[inspect.Parameter] = []
    for name, param in inspect.signature(fn).parameters.items():
        kind = hints[name]
        if not dataclasses.is_dataclass(kind):
            params.append(param.replace(annotation=kind, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        groups[name] = kind
        types = get_type_hints(kind, include_extras=True)
        params += [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                     annotation=types[f.name]) for f in dataclasses.fields(kind)]

    def regroup(flat: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(flat)
        for name, kind in groups.items():
            kwargs[name] = kind(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(kind)})
        return kwargs

    return inspect.Signature(params), regroup
