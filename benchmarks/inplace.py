"""Phase 1 in place against rolling (docs/performance.md, "Phase 1: in place or rolling").

`python3 -m benchmarks.inplace [--sizes 10,100,1000,5000] [--stack gpucluster]` runs
`apply --phase 3 --yes` (the real CLI, a subprocess) on a fresh simulated cluster per size and
path — the default (in place) and `--rolling` — with the fixtures' readiness probes (15 s
DCGM, 45 s exporter) and prints, side by side: the simulated wall time, pods restarted (pod
uids before and after), API writes (the sim's request log) and the lowest ready endpoints
each Service that existed before the run had at any EndpointSlice commit, against its count
before. Measurements, never assertions.

Simulated time is the sim's own clock, kept free of the harness's real time:
- in place runs at a time scale of 1.0 (a simulated second is a real one: the CLI's own time
  counts as it would on a real fleet, not 1/scale-fold) with the sim answering each write in a
  real API server's time (`ApiServer.model_writes`, dcgm_sim/apilatency.py), not its own;
- rolling is measured (at `--rolling-time-scale`, where the CLI's own real seconds are small
  against the rollouts' simulated hours) up to `--measure-rolling-upto` nodes. Above that it
  would take days of real time at 1.0 and hours at any scale that keeps the CLI's real time
  out of it, so it is computed from the fixtures' timings and printed as "estimated": per
  DaemonSet, ceil(pods / maxUnavailable) waves of termination + pod start + readiness delay
  (benchmarks/floor.py, as the sim's kubelet and prober run them), every pod restarted, the
  tool's writes at least as many as measured at the largest measured size (its writes do not
  grow with nodes on the rolling path, only its progress saves with the rollouts' length), and
  each Service down by maxUnavailable pods at each wave.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from benchmarks import floor
from benchmarks.procs import CLI, cli_env, run
from dcgm_sim.apilatency import WriteLatency
from dcgm_sim.cluster import SimCluster
from dcgm_sim.store import Event
from migrator.model import kinds

NS = "gpu-operator"
Obj = dict[str, Any]
POD_START = 2.0  # simulated seconds from a pod's creation to its containers running
TERMINATION = 1.0  # simulated seconds a deleted pod takes to go


class Lowest:
    """Ready endpoints per Service at every EndpointSlice commit (a store subscriber: exact,
    no sample missed), the lowest kept against the count before the run."""

    def __init__(self, sim: SimCluster) -> None:
        self.slices: dict[str, tuple[str, int]] = {}  # slice → (service, ready)
        self.lock = threading.Lock()
        for s in sim.store.list(kinds.ENDPOINTSLICE, NS)[0]:
            self._take(s, deleted=False)
        self.before = self.totals()
        self.lowest = dict(self.before)

    def _take(self, obj: Obj, deleted: bool) -> None:
        meta = obj.get("metadata") or {}
        service = (meta.get("labels") or {}).get("kubernetes.io/service-name", "")
        ready = sum(1 for e in obj.get("endpoints") or []
                    if (e.get("conditions") or {}).get("ready"))
        if deleted:
            self.slices.pop(meta.get("name", ""), None)
        else:
            self.slices[meta.get("name", "")] = (service, ready)

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for service, ready in self.slices.values():
            out[service] = out.get(service, 0) + ready
        return out

    def __call__(self, event: Event) -> None:
        if event.resource.key != kinds.ENDPOINTSLICE.key or (
                event.object.get("metadata") or {}).get("namespace") != NS:
            return
        with self.lock:
            self._take(event.object, event.type == "DELETED")
            for service, ready in self.totals().items():
                if service in self.lowest:
                    self.lowest[service] = min(self.lowest[service], ready)


def _uids(sim: SimCluster) -> set[str]:
    return {p["metadata"]["uid"] for p in sim.store.list(kinds.POD, NS)[0]
            if (p["metadata"].get("labels") or {}).get("app", "").startswith("nvidia-dcgm")}


def measure(nodes: int, stack: str, rolling: bool, time_scale: float) -> Obj:
    """One `apply --phase 3` on a fresh cluster, measured by the sim's clock and records."""
    with SimCluster(nodes=nodes, stack=stack, time_scale=time_scale,
                    pod_start_seconds=POD_START, termination_seconds=TERMINATION) as sim:
        sim.server.model_writes(WriteLatency(sim.clock))
        before = _uids(sim)
        low = Lowest(sim)
        sim.store.subscribe(low)
        mark = sim.server.log.last_seq
        began = sim.clock.now()
        argv = [*CLI, "apply", "--phase", "3", "--yes", "--settle", "0s", "--timeout", "12h",
                "-o", "json", "--kubeconfig", sim.kubeconfig, *(["--rolling"] if rolling else [])]
        done = run(argv, env=cli_env(), keep_stdout=False, timeout=6 * 3600)
        sim_s = sim.clock.now() - began
        sim.store.unsubscribe(low)
        writes = list(sim.server.log.writes(since=mark))
        return {"nodes": nodes, "stack": stack, "path": "rolling" if rolling else "in place",
                "basis": "measured", "time_scale": time_scale, "exit": done.code,
                "sim_seconds": round(sim_s, 1), "real_seconds": round(done.wall_s, 1),
                "cli_cpu_seconds": round(done.cpu_s, 1),
                "pods_restarted": len(before - _uids(sim)), "pods": len(before),
                "api_writes": len(writes),
                "pod_writes": sum(1 for w in writes if w.resource == "pods"),
                "lowest_ready": {s: [low.lowest[s], n] for s, n in sorted(low.before.items())},
                **({"stderr": done.stderr.decode(errors="replace")[-400:]}
                   if done.code else {})}


def daemonsets(stack: str) -> list[Obj]:
    """The DaemonSets phase 1 rolls, as admitted from the fixtures (a seeded one-node
    cluster): their probes and update strategy are what a rollout's waves cost."""
    with SimCluster(nodes=1, stack=stack) as sim:
        return [ds for ds in sim.store.list(kinds.DAEMONSET, NS)[0]
                if (ds["spec"]["template"]["metadata"].get("labels") or {}).get(
                    "app", "").startswith("nvidia-dcgm")]


def _floors(nodes: int, shape: list[Obj]) -> list[floor.RolloutFloor]:
    return [floor.daemonset_floor({**ds, "status": {"desiredNumberScheduled": nodes}},
                                  pod_start_seconds=POD_START,
                                  termination_seconds=TERMINATION, time_scale=1.0)
            for ds in shape]


def estimate_rolling(nodes: int, stack: str, shape: list[Obj], measured: Obj | None) -> Obj:
    """The rolling path computed from the fixtures' timings (module docstring): the rollout
    floor of benchmarks/floor.py in simulated seconds."""
    parts = _floors(nodes, shape)
    services = (measured or {}).get("lowest_ready") or {}
    budget = max(p.max_unavailable for p in parts)
    return {"nodes": nodes, "stack": stack, "path": "rolling", "basis": "estimated",
            "sim_seconds": round(sum(p.seconds for p in parts), 1),
            "pods_restarted": nodes * len(parts), "pods": nodes * len(parts),
            "api_writes": (measured or {}).get("api_writes"), "pod_writes": 0,
            "lowest_ready": {s: [nodes - budget, nodes] for s in services}}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 172800 else f"{seconds / 86400:.1f} days"


def _lowest(row: Obj) -> str:
    return ", ".join(f"{s} {low}/{n}" for s, (low, n) in row["lowest_ready"].items())


def _writes(row: Obj) -> str:
    """API writes; estimated rolling: at least those measured at the largest measured size
    (the state's progress saves grow with a rollout's length)."""
    if row["api_writes"] is None:
        return "?"
    return f"≥{row['api_writes']}" if row["basis"] == "estimated" else str(row["api_writes"])


def table(rows: list[Obj]) -> str:
    """The two paths side by side, per size."""
    head = (f"{'nodes':>6}  {'path':<8} {'basis':<9} {'simulated':>10} {'CLI real':>9} "
            f"{'restarted':>11} {'writes':>7}  lowest ready endpoints (lowest/before)")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['nodes']:>6}  {r['path']:<8} {r['basis']:<9} "
                     f"{_duration(r['sim_seconds']):>10} "
                     f"{_duration(r['real_seconds']) if 'real_seconds' in r else '-':>9} "
                     f"{r['pods_restarted']:>5}/{r['pods']:<5} "
                     f"{_writes(r):>7}  "
                     + _lowest(r))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.inplace", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10,100,1000,5000", help="node counts")
    parser.add_argument("--stack", default="gpucluster")
    parser.add_argument("--paths", default="in-place,rolling")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="real seconds per simulated second, in place (default 1.0)")
    parser.add_argument("--rolling-time-scale", type=float, default=0.05,
                        help="real seconds per simulated second, rolling (default 0.05)")
    parser.add_argument("--measure-rolling-upto", type=int, default=100,
                        help="larger sizes: rolling estimated from the fixtures' timings")
    parser.add_argument("--json", help="write every row to this file as well")
    parser.add_argument("--table", help="print the table of a --json file, run nothing")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table, encoding="utf-8") as saved:
            print(table(json.load(saved)))
        return 0
    paths = args.paths.split(",")
    shape = daemonsets(args.stack)
    rows: list[Obj] = []
    measured_rolling: Obj | None = None
    for nodes in (int(n) for n in args.sizes.split(",")):
        for path in paths:
            began = time.perf_counter()
            if path == "rolling" and nodes > args.measure_rolling_upto:
                row = estimate_rolling(nodes, args.stack, shape, measured_rolling)
            else:
                row = measure(nodes, args.stack, path == "rolling",
                              args.rolling_time_scale if path == "rolling" else args.time_scale)
                if path == "rolling":
                    measured_rolling = row
                    row["estimated_seconds"] = estimate_rolling(
                        nodes, args.stack, shape, row)["sim_seconds"]
            row["harness_seconds"] = round(time.perf_counter() - began, 1)
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    print(table(rows))
    print("\nsimulated: the sim's clock (in place at time scale "
          f"{args.time_scale:g}, writes answered in a real API server's time; rolling measured "
          f"at {args.rolling_time_scale:g}); estimated: rolling computed from the fixtures' "
          "timings, " + "; ".join(f"{p.daemonset} {p.seconds:g} s per wave, maxUnavailable "
                                  f"{p.max_unavailable}" for p in _floors(1, shape)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
