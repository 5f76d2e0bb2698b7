"""Which GPU Operator stack(s) run in a namespace, from the CRs and the objects (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component


@dataclass(frozen=True)
class Discovery:
    stack: str  # clusterpolicy | gpucluster | mixed | both | none
    components: tuple[Component, ...]  # present in the namespace (their DaemonSet exists)
    absent: tuple[Component, ...]  # described by a present stack but not running here
    warnings: tuple[str, ...] = ()


def discover(snapshot: Snapshot, catalog: Catalog) -> Discovery:
    present: list[Component] = []
    absent: list[Component] = []
    stacks: list[str] = []
    warnings: list[str] = []
    crs = {"clusterpolicy": snapshot.cluster_policies, "gpucluster": snapshot.gpu_clusters}
    for stack in catalog.stacks:
        running = [c for c in stack.components if c.daemonset in snapshot.daemonsets]
        if not running and not crs.get(stack.name):
            continue
        stacks.append(stack.name)
        present.extend(running)
        for c in stack.components:
            if c not in running:
                absent.append(c)
                warnings.append(f"{stack.name}: DaemonSet/{c.daemonset} is not running here "
                                f"({c.component} disabled?); it is skipped")
        if running and not crs.get(stack.name):
            warnings.append(f"{stack.name}: its DaemonSets run but no {stack.cr.kind} exists")
    if not stacks:
        return Discovery("none", (), (), ())
    if len(stacks) == 1:
        return Discovery(stacks[0], tuple(present), tuple(absent), tuple(warnings))
    nodes = {}
    for stack in catalog.stacks:
        nodes[stack.name] = {p.node for c in stack.components if c in present
                             for p in snapshot.pods_of(c.daemonset)}
    shared = nodes["clusterpolicy"] & nodes["gpucluster"]
    kind = "both" if shared else "mixed"
    if kind == "both":
        warnings.append(f"ClusterPolicy and GPUCluster stacks coexist on {len(shared)} nodes: "
                        "the stable names belong to the ClusterPolicy stack")
    return Discovery(kind, tuple(present), tuple(absent), tuple(warnings))
