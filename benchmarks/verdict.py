"""`python3 -m benchmarks.verdict`: what the verdict (`model/outcome.py`) costs inside `status`.

For each size: one sim in this process, one snapshot read over HTTP exactly as `status` reads
it, then the pure parts timed on that snapshot — the verdict alone, and the whole report
(`engine/assemble.build`, which includes it) — as medians of several runs, beside the read
itself. Measurements, never assertions.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from dcgm_sim.cluster import SimCluster
from migrator.engine import assemble
from migrator.engine.reads import read_snapshot
from migrator.kube.client import Kube
from migrator.model.outcome import verdict
from migrator.model.planning import Options
from migrator.model.stacks import Catalog, load_catalog


def _median_ms(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m benchmarks.verdict",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,15000")
    parser.add_argument("--stack", default="gpucluster")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    catalog = load_catalog()
    print(f"{'nodes':>6} {'pods':>6} {'read ms':>9} {'verdict ms':>11} {'report ms':>10} "
          f"{'verdict/read':>13}")
    for size in (int(s) for s in args.sizes.split(",")):
        _measure(size, args.stack, args.runs, catalog)


def _measure(size: int, stack: str, runs: int, catalog: Catalog) -> None:
    with SimCluster(nodes=size, stack=stack, time_scale=0.001) as sim:
        kube = Kube.connect(sim.kubeconfig, None)
        snap = read_snapshot(kube, sim.namespace, catalog)
        read = _median_ms(lambda: read_snapshot(kube, sim.namespace, catalog), max(1, runs // 2))
        # A fresh copy each run: a snapshot keeps what it computed (`Snapshot.memo`).
        judged = _median_ms(lambda: verdict(replace(snap), catalog), runs)
        built = _median_ms(lambda: assemble.build(replace(snap), catalog, None, Options()), runs)
        kube.close()
    print(f"{size:>6} {len(snap.pods):>6} {read:>9.0f} {judged:>11.0f} {built:>10.0f} "
          f"{judged / read:>13.2f}")

if __name__ == "__main__":
    main()
