"""Which pods each Service selects, and which of them changed: the index the `endpoints` and
`endpointslices` controllers keep between syncs.

It holds the pods by namespace, the selector Services by namespace, each Service's selector
and members (the names of the pods it selects), and what the next pass has to sync: `full`
Services (rebuilt from all their members) and `partial` ones (only the named pods changed; an
empty set is a re-check with no pod changed). A pod event re-matches the pod against the
Services of its namespace only, and marks it in each that selected it before or after.

What a controller does with a Service (the Service objects, their signatures, what it writes)
stays with the controller; so does which pod events it lets through (`signature`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dcgm_sim.controllers import pods as P
from dcgm_sim.labelselectors import Selector, selector_from_set
from dcgm_sim.store import Event, StoreError

Obj = dict[str, Any]
SvcKey = tuple[str, str]


class Membership:
    """Pods, selectors and members per Service, and the Services the next pass syncs.

    `signature`, if given: a MODIFIED pod whose signature did not change is stored, but not
    re-matched nor marked changed."""

    def __init__(self, signature: Callable[[Mapping[str, Any] | None], Any] | None = None
                 ) -> None:
        self._signature = signature
        self._pods: dict[str, dict[str, Obj]] = {}  # namespace -> pod name -> pod
        self._selectors: dict[SvcKey, Selector] = {}
        self._by_ns: dict[str, set[str]] = {}  # namespace -> names of its selector Services
        self._members: dict[SvcKey, set[str]] = {}
        self.full: set[SvcKey] = set()
        self.partial: dict[SvcKey, set[str]] = {}

    # ---- reading -----------------------------------------------------------------------------

    def selects(self, key: SvcKey) -> bool:
        """Whether `key` is a selector Service this index matches pods for."""
        return key in self._selectors

    def pods(self, namespace: str) -> dict[str, Obj]:
        """The namespace's pods by name (the index's own dict: read, do not change)."""
        return self._pods.get(namespace, {})

    def members(self, key: SvcKey) -> set[str]:
        """The names of the pods `key` selects (the index's own set: read, do not change)."""
        return self._members.get(key, set())

    # ---- pods --------------------------------------------------------------------------------

    def prime(self, pods: Iterable[Obj]) -> None:
        """The listed pods, before any Service is added."""
        for pod in pods:
            self._pods.setdefault(pod["metadata"]["namespace"], {})[pod["metadata"]["name"]] = pod

    def pod_changed(self, ev: Event) -> None:
        """A pod event: store (or drop) the pod, and mark it changed in every Service of its
        namespace that selected it before or selects it now."""
        pod = ev.object
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        deleted = ev.type == "DELETED"
        if deleted:
            self._pods.get(ns, {}).pop(name, None)
        else:
            self._pods.setdefault(ns, {})[name] = pod
            if (self._signature is not None and ev.type == "MODIFIED"
                    and self._signature(ev.old) == self._signature(pod)):
                return
        labels = P.labels_of(pod)
        for svc_name in self._by_ns.get(ns, ()):
            key = (ns, svc_name)
            members = self._members.setdefault(key, set())
            match = not deleted and self._selectors[key].matches(labels)
            was = name in members
            if match:
                members.add(name)
            else:
                members.discard(name)
            if match or was:
                self.partial.setdefault(key, set()).add(name)

    # ---- Services ----------------------------------------------------------------------------

    def select(self, key: SvcKey, selector: Mapping[str, str]) -> None:
        """`key` selects with `selector` (new, or a changed selector): its members are matched
        again over the namespace's pods, and it is synced in full."""
        sel = self._selectors[key] = selector_from_set(selector)
        self._by_ns.setdefault(key[0], set()).add(key[1])
        self._members[key] = {name for name, pod in self._pods.get(key[0], {}).items()
                              if sel.matches(P.labels_of(pod))}
        self.full.add(key)

    def forget(self, key: SvcKey) -> None:
        """`key` selects nothing (gone, or lost its selector): nothing of it is kept or
        synced."""
        self._selectors.pop(key, None)
        self._members.pop(key, None)
        self._by_ns.get(key[0], set()).discard(key[1])
        self.full.discard(key)
        self.partial.pop(key, None)

    def recheck(self, key: SvcKey) -> None:
        """Sync `key` at the next pass even if none of its pods changed."""
        self.partial.setdefault(key, set())

    def sync_pending(self, sync: Callable[[SvcKey, set[str] | None], None],
                     failed: Callable[[SvcKey, StoreError], None]) -> None:
        """Run `sync(key, scope)` for every Service marked so far, in key order: `scope` None
        for a full sync, else the pods changed. Marks made meanwhile are the next pass's; a
        StoreError goes to `failed` (which re-marks the Service) and the pass goes on."""
        full, partial = self.full, self.partial
        self.full, self.partial = set(), {}
        for key in sorted(full | set(partial)):
            try:
                sync(key, None if key in full else partial[key])
            except StoreError as err:
                failed(key, err)
