"""Services' ready endpoints, followed through the sim's own commits.

End-to-end tests that measure what a Service's clients saw during a change (its fewest ready
endpoints, its fewest nodes with one, the intervals it had none) read it from the store's
commits rather than by sampling: a sampling thread misses a dip shorter than its period and a
busy machine stretches one. `ReadyEndpoints` starts from the store as it is and takes in every
committed change of the Services and their EndpointSlices after that, live (`follow`) or
replayed from the store's event log (`apply`), so every committed state is seen once, in order.
An endpoint counts as ready unless its `ready` condition is false (absent means ready, as for a
slice's consumers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from dcgm_sim.store import Event, Store
from migrator.model import kinds
from migrator.model import objects as o

SERVICE_NAME = "kubernetes.io/service-name"


def ready_by_node(endpoint_slice: dict[str, Any]) -> dict[str, int]:
    """An EndpointSlice's ready endpoints per node ("" for an endpoint that names none)."""
    out: dict[str, int] = {}
    for ep in endpoint_slice.get("endpoints") or []:
        if (ep.get("conditions") or {}).get("ready") in (None, True):
            node = ep.get("nodeName", "")
            out[node] = out.get(node, 0) + 1
    return out


class ReadyEndpoints:
    """For each of some Services: whether it exists, its ready endpoints per node over all its
    EndpointSlices, and the fewest ready endpoints (and nodes with one) since `seed`."""

    def __init__(self, services: Iterable[str]) -> None:
        self._slices: dict[str, dict[str, dict[str, int]]] = {n: {} for n in services}
        self._exists: dict[str, bool] = {}
        self.lowest_ready: dict[str, int] = {}
        self.lowest_nodes: dict[str, int] = {}

    def seed(self, store: Store, namespace: str) -> None:
        """Start from the store as it is now (hold its lock to start at one commit exactly)."""
        for name in self._slices:
            self._exists[name] = store.find(kinds.SERVICE, namespace, name) is not None
        for sl in store.list(kinds.ENDPOINTSLICE, namespace)[0]:
            service = o.labels(sl).get(SERVICE_NAME, "")
            if service in self._slices:
                self._slices[service][o.name(sl)] = ready_by_node(sl)
        for name in self._slices:
            self._note(name)

    def apply(self, event: Event) -> str | None:
        """Take one committed change in; returns the Service it concerns, if one followed."""
        obj = event.object
        if event.resource.key == kinds.SERVICE.key and o.name(obj) in self._slices:
            self._exists[o.name(obj)] = event.type != "DELETED"
            return o.name(obj)
        if event.resource.key != kinds.ENDPOINTSLICE.key:
            return None
        service = o.labels(obj).get(SERVICE_NAME, "")
        if service not in self._slices:
            return None
        self._slices[service][o.name(obj)] = {} if event.type == "DELETED" else ready_by_node(obj)
        self._note(service)
        return service

    @contextmanager
    def follow(self, store: Store, namespace: str,
               on_change: Callable[[str], None] | None = None) -> Iterator[None]:
        """Seed, then apply every commit while the block runs (seeded and subscribed under the
        store's lock: no commit falls between). `on_change(service)` runs after each commit
        that concerns a followed Service, inside the commit."""
        def record(event: Event) -> None:
            service = self.apply(event)
            if service is not None and on_change is not None:
                on_change(service)

        with store.lock:
            self.seed(store, namespace)
            store.subscribe(record)
        try:
            yield
        finally:
            store.unsubscribe(record)

    def __repr__(self) -> str:
        return f"lowest ready {self.lowest_ready}, lowest nodes with one {self.lowest_nodes}"

    def exists(self, service: str) -> bool:
        return self._exists.get(service, False)

    def ready(self, service: str) -> int:
        """Ready endpoints now, over all of the Service's EndpointSlices."""
        return sum(self._per_node(service).values())

    def nodes(self, service: str) -> int:
        """Nodes with at least one ready endpoint now."""
        return sum(1 for count in self._per_node(service).values() if count)

    def per_node(self, service: str) -> dict[str, int]:
        """Ready endpoints per node now."""
        return self._per_node(service)

    def _per_node(self, service: str) -> dict[str, int]:
        per_node: dict[str, int] = {}
        for by_node in self._slices[service].values():
            for node, count in by_node.items():
                per_node[node] = per_node.get(node, 0) + count
        return per_node

    def _note(self, service: str) -> None:
        ready, nodes = self.ready(service), self.nodes(service)
        self.lowest_ready[service] = min(self.lowest_ready.get(service, ready), ready)
        self.lowest_nodes[service] = min(self.lowest_nodes.get(service, nodes), nodes)
