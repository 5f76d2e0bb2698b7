"""How far each stable name reaches, as numbers: the nodes it must reach and the nodes it does.

The verdict's `nodes-covered` check (`model/outcome.py`) answers yes or no and names the nodes;
a dashboard and an alert want the magnitude, the same way for every name: nodes that run a
live pod the name must reach (its components' DaemonSets; for a stable name, those of every
stack present), and how many of those list a ready endpoint of such a pod in the name's
EndpointSlices (all of them, the operator's and the tool's, as kube-proxy merges them). The
names are the ones the verdict judged (`stable-name`, `nodes-covered`), so the two never
disagree on which names there are; a name whose Service is missing reaches no node. Pure: a
snapshot and a verdict in, numbers out.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrator.model.outcome import Verdict
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component

NAME_CHECKS = ("stable-name", "nodes-covered")


@dataclass(frozen=True)
class Reach:
    wanted: int
    reached: int


def _components(catalog: Catalog, snapshot: Snapshot, name: str) -> list[Component]:
    """The components a name must reach: the stable name reaches every stack's pods of its
    kind; a GPUCluster Service's own (`-dra`) name reaches its own pods."""
    present = [c for c in catalog.components if c.daemonset in snapshot.daemonsets]
    return [c for c in present if (c.alias or c.service) == name
            or (c.alias and c.service == name)]


def reach(snapshot: Snapshot, catalog: Catalog, verdict: Verdict) -> dict[str, Reach]:
    """Stable name → (nodes wanted, nodes reached), for each name the verdict covered."""
    names = {f.subject.split("/", 1)[-1] for f in verdict.findings
             if f.check in NAME_CHECKS}
    out = {}
    for name in sorted(names):
        pods = [p for c in _components(catalog, snapshot, name)
                for p in snapshot.pods_of(c.daemonset) if not p.deleting]
        wanted = {p.node for p in pods if p.node}
        names_ = {p.name for p in pods}
        reached = {e.node for e in snapshot.endpoints_of(name).endpoints
                   if e.ready and e.node and e.pod in names_}
        out[name] = Reach(len(wanted), len(reached & wanted))
    return out
