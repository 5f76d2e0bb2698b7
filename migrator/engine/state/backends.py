"""One ConfigMap, read and written like the API does it: the state store's backends.

`KubeConfigMap` goes through the kube choke point; `MemoryConfigMap` imitates the API server
for unit tests (a resourceVersion per write, 409 on a stale one, AlreadyExists on a second
create), so the state store's logic is the same code in both.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any, Protocol

from migrator.errors import APIAlreadyExists, APIConflict, APINotFound
from migrator.kube import Kube
from migrator.model import kinds

Obj = dict[str, Any]


class Backend(Protocol):
    """get/create/replace of one named ConfigMap, with the API's concurrency errors."""

    namespace: str
    name: str

    @property
    def where(self) -> str: ...
    def get(self) -> Obj | None: ...
    def create(self, obj: Obj) -> Obj: ...  # APIAlreadyExists when it exists
    def replace(self, obj: Obj) -> Obj: ...  # APIConflict on a stale resourceVersion


class KubeConfigMap:
    """The ConfigMap in the cluster."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self._kube = kube
        self.namespace = namespace
        self.name = name

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    def get(self) -> Obj | None:
        return self._kube.get(kinds.CONFIGMAP, self.name, self.namespace)

    def create(self, obj: Obj) -> Obj:
        return self._kube.create(obj)

    def replace(self, obj: Obj) -> Obj:
        return self._kube.replace(obj)


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
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

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
