"""`dcgm-migrate demo`: the whole migration against a simulated GPU cluster started in-process.

It runs what a user runs — `migrator.commands` plan → apply 1, 2, 3 → status, through the real
client over HTTP — with the same live progress, then prints a summary. No cluster needed; the
simulated time is scaled so pods take a realistic 20-50 simulated seconds to become Ready (start
plus the fixtures' readiness probe delays) and the demo still finishes in well under a minute.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dcgm_sim import kinds
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.store import Event
from migrator import commands
from migrator.cli import render
from migrator.cli.failures import handles_errors
from migrator.cli.live import make_progress
from migrator.cli.options import Debug
from migrator.commands import RunRequest, Session
from migrator.engine.loop import RunSettings
from migrator.engine.progress import Listener
from migrator.engine.reports import StatusReport
from migrator.kube.client import Kube
from migrator.model.planning import Options
from migrator.model.snapshot import endpoints_from_slices

DEMO_TARGET_SECONDS = 20.0  # real seconds the phase-1 rollouts should take at any size
MAX_TIME_SCALE = 0.05  # never slower than 20x real time
NAMESPACE = "gpu-operator"


class DemoStack(StrEnum):
    gpucluster = "gpucluster"
    clusterpolicy = "clusterpolicy"


# ---- pure helpers ---------------------------------------------------------------------------

def auto_time_scale(nodes: int, pod_start: float, termination: float,
                    target: float = DEMO_TARGET_SECONDS, probes: float = 60.0) -> float:
    """Real seconds per simulated second so that phase 1 — two DaemonSets rolling one node at
    a time — takes about `target` real seconds, whatever the node count. `probes`: the two
    DaemonSets' readiness probe delays per node (the fixtures': 15 s DCGM + 45 s exporter)."""
    simulated = max(nodes, 1) * (2 * (pod_start + termination) + probes)
    return min(MAX_TIME_SCALE, target / simulated)


def lowest_after_reaching(series: Sequence[int], baseline: int) -> int | None:
    """The lowest ready count once the Service first reached its baseline (an alias starts at
    0 while its EndpointSlice fills; that is creation, not loss). None if never reached."""
    for i, value in enumerate(series):
        if value >= baseline:
            return min(series[i:])
    return None


@dataclass
class Stage:
    """One command the demo ran, as a user would have typed it, with what it did."""

    command: str
    seconds: float
    phase: int | None = None
    writes: int = 0
    lowest: dict[str, tuple[int, int]] = field(default_factory=dict)  # svc → (lowest, baseline)


def merge_lowest(stages: Sequence[Stage]) -> dict[str, tuple[int, int]]:
    """Per Service, the lowest ready count the gate checks saw across all runs, and the
    baseline it was held against (the highest baseline recorded for it)."""
    out: dict[str, tuple[int, int]] = {}
    for stage in stages:
        for svc, (low, base) in stage.lowest.items():
            prev = out.get(svc, (low, base))
            out[svc] = (min(prev[0], low), max(prev[1], base))
    return out


def service_rows(stages: Sequence[Stage], series: Mapping[str, Sequence[int]],
                 ) -> list[tuple[str, int, int, int | None, bool]]:
    """(service, baseline, lowest seen by the gates, lowest at any instant, held) per Service
    the runner guarded; `held` means the gates never saw it below its baseline."""
    rows = []
    for svc, (low, base) in sorted(merge_lowest(stages).items()):
        rows.append((svc, base, low, lowest_after_reaching(series.get(svc, ()), base),
                     low >= base))
    return rows


# ---- an independent observer of the simulated cluster -----------------------------------------

class EndpointTracker:
    """Ready endpoints per Service after every EndpointSlice change in the simulated store — a
    sample at every instant, not only when the runner checks (its checks come after each
    rollout). Subscribed to the store: called under its lock, so it only updates counters."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._slices: dict[str, tuple[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.series: dict[str, list[int]] = {}

    def __call__(self, event: Event) -> None:

        if event.resource != kinds.ENDPOINTSLICE:
            return
        meta = event.object.get("metadata") or {}
        if meta.get("namespace") != self.namespace:
            return
        service = (meta.get("labels") or {}).get("kubernetes.io/service-name", "")
        with self._lock:
            if event.type == "DELETED":
                self._slices.pop(str(meta.get("name")), None)
            else:
                self._slices[str(meta.get("name"))] = (service, event.object)
            mine = [obj for svc, obj in self._slices.values() if svc == service]
            ready = endpoints_from_slices(service, mine).ready_total
            self.series.setdefault(service, []).append(ready)

    def prime(self, slices: Sequence[dict[str, Any]]) -> None:
        """Start from the slices that exist before the demo's first command."""

        for i, obj in enumerate(slices):
            self(Event("ADDED", kinds.ENDPOINTSLICE, obj, i))


# ---- the run --------------------------------------------------------------------------------

@contextmanager
def _tracked(sim: SimCluster) -> Iterator[EndpointTracker]:

    tracker = EndpointTracker(sim.namespace)
    with sim.store.lock:
        items, _ = sim.store.list(kinds.ENDPOINTSLICE, sim.namespace)
        tracker.prime(items)
        sim.store.subscribe(tracker)
    try:
        yield tracker
    finally:
        sim.store.unsubscribe(tracker)


def _say(console: Console, text: str) -> None:

    console.print(f"\n[bold cyan]$ {escape(text)}[/bold cyan]")


def _apply(session: Session, console: Console, phase: int, time_scale: float) -> Stage:
    """`dcgm-migrate apply --phase N --yes`, with the CLI's own live progress."""

    command = f"apply --phase {phase} --yes"
    _say(console, f"dcgm-migrate {command}")
    progress = make_progress(quiet=False)
    session.listener = progress or Listener()
    settings = RunSettings(timeout=600.0, settle=30.0 * time_scale)
    began = time.monotonic()
    try:
        report = commands.apply(session, RunRequest(phase=phase, settings=settings))
    finally:
        if progress is not None:
            progress.close()
        session.listener = Listener()
    seconds = time.monotonic() - began
    result = report.result
    lowest = {svc: (v.lowest, v.baseline) for svc, v in result.lowest_endpoints.items()}
    status = next(p.status.value for p in report.report.phases if p.number == phase)
    console.print(f"phase {phase} {status}: {result.writes} writes in {seconds:.1f} s")
    return Stage(command, seconds, phase, result.writes, lowest)


def run_stages(session: Session, console: Console, time_scale: float,
               ) -> tuple[list[Stage], StatusReport]:
    """plan → apply 1, 2, 3 → status, each through `migrator.commands` as the CLI calls it.
    Returns the stages and the final status report."""

    _say(console, "dcgm-migrate plan")
    began = time.monotonic()
    render.report_table(commands.plan(session, Options()))
    stages = [Stage("plan", time.monotonic() - began)]
    stages += [_apply(session, console, phase, time_scale) for phase in (1, 2, 3)]
    _say(console, "dcgm-migrate status")
    began = time.monotonic()
    final = commands.status(session)
    render.report_table(final)
    stages.append(Stage("status", time.monotonic() - began))
    return stages, final


# ---- the summary ----------------------------------------------------------------------------

def print_summary(console: Console, sim: SimCluster, stages: Sequence[Stage],
                  final: StatusReport, series: Mapping[str, Sequence[int]],
                  seconds: float) -> None:

    requests = sim.server.log.last_seq
    api_writes = len(sim.server.log.writes())
    step_writes = sum(s.writes for s in stages)
    console.print(f"\n[bold]Summary[/bold] — simulated {sim.stack} cluster, {sim.nodes} nodes: "
                  f"{seconds:.1f} s, {requests} API requests, {step_writes} writes to the "
                  f"migrated objects (+{api_writes - step_writes} to the state ConfigMap)")
    status = {p.number: p.status.value for p in final.report.phases}
    names = {p.number: p.name for p in final.report.phases}
    phases = Table(box=box.SIMPLE, pad_edge=False)
    for col in ("phase", "status", "writes", "duration"):
        phases.add_column(col, justify="right" if col in ("writes", "duration") else "left")
    for s in stages:
        if s.phase is not None:
            phases.add_row(f"{s.phase} {names[s.phase]}", status[s.phase], str(s.writes),
                           f"{s.seconds:.1f} s")
    console.print(phases)
    services = Table(box=box.SIMPLE, pad_edge=False)
    services.add_column("Service", no_wrap=True)
    for col in ("baseline", "lowest\n(gates)", "lowest\n(any time)", "held"):
        services.add_column(col, justify="right")
    for svc, base, low, instant, held in service_rows(stages, series):
        services.add_row(svc, str(base), str(low), "-" if instant is None else str(instant),
                         "yes" if held else "[red]NO[/red]")
    console.print(services)
    console.print("lowest (gates): what the runner's endpoint gates measured after every step; "
                  "lowest (any time): after every EndpointSlice change. Phase 1 relabels "
                  "the pods in place (its writes: hold, labels and restore per DaemonSet, a "
                  "patch per pod) and restarts none; on its rolling path (--rolling) each "
                  "node's pod restarts once, one node at a time (the DaemonSet's "
                  "maxUnavailable), a dip of that size being its budget; phases 2 and 3 move "
                  "no pods.")
    verdict = "[green]OK[/green]" if final.ok else "[red]NOT OK[/red]"
    console.print(f"[bold]verdict[/bold] {verdict}: status after phase 3 "
                  + ("holds" if final.ok else "reports failed gates"))


# ---- the command ----------------------------------------------------------------------------

def demo(
    stack: Annotated[DemoStack, typer.Option(
        "--stack", help="Which GPU Operator stack the simulated cluster runs.")]
    = DemoStack.gpucluster,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=5000,
                                       help="Number of simulated GPU nodes.")] = 8,
    time_scale: Annotated[float | None, typer.Option(
        "--time-scale", min=0.0001, max=1.0,
        help="Real seconds per simulated second (default: chosen so phase 1 takes about "
             f"{DEMO_TARGET_SECONDS:g} s).")] = None,
    pod_start_seconds: Annotated[float, typer.Option(
        "--pod-start-seconds", min=0.0,
        help="Simulated seconds from pod creation to running; Ready follows after the "
             "readiness probes' initial delay (15 s DCGM, 45 s exporter).")]
    = 5.0,
    operator: Annotated[bool, typer.Option(
        "--operator/--no-operator",
        help="Run the GPU Operator imitation (it reconciles its DaemonSets and Services every "
             "few simulated seconds, as on a real cluster).")] = True,
    debug: Debug = False,
) -> None:
    """Run the whole migration on a simulated GPU cluster started in-process — plan, apply
    1..3 with live progress, status — and print a summary. Needs no cluster.

    Example: dcgm-migrate demo --stack clusterpolicy --nodes 4
    """
    termination = 5.0
    scale = time_scale or auto_time_scale(nodes, pod_start_seconds, termination)
    console = Console(highlight=False)
    console.soft_wrap = not console.is_terminal  # logs: one line per sentence
    began = time.monotonic()
    with SimCluster(nodes=nodes, stack=stack.value, namespace=NAMESPACE, time_scale=scale,
                    pod_start_seconds=pod_start_seconds,
                    termination_seconds=termination,
                    operator_reconcile_seconds=RESYNC_SECONDS if operator else None) as sim:
        console.print(f"[bold]dcgm-migrate demo[/bold]: simulated GPU cluster with {nodes} "
                      f"nodes on the {stack.value} stack at {sim.url}; pods take "
                      f"{pod_start_seconds:g} s to start, simulated time runs "
                      f"{1 / scale:.0f}x faster.\nkubeconfig (valid while the demo runs): "
                      f"{sim.kubeconfig}")
        kube = Kube.connect(sim.kubeconfig)
        try:
            with _tracked(sim) as tracker:
                stages, final = run_stages(Session(kube, NAMESPACE), console, scale)
        finally:
            kube.close()
        print_summary(console, sim, stages, final, tracker.series, time.monotonic() - began)
    if not final.ok:
        raise typer.Exit(1)


# The entry point dcgm-migrate loads when `demo` is invoked (simulator/pyproject.toml).
demo_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None)
demo_app.command("demo")(handles_errors(demo))
