"""The state ConfigMap's layout (docs/design.md, "State and resume"): the catalog's managed-by
label (without it, someone else's: never read or written), `state.json` (canonical JSON) and
`state.sha256` (its SHA-256, so a hand edit is refused); the lock's annotations: `lock.py`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from migrator.errors import StateConflict, StateCorrupt
from migrator.kube import Kube
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.stacks import Label

Obj = dict[str, Any]

STATE_KEY = "state.json"
CHECKSUM_KEY = "state.sha256"
MAX_DOCUMENT_BYTES = 900 * 1024  # a ConfigMap holds at most 1 MiB in all


@dataclass(frozen=True)
class StoredState:
    """A loaded or saved document and the ConfigMap resourceVersion it was read or written at."""

    document: dict[str, Any]
    version: str


def encode(document: dict[str, Any]) -> str:
    """Canonical JSON: sorted keys, no spaces, so equal documents are equal bytes."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


EMPTY_TEXT = encode({})
EMPTY_SHA = checksum(EMPTY_TEXT)
MANAGED_BY = "app.kubernetes.io/managed-by=dcgm-migrate"  # plans/common.yaml's, for hints


def restore_hint(namespace: str, name: str, managed_by: str = MANAGED_BY) -> str:
    return ("restore it from your backup of state.json and state.sha256 (docs/runbook.md, "
            f"'Restoring the state'): `kubectl -n {namespace} create configmap {name} "
            "--from-file=state.json --from-file=state.sha256`, then "
            f"`kubectl -n {namespace} label configmap {name} {managed_by}`")


def corrupt_hint(namespace: str, name: str, managed_by: str = MANAGED_BY) -> str:
    """Deleting a refused state is no way out (the cluster keeps the tool's marks)."""
    return (f"inspect it with `kubectl -n {namespace} get configmap {name} -o yaml`; undo "
            f"the edit, or replace it: `kubectl -n {namespace} delete configmap {name}`, then "
            f"{restore_hint(namespace, name, managed_by)} (without a backup, apply and "
            "rollback refuse the lost state: docs/runbook.md, 'Restoring the state')")


class ConfigMapAccess(Protocol):
    """get/create/replace of one named ConfigMap, with the API's concurrency errors."""

    namespace: str
    name: str

    def get(self) -> Obj | None: ...
    def create(self, obj: Obj) -> Obj: ...  # APIAlreadyExists when it exists
    def replace(self, obj: Obj) -> Obj: ...  # APIConflict on a stale resourceVersion


class KubeConfigMap:
    """The ConfigMap in the cluster (the tests' one is in memory: tests/helpers/memorystate)."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self._kube, self.namespace, self.name = kube, namespace, name

    def get(self) -> Obj | None:
        return self._kube.get(kinds.CONFIGMAP, self.name, self.namespace)

    def create(self, obj: Obj) -> Obj:
        return self._kube.create(obj)

    def replace(self, obj: Obj) -> Obj:
        return self._kube.replace(obj)


class ConfigMapFormat:
    """Building, checking and decoding the state ConfigMap behind `backend`."""

    def __init__(self, backend: ConfigMapAccess, managed_by: Label) -> None:
        self._cm = backend
        self._managed_by = managed_by
        self._where = f"{backend.namespace}/{backend.name}"  # as messages name it

    def _kubectl(self) -> str:
        return f"kubectl -n {self._cm.namespace} get configmap {self._cm.name} -o yaml"

    def _check_ours(self, cm: Obj) -> None:
        labels = (cm.get("metadata") or {}).get("labels") or {}
        key, value = self._managed_by.key, self._managed_by.value
        if labels.get(key) == value:
            return
        document = _document(cm)  # a valid one naming its schema and namespace: ours anyway
        if isinstance(document, dict) and {"schema", "namespace"} <= document.keys():
            raise StateCorrupt(
                f"ConfigMap {self._where} holds a dcgm-migrate state (its checksum matches)"
                f" but lost its label {key}={value}, so it is not read or written until the "
                "label is back.",
                f"restore the label: `kubectl -n {self._cm.namespace} label configmap "
                f"{self._cm.name} {key}={value}`, then run the command again")
        raise StateCorrupt(
            f"ConfigMap {self._where} exists but was not created by dcgm-migrate "
            f"(no label {key}={value}), so it is never read or written.",
            f"inspect it with `{self._kubectl()}`; rename or delete it if it is not needed, "
            "or run the migration in another namespace")

    def _check_not_terminating(self, cm: Obj) -> None:
        """Never lock or write a state ConfigMap being deleted (the record would vanish)."""
        why = o.terminating(cm)
        if why is not None:
            raise StateConflict(
                f"ConfigMap {self._where} holding the migration state is being deleted "
                f"({why}), so dcgm-migrate will not lock or write it.",
                f"keep a copy first (`{self._kubectl()}`); if the deletion was meant to reset the"
                " migration, let it finish (remove the finalizers if nothing needs them) and run"
                " again; otherwise ask whoever deleted it")

    def _decode(self, cm: Obj) -> dict[str, Any]:
        """The document of a ConfigMap of ours; StateCorrupt when it cannot be read."""
        self._check_ours(cm)
        document = _document(cm)
        if isinstance(document, str):
            label = f"{self._managed_by.key}={self._managed_by.value}"
            raise StateCorrupt(f"The migration state in ConfigMap {self._where} {document}, "
                               "so dcgm-migrate refuses to use it.",
                               corrupt_hint(self._cm.namespace, self._cm.name, label))
        return document

    def _new_configmap(self, text: str, annotations: dict[str, str]) -> Obj:
        meta: Obj = {"name": self._cm.name, "namespace": self._cm.namespace,
                     "labels": {self._managed_by.key: self._managed_by.value}}
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {STATE_KEY: text, CHECKSUM_KEY: checksum(text)}}


def stored_sha(cm: Obj | None) -> str | None:
    """The checksum a ConfigMap carries (None: no ConfigMap, or none)."""
    return str(((cm or {}).get("data") or {}).get(CHECKSUM_KEY) or "") or None


def _document(cm: Obj) -> dict[str, Any] | str:
    """The document a ConfigMap's data holds under its checksum, or what is wrong with it."""
    data = cm.get("data") or {}
    text = data.get(STATE_KEY)
    if not isinstance(text, str):
        return f"has no {STATE_KEY} key"
    if data.get(CHECKSUM_KEY) != checksum(text):
        return f"does not match its checksum ({CHECKSUM_KEY}): it was edited by hand or corrupted"
    try:
        document = json.loads(text)
    except ValueError:
        return f"holds invalid JSON in {STATE_KEY}"
    return document if isinstance(document, dict) else (
        f"holds JSON that is not an object in {STATE_KEY}")
