"""What the stable names' clients saw during a stack change, from the simulated cluster's own
commits (never by sampling): whether each Service existed at every instant and kept its
ClusterIP (a DNS name resolves while its Service exists), its ready endpoints over time, and
per node the simulated seconds without a ready endpoint behind each name.

One absence is the old operator's, not the tool's: it renders a Service whole, owner included,
on any reconcile, so one landing after the tool took the Service out of the old CR's reach and
before the CR went hands it back, and the garbage collector takes it with the CR (the tool then
creates it again from its record, docs/runbook.md "Changing stack"). The commits show it: the
Service was seen without a controller owner, then deleted with one. Such an absence is
`handed_back`; every other is the tool's."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim.cluster import SimCluster
from dcgm_sim.store import Event
from migrator.model import kinds
from migrator.model import objects as o
from tests.helpers.readiness import ReadyEndpoints


@dataclass
class StableNames:
    """The record of one change, per Service (and per (Service, node) for the gaps)."""

    services: Sequence[str]
    nodes: Sequence[str]
    cluster_ips: dict[str, set[str]] = field(default_factory=dict)
    absent_seconds: dict[str, float] = field(default_factory=dict)
    # the part of `absent_seconds` that began with a hand-back and ended with the Service back
    handed_back_seconds: dict[str, float] = field(default_factory=dict)
    # per Service, the resourceVersion of each handed-back version the collector took
    handed_back: dict[str, list[int]] = field(default_factory=dict)
    lowest_ready: dict[str, int] = field(default_factory=dict)
    timeline: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    node_gaps: dict[tuple[str, str], float] = field(default_factory=dict)  # the longest

    def unexplained_absence(self) -> dict[str, float]:
        """Per Service, the simulated seconds it was absent for any reason but a hand-back by
        the old operator (see the module's docstring); zero for a change that kept it."""
        return {name: seconds - self.handed_back_seconds.get(name, 0.0)
                for name, seconds in self.absent_seconds.items()
                if seconds - self.handed_back_seconds.get(name, 0.0) > 0}

    def worst_gap(self) -> float:
        return max(self.node_gaps.values(), default=0.0)

    def worst_node_gap(self) -> dict[str, float]:
        """Per node, the longest it had no ready DCGM *and* exporter endpoint (either one
        missing counts: the worst of the two names)."""
        out: dict[str, float] = {}
        for (_service, node), seconds in self.node_gaps.items():
            out[node] = max(out.get(node, 0.0), seconds)
        return out

    def summary(self) -> dict[str, Any]:
        return {"lowest_ready": dict(self.lowest_ready),
                "absent_seconds": {k: round(v, 1) for k, v in self.absent_seconds.items()},
                "cluster_ips": {k: sorted(v) for k, v in self.cluster_ips.items()},
                "worst_node_gap": round(self.worst_gap(), 1)}


@contextmanager
def watching(sim: SimCluster, namespace: str, services: Sequence[str]) -> Iterator[StableNames]:
    """Follow every commit of the Services and their EndpointSlices while the block runs."""
    store, clock = sim.store, sim.clock
    nodes = sorted(o.name(n) for n in store.list(kinds.NODE)[0])
    found = StableNames(services, nodes)
    ready = ReadyEndpoints(services)
    absent_since: dict[str, float] = {}
    kept: set[str] = set()  # seen without a controller owner: out of any CR's reach
    handing_back: set[str] = set()  # the current absence began with a hand-back
    last_version: dict[str, int] = {}
    gap_since: dict[tuple[str, str], float] = {}

    def note(name: str, at: float) -> None:
        count = ready.ready(name) if ready.exists(name) else 0
        found.lowest_ready[name] = min(found.lowest_ready.get(name, count), count)
        line = found.timeline.setdefault(name, [])
        if not line or line[-1][1] != count:
            line.append((at, count))
        per_node = ready.per_node(name) if ready.exists(name) else {}
        for node in nodes:
            key = (name, node)
            if per_node.get(node, 0) == 0:
                gap_since.setdefault(key, at)
            elif key in gap_since:
                found.node_gaps[key] = max(found.node_gaps.get(key, 0.0),
                                           at - gap_since.pop(key))

    def record(event: Event) -> None:
        at = clock.now()
        if event.resource.key == kinds.SERVICE.key and o.name(event.object) in services:
            name = o.name(event.object)
            controlled = _controlled(event.object)
            if event.type == "DELETED":
                absent_since.setdefault(name, at)
                if controlled and name in kept:
                    handing_back.add(name)
                    found.handed_back.setdefault(name, []).append(last_version.get(name, 0))
            else:
                if name in absent_since:
                    seconds = at - absent_since.pop(name)
                    found.absent_seconds[name] = found.absent_seconds.get(name, 0.0) + seconds
                    if name in handing_back:
                        found.handed_back_seconds[name] = (
                            found.handed_back_seconds.get(name, 0.0) + seconds)
                handing_back.discard(name)
                # the latest (a write within another's commit is delivered before it)
                last_version[name] = max(last_version.get(name, 0),
                                         int(event.object["metadata"]["resourceVersion"]))
                if not controlled:
                    kept.add(name)
                ip = (event.object.get("spec") or {}).get("clusterIP")
                found.cluster_ips.setdefault(name, set()).add(str(ip))
        changed = ready.apply(event)
        if changed is not None:
            note(changed, at)

    with store.lock:
        ready.seed(store, namespace)
        start = clock.now()
        for name in services:
            svc = store.find(kinds.SERVICE, namespace, name)
            if svc is None:
                absent_since[name] = start
            else:
                found.cluster_ips.setdefault(name, set()).add(str(svc["spec"].get("clusterIP")))
                if not _controlled(svc):
                    kept.add(name)
                last_version[name] = int(svc["metadata"]["resourceVersion"])
            note(name, start)
        store.subscribe(record)
    try:
        yield found
    finally:
        store.unsubscribe(record)
        with store.lock:
            end = clock.now()
            for name, since in absent_since.items():
                found.absent_seconds[name] = found.absent_seconds.get(name, 0.0) + end - since
            for key, since in gap_since.items():
                found.node_gaps[key] = max(found.node_gaps.get(key, 0.0), end - since)


def _controlled(obj: dict[str, Any]) -> bool:
    return any(r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])
