"""The state store over an in-memory ConfigMap with the API server's optimistic concurrency
(a resourceVersion per write, 409 on a stale one, AlreadyExists on a second create): the
product's store logic (`ConfigMapState`) on a test double, for unit tests of the engine."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.state.lock import HolderCheck
from migrator.engine.state.store import ConfigMapState
from migrator.errors import APIAlreadyExists, APIConflict, APINotFound
from migrator.model.stacks import Common, load_catalog

Obj = dict[str, Any]


class MemoryConfigMap:
    """An in-memory ConfigMap with the API server's optimistic concurrency. Thread-safe."""

    def __init__(self, namespace: str = "gpu-operator", name: str = "dcgm-migrate-state") -> None:
        self.namespace = namespace
        self.name = name
        self._lock = threading.Lock()
        self._obj: Obj | None = None
        self._rv = 0
        self.writes = 0

    @property
    def object(self) -> Obj | None:
        """A copy of the stored ConfigMap."""
        with self._lock:
            return copy.deepcopy(self._obj)

    def _store(self, obj: Obj) -> Obj:
        self._rv += 1
        self.writes += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._obj = obj
        return copy.deepcopy(obj)

    def get(self) -> Obj | None:
        return self.object

    def create(self, obj: Obj) -> Obj:
        with self._lock:
            if self._obj is not None:
                raise APIAlreadyExists(f'configmaps "{self.name}" already exists.')
            obj = copy.deepcopy(obj)
            obj["metadata"].setdefault("uid", "memory-0")
            return self._store(obj)

    def replace(self, obj: Obj) -> Obj:
        with self._lock:
            if self._obj is None:
                raise APINotFound(f'configmaps "{self.name}" not found.', status=404)
            sent = obj["metadata"].get("resourceVersion")
            if sent and sent != self._obj["metadata"]["resourceVersion"]:
                raise APIConflict(
                    f'Operation cannot be fulfilled on configmaps "{self.name}": the object '
                    "has been modified.", status=409, reason="Conflict",
                )
            return self._store(copy.deepcopy(obj))

    def edit(self, change: Callable[[Obj], None]) -> Obj:
        """Change the stored ConfigMap as another client would (`kubectl edit`)."""
        with self._lock:
            if self._obj is None:
                raise APINotFound(f'configmaps "{self.name}" not found.', status=404)
            obj = copy.deepcopy(self._obj)
            change(obj)
            return self._store(obj)

    def delete(self) -> None:
        with self._lock:
            self._obj = None


class MemoryStateStore(ConfigMapState):
    """The store's behaviour over an in-memory ConfigMap.

    Two stores built on the same `configmap` act like two processes sharing a cluster;
    `configmap.edit(...)` plays a second client (kubectl edit) changing it between calls.
    """

    def __init__(
        self, configmap: MemoryConfigMap | None = None, clock: Clock | None = None,
        common: Common | None = None, holders: HolderCheck | None = None,
    ) -> None:
        common = common or load_catalog().common
        self.configmap = configmap or MemoryConfigMap(name=common.state_configmap)
        super().__init__(self.configmap, common.managed_by, clock or SystemClock(), holders)
