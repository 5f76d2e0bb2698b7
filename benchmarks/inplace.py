"""Phase 1 in place against rolling (docs/performance.md, "Phase 1: in place or rolling").

`python3 -m benchmarks.inplace [--sizes 10,100,1000] [--stack gpucluster]` runs
`apply --phase 3 --yes` (the real CLI, a subprocess) on a fresh simulated cluster per size and
path — the default (in place) and `--rolling` — with the fixtures' readiness probes (15 s
DCGM, 45 s exporter) and prints, side by side: the simulated wall time (the sim's own clock),
pods restarted (pod uids before and after), API writes (the sim's request log) and the lowest
ready endpoints each Service had at any commit against its count before the run.
Measurements, never assertions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from typing import Any

from benchmarks.procs import CLI, cli_env
from dcgm_sim.cluster import SimCluster
from dcgm_sim.store import Event
from migrator.model import kinds

NS = "gpu-operator"
Obj = dict[str, Any]


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
    with SimCluster(nodes=nodes, stack=stack, time_scale=time_scale,
                    pod_start_seconds=2.0) as sim:
        before = _uids(sim)
        low = Lowest(sim)
        sim.store.subscribe(low)
        mark = sim.server.log.entries()[-1].seq if sim.server.log.entries() else 0
        began, real = sim.clock.now(), time.perf_counter()
        argv = [*CLI, "apply", "--phase", "3", "--yes", "--settle", "0s", "--timeout", "12h",
                "-o", "json", "--kubeconfig", sim.kubeconfig, *(["--rolling"] if rolling else [])]
        done = subprocess.run(argv, env=cli_env(), capture_output=True, text=True, check=False)
        sim_s = sim.clock.now() - began
        sim.store.unsubscribe(low)
        writes = [w for w in sim.server.log.writes(since=mark)]
        return {"nodes": nodes, "stack": stack, "path": "rolling" if rolling else "in place",
                "exit": done.returncode, "sim_seconds": round(sim_s, 1),
                "real_seconds": round(time.perf_counter() - real, 1),
                "pods_restarted": len(before - _uids(sim)), "pods": len(before),
                "api_writes": len(writes),
                "pod_writes": sum(1 for w in writes if w.resource == "pods"),
                "lowest_ready": {s: f"{low.lowest[s]}/{n}" for s, n in sorted(low.before.items())},
                **({"stderr": done.stderr[-400:]} if done.returncode else {})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.inplace", description=__doc__)
    parser.add_argument("--sizes", default="10,100,1000", help="node counts")
    parser.add_argument("--stack", default="gpucluster")
    parser.add_argument("--paths", default="in-place,rolling")
    parser.add_argument("--time-scale", type=float, default=0.001,
                        help="real seconds per simulated second")
    args = parser.parse_args(argv)
    rows = []
    for nodes in (int(n) for n in args.sizes.split(",")):
        for path in args.paths.split(","):
            row = measure(nodes, args.stack, path == "rolling", args.time_scale)
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(f"{'nodes':>6} {'path':>9} {'sim time':>10} {'restarted':>10} {'writes':>7}  lowest")
    for r in rows:
        print(f"{r['nodes']:>6} {r['path']:>9} {r['sim_seconds']:>9.0f}s "
              f"{r['pods_restarted']:>5}/{r['pods']:<4} {r['api_writes']:>7}  "
              + ", ".join(f"{s} {v}" for s, v in r["lowest_ready"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
