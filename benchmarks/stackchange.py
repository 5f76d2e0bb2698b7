"""`python3 -m benchmarks.stackchange`: a stack change on the released GPU Operator, measured.

On a simulated cluster running the released operator (which refuses a ClusterPolicy and a
GPUCluster at once) with the operator's probe timings: `change-stack` to the GPUCluster and back
(docs/runbook.md, "Changing stack"), then, on a second cluster, the plain procedure (delete the
ClusterPolicy, create the GPUCluster, wait for its rollout, `apply --phase 3`). For each: how
long the stable names were absent, whether their ClusterIPs changed, their lowest ready
endpoints, and the worst per-node gap, in simulated seconds from the sim's own commits
(tests/helpers/stablenames.py, which the e2e test uses too); and the lists the tool sent
(requests and bytes, from the sim's request log), whose size grows with the node count.
Measurements, never assertions.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.requestlog import RequestRecord
from migrator.model import kinds
from tests.helpers import crash
from tests.helpers.stablenames import StableNames, watching
from tests.helpers.stackprep import manifest

NS = "gpu-operator"
STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")


def _until(sim: SimCluster, done: Callable[[], bool], sim_seconds: float) -> None:
    deadline = sim.clock.now() + sim_seconds
    while not done():
        if sim.clock.now() > deadline:
            raise TimeoutError(f"not within {sim_seconds} simulated seconds")
        time.sleep(0.02)


def _served(sim: SimCluster, nodes: int, names: tuple[str, ...] = STABLE) -> bool:
    items, _ = sim.store.list(kinds.ENDPOINTSLICE, NS)
    return all(len({ep.get("nodeName") for sl in items
                    if sl["metadata"]["labels"].get("kubernetes.io/service-name") == name
                    for ep in sl.get("endpoints") or []
                    if (ep.get("conditions") or {}).get("ready")}) >= nodes for name in names)


def _cluster(nodes: int, scale: float) -> SimCluster:
    sim = SimCluster(nodes=nodes, stack="clusterpolicy", time_scale=scale,
                     operator_reconcile_seconds=RESYNC_SECONDS)
    sim.__enter__()
    done = crash.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s")
    assert done.code == 0, done.output
    return sim


Measured = tuple[StableNames, list[RequestRecord]]


def _lists(sim: SimCluster, since: int) -> list[RequestRecord]:
    return sim.server.log.find(since, verb="list")


def _change(sim: SimCluster, nodes: int, to: str, path: str, old: str) -> Measured:
    mark = sim.server.log.last_seq
    with watching(sim, NS, STABLE) as seen:
        done = crash.run(sim.kubeconfig, "change-stack", "--to", to, "-f", path, "--delete-cr",
                         old, "--yes", "--settle", "0s", timeout=1800)
        assert done.code == 0, done.output[-3000:]
        _until(sim, lambda: _served(sim, nodes), 600)
    return seen, _lists(sim, mark)


def _plain(sim: SimCluster, nodes: int, path: str) -> Measured:
    mark = sim.server.log.last_seq
    with watching(sim, NS, STABLE) as seen:
        cp = sim.store.list(kinds.CLUSTER_POLICY)[0][0]
        sim.store.delete(kinds.CLUSTER_POLICY, None, cp["metadata"]["name"])
        sim.store.create(kinds.GPU_CLUSTER, yaml.safe_load(Path(path).read_text()))
        _until(sim, lambda: _served(sim, nodes, ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")),
               600)
        done = crash.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s",
                         timeout=1800)
        assert done.code == 0, done.output[-3000:]
        _until(sim, lambda: _served(sim, nodes), 600)
    return seen, _lists(sim, mark)


def row(title: str, measured: Measured) -> str:
    seen, lists = measured
    ips = "kept" if all(len(v) == 1 for v in seen.cluster_ips.values()) else "changed"
    absent = max(seen.absent_seconds.values(), default=0.0)
    ready = ", ".join(f"{k} {v}" for k, v in sorted(seen.lowest_ready.items()))
    sent = sum(r.bytes_sent for r in lists) / 1e6
    return (f"| {title} | {absent:.1f} s | {ips} | {ready} | {seen.worst_gap():.1f} s | "
            f"{len(lists)} ({sent:.1f} MB) |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python3 -m benchmarks.stackchange", description=__doc__)
    p.add_argument("--nodes", type=int, default=3, help="GPU nodes (default 3)")
    p.add_argument("--time-scale", type=float, default=0.1,
                   help="real seconds per simulated second (default 0.1)")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sim = _cluster(args.nodes, args.time_scale)
        try:
            rows.append(row("change-stack → gpucluster", _change(
                sim, args.nodes, "gpucluster", str(manifest(folder, "gpucluster")),
                "gpu-cluster-policy")))
            rows.append(row("change-stack → clusterpolicy", _change(
                sim, args.nodes, "clusterpolicy", str(manifest(folder, "clusterpolicy")),
                "gpu-cluster")))
        finally:
            sim.stop()
        sim = _cluster(args.nodes, args.time_scale)
        try:
            rows.append(row("delete, create, wait, apply (plain)",
                            _plain(sim, args.nodes, str(manifest(folder, "gpucluster")))))
        finally:
            sim.stop()
    print(f"stack change on the released operator: {args.nodes} nodes, time scale "
          f"{args.time_scale}, simulated seconds from the sim's commits")
    print("| procedure | names absent | ClusterIPs | lowest ready endpoints | "
          "worst per-node gap | lists sent |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
