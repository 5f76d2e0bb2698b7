"""One ConfigMap, read and written like the API does it: what the state store works over.

`KubeConfigMap` goes through the kube choke point; the tests' in-memory one
(tests/helpers/memorystate.py) imitates the API server's concurrency errors, so the state
store's logic is the same code in both.
"""

from __future__ import annotations

from typing import Any, Protocol

from migrator.kube import Kube
from migrator.model import kinds

Obj = dict[str, Any]


class ConfigMapAccess(Protocol):
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
