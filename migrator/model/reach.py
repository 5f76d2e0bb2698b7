"""How far each stable name the verdict judged reaches, for dashboards and alerts (pure): nodes
with a live pod it must reach, and how many of those its EndpointSlices list a ready pod of."""
from __future__ import annotations

from dataclasses import dataclass

from migrator.model.outcome import Verdict
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog

NAME_CHECKS = ("stable-name", "nodes-covered")


@dataclass(frozen=True)
class Reach:
    wanted: int
    reached: int


def reach(snapshot: Snapshot, catalog: Catalog, verdict: Verdict) -> dict[str, Reach]:
    """Stable name → (nodes wanted, nodes reached), for each name the verdict covered."""
    names = {f.subject.split("/", 1)[-1] for f in verdict.findings
             if f.check in NAME_CHECKS}
    present = [c for c in catalog.components if c.daemonset in snapshot.daemonsets]
    out = {}
    for name in sorted(names):
        # Every stack's pods of its kind for a stable name; its own for a GPUCluster `-dra` name.
        pods = [p for c in present if (c.alias or c.service) == name or c.service == name
                for p in snapshot.pods_of(c.daemonset) if not p.deleting]
        wanted = {p.node for p in pods if p.node}
        names_ = {p.name for p in pods}
        reached = {e.node for e in snapshot.endpoints_of(name).endpoints
                   if e.ready and e.node and e.pod in names_}
        out[name] = Reach(len(wanted), len(reached & wanted))
    return out
