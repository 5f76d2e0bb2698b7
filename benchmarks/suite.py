"""The measurements: CLI start, `plan`/`status` against `kubectl get` on the same server, and
`apply --phase 3` against the rollout floor. Each returns plain dicts for results.json."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import floor, stats
from benchmarks.procs import CLI, IMPORT_COMMANDS, Measured, cli_env, run
from benchmarks.simproc import NS, SimProcess, SimSettings, Traffic

Obj = dict[str, Any]
Echo = Callable[[str], None]

KUBECTL_OBJECTS = "ds,svc,pods,endpointslices"


@dataclass(frozen=True)
class ApplySettings:
    """Scaled time for `apply --phase 3`: realistic pod start and termination in simulated
    seconds, run `1/time_scale` times faster."""

    pod_start_seconds: float = 30.0
    termination_seconds: float = 1.0
    time_scale: float = 0.001
    sim_alone: bool = True


@dataclass
class Samples:
    """Repeated runs of one command."""

    wall: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    sim_cpu: list[float] = field(default_factory=list)
    requests: list[float] = field(default_factory=list)
    codes: list[int] = field(default_factory=list)
    traffic: Traffic | None = None

    def add(self, m: Measured, traffic: Traffic | None = None,
            sim_cpu: float | None = None) -> None:
        self.wall.append(m.wall_s)
        self.rss.append(m.peak_rss_mb)
        self.cpu.append(m.cpu_s)
        self.codes.append(m.code)
        if sim_cpu is not None:
            self.sim_cpu.append(sim_cpu)
        if traffic is not None:
            self.requests.append(traffic.requests)
            self.traffic = traffic

    def as_dict(self) -> Obj:
        out: Obj = {"wall_s": stats.summary(self.wall), "peak_rss_mb": stats.summary(self.rss),
                    "cpu_s": stats.summary(self.cpu), "exit_codes": self.codes}
        if self.sim_cpu:
            out["sim_cpu_s"] = stats.summary(self.sim_cpu)
        if self.traffic is not None:
            out["requests"] = stats.summary(self.requests)
            out["traffic"] = self.traffic.as_dict()
        return out


def cli_start(runs: int) -> Obj:
    """`dcgm-migrate --help` (the installed console script when it is on PATH, else
    `python -m migrator --help`): interpreter, imports, typer."""
    script = shutil.which("dcgm-migrate")
    argv = [script, "--help"] if script else [*CLI, "--help"]
    s = Samples()
    run(argv, env=cli_env())  # warm the file cache and the bytecode
    for _ in range(runs):
        s.add(run(argv, env=cli_env()))
    return {"argv": argv, **s.as_dict()}


def imports(runs: int) -> Obj:
    """`python -c "import migrator.commands"`: the interpreter and what importing the
    commands costs (docs/performance.md, "Small clusters")."""
    s = Samples()
    run(IMPORT_COMMANDS, env=cli_env())
    for _ in range(runs):
        s.add(run(IMPORT_COMMANDS, env=cli_env()))
    return {"argv": list(IMPORT_COMMANDS), **s.as_dict()}


def _measured(sim: SimProcess, argv: Sequence[str], keep_stdout: bool = True) -> tuple[
        Measured, Traffic, float]:
    sim.clear_log()
    before = sim.cpu_seconds()
    m = run(argv, keep_stdout=keep_stdout, env=cli_env() if argv[0] != "kubectl" else None)
    traffic = sim.traffic()
    return m, traffic, sim.cpu_seconds() - before


def reads(nodes: int, stack: str, runs: int, *, kubectl: bool, echo: Echo) -> Obj:
    """`plan`, `status` and the kubectl reference, `runs` times each on one seeded sim."""
    with SimProcess(SimSettings(nodes, stack)) as sim:
        kc = ["--kubeconfig", sim.kubeconfig]
        commands: dict[str, list[str]] = {
            "plan": [*CLI, "plan", "-o", "json", *kc],
            "status": [*CLI, "status", "-o", "json", *kc],
        }
        if kubectl:
            commands["kubectl"] = ["kubectl", "get", KUBECTL_OBJECTS, "-n", NS, "-o", "json",
                                   *kc]
        samples = {name: Samples() for name in commands}
        full_mb = round(sim.full_read_bytes() / 1e6, 3)
        for name, argv in commands.items():  # warm-up: caches, bytecode, kubectl discovery
            run(argv, keep_stdout=False, env=cli_env() if name != "kubectl" else None).checked(
                f"{name} at {nodes} nodes", ok=(0, 1))
        for i in range(runs):
            for name, argv in commands.items():
                m, traffic, sim_cpu = _measured(sim, argv, keep_stdout=name != "kubectl")
                samples[name].add(m, traffic, sim_cpu)
            echo(f"  {nodes} nodes {stack}: run {i + 1}/{runs}: " + ", ".join(
                f"{n} {s.wall[-1]:.2f}s" for n, s in samples.items()))
        result: Obj = {"nodes": nodes, "stack": stack, "runs": runs,
                       "sim_ready_s": round(sim.ready_s, 3), "full_read_mb": full_mb,
                       "commands": {n: s.as_dict() for n, s in samples.items()}}
    if kubectl:
        ref = stats.median_of(samples["kubectl"].wall)
        result["ratios"] = {
            "status_vs_kubectl": stats.ratio(stats.median_of(samples["status"].wall), ref),
            "plan_vs_kubectl": stats.ratio(stats.median_of(samples["plan"].wall), ref),
        }
    return result


def apply_phase3(nodes: int, stack: str, runs: int, settings: ApplySettings, *,
                 echo: Echo) -> Obj:
    """`apply --phase 3 --yes` on a fresh sim per run, against the rollout floor."""
    sim_settings = SimSettings(nodes, stack, time_scale=settings.time_scale,
                               pod_start_seconds=settings.pod_start_seconds,
                               termination_seconds=settings.termination_seconds)
    s = Samples()
    ratios: list[float] = []
    full_reads: list[float] = []  # MB the apply read / MB of one full read
    switch_reads: list[float] = []  # the same for phase 3 alone (phases 1-2 done: no pod rolls)
    full_mb = 0.0
    floor_s = 0.0
    parts: list[floor.RolloutFloor] = []
    alone = _rollouts_alone(sim_settings, settings, echo) if settings.sim_alone else None
    for i in range(runs):
        with SimProcess(sim_settings) as sim:
            floor_s, parts = floor.phase1_floor(
                sim.daemonsets(), pod_start_seconds=settings.pod_start_seconds,
                termination_seconds=settings.termination_seconds,
                time_scale=settings.time_scale)
            # --rolling: judged against the rollout floor, the apply must roll the pods (in
            # place, the default, rolls none: benchmarks/inplace.py compares the two paths)
            argv = [*CLI, "apply", "--phase", "3", "--yes", "-o", "json", "--timeout", "12h",
                    "--rolling", "--kubeconfig", sim.kubeconfig]
            full = sim.full_read_bytes()
            full_mb = full / 1e6
            m, traffic, sim_cpu = _measured(sim, argv)
            full_reads.append(round(traffic.bytes_sent / full, 2))
            m.checked(f"apply at {nodes} nodes")
            s.add(m, traffic, sim_cpu)
            switch_reads.append(_switch_only_reads(sim, full))
            ratios.append(m.wall_s / floor_s if floor_s else 0.0)
            echo(f"  {nodes} nodes {stack}: apply run {i + 1}/{runs}: {m.wall_s:.2f}s, "
                 f"ideal floor {floor_s:.2f}s, ratio {ratios[-1]:.3f}, sim CPU {sim_cpu:.1f}s, "
                 f"read {traffic.bytes_sent / 1e6:.1f} MB = {full_reads[-1]} full reads; "
                 f"phase 3 alone {switch_reads[-1]} full reads")
    out: Obj = {"nodes": nodes, "stack": stack, "runs": runs,
                "settings": {"pod_start_seconds": settings.pod_start_seconds,
                             "termination_seconds": settings.termination_seconds,
                             "time_scale": settings.time_scale},
                "floor_s": round(floor_s, 3), "floor_parts": [p.as_dict() for p in parts],
                "ratio_to_floor": stats.summary(ratios),
                "full_read_mb": round(full_mb, 3), "reads_per_apply": stats.summary(full_reads),
                "switch_reads_per_apply": stats.summary(switch_reads),
                "overhead_s": round(stats.median_of(s.wall) - floor_s, 3),
                **s.as_dict()}
    if alone is not None:
        # What is left of the apply beyond the rollouts the sim alone performs is the tool's.
        alone["apply_ratio"] = stats.ratio(stats.median_of(s.wall), alone["all_daemonsets_s"])
        out["sim_alone"] = alone
    return out


def _switch_only_reads(sim: SimProcess, full: int) -> float:
    """Full reads of `apply --phase 3` when phases 1 and 2 are done (no pod rolls): phase 3
    is rolled back (not measured), then applied again, as the runbook does around an operator
    change."""
    kc = ["--kubeconfig", sim.kubeconfig]
    run([*CLI, "rollback", "--phase", "3", "--yes", "-o", "json", *kc]).checked(
        "rollback --phase 3")
    m, traffic, _ = _measured(sim, [*CLI, "apply", "--phase", "3", "--yes", "-o", "json", *kc])
    m.checked("apply --phase 3 after its rollback")
    return round(traffic.bytes_sent / full, 2)


def _rollouts_alone(sim_settings: SimSettings, settings: ApplySettings, echo: Echo) -> Obj:
    """The rollout floor as measured: on a fresh sim seeded as for the apply, every DaemonSet
    phase 1 rolls is rolled in turn by a plain template patch, with no tool involved, each
    followed by a watch until `kubectl rollout status` would return."""
    nodes, stack = sim_settings.nodes, sim_settings.stack
    with SimProcess(sim_settings) as sim:
        floor_s, parts = floor.phase1_floor(
            sim.daemonsets(), pod_start_seconds=settings.pod_start_seconds,
            termination_seconds=settings.termination_seconds, time_scale=settings.time_scale)
        rollouts: list[Obj] = []
        for part in parts:
            took = sim.roll_alone(part.daemonset)
            rollouts.append({"daemonset": part.daemonset, "wall_s": round(took, 3),
                             "floor_s": round(part.seconds, 3),
                             "ratio": stats.ratio(took, part.seconds)})
            echo(f"  {nodes} nodes {stack}: the sim alone rolls {part.daemonset} in "
                 f"{took:.2f}s (ideal floor {part.seconds:.2f}s)")
    total = round(sum(r["wall_s"] for r in rollouts), 3)
    return {"daemonset": ", ".join(r["daemonset"] for r in rollouts), "rollouts": rollouts,
            "wall_s": total, "floor_s": round(floor_s, 3), "ratio": stats.ratio(total, floor_s),
            "all_daemonsets_s": total}
