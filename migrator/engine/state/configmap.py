"""The state ConfigMap's layout (docs/design.md, "State and resume"): which keys hold what, and
how one is built, checked and decoded. Name and managed-by label come from the catalog
(plans/common.yaml).

- label `<managed_by.key>: <managed_by.value>`: a ConfigMap of the state's name without it is
  someone else's and is never read or written;
- `data["state.json"]`: the document as canonical JSON; `data["state.sha256"]`: the SHA-256 of
  exactly those bytes, so a hand edit or truncation is refused (`StateCorrupt`) instead of
  trusted;
- annotations `dcgm-migrate/lock-holder|lock-acquired|lock-expires`: the run lock (`lock.py`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from migrator.engine.state.backends import ConfigMapAccess
from migrator.errors import StateConflict, StateCorrupt
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


def decode(text: str) -> Any:
    """What `encode` wrote (ValueError for text that is not JSON)."""
    return json.loads(text)


def checksum(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


EMPTY_TEXT = encode({})
EMPTY_SHA = checksum(EMPTY_TEXT)
MANAGED_BY = "app.kubernetes.io/managed-by=dcgm-migrate"  # plans/common.yaml's, for hints


def restore_hint(namespace: str, name: str, managed_by: str = MANAGED_BY) -> str:
    """How to put the backup of the two data keys back (docs/runbook.md, 'Restoring the
    state'), as commands that work as written in the directory holding the backup."""
    return ("restore it from your backup of state.json and state.sha256 (docs/runbook.md, "
            f"'Restoring the state'): `kubectl -n {namespace} create configmap {name} "
            "--from-file=state.json --from-file=state.sha256`, then "
            f"`kubectl -n {namespace} label configmap {name} {managed_by}`")


def corrupt_hint(namespace: str, name: str, managed_by: str = MANAGED_BY) -> str:
    """What to do about a state the tool refuses to read. Deleting it alone is no way out:
    the cluster keeps the tool's marks, and `apply`/`rollback` then refuse a lost state, so
    the way that works is to put the backup in its place."""
    return (f"inspect it with `kubectl -n {namespace} get configmap {name} -o yaml`; undo "
            f"the edit, or replace it: `kubectl -n {namespace} delete configmap {name}`, then "
            f"{restore_hint(namespace, name, managed_by)} (without a backup, apply and "
            "rollback refuse the lost state: docs/runbook.md, 'Restoring the state')")


class ConfigMapFormat:
    """Building, checking and decoding the state ConfigMap behind `backend`."""

    def __init__(self, backend: ConfigMapAccess, managed_by: Label) -> None:
        self._cm = backend
        self._managed_by = managed_by

    def _kubectl(self) -> str:
        return f"kubectl -n {self._cm.namespace} get configmap {self._cm.name} -o yaml"

    def _corrupt(self, what: str) -> StateCorrupt:
        label = f"{self._managed_by.key}={self._managed_by.value}"
        return StateCorrupt(
            f"The migration state in ConfigMap {self._cm.where} {what}, so dcgm-migrate "
            "refuses to use it.",
            corrupt_hint(self._cm.namespace, self._cm.name, label),
        )

    def _check_ours(self, cm: Obj) -> None:
        labels = (cm.get("metadata") or {}).get("labels") or {}
        key, value = self._managed_by.key, self._managed_by.value
        if labels.get(key) != value and self._holds_a_state(cm):
            raise StateCorrupt(  # ours, its label removed (a hand edit, a copy without it)
                f"ConfigMap {self._cm.where} holds a dcgm-migrate state (its checksum matches)"
                f" but lost its label {key}={value}, so it is not read or written until the "
                "label is back.",
                f"restore the label: `kubectl -n {self._cm.namespace} label configmap "
                f"{self._cm.name} {key}={value}`, then run the command again")
        if labels.get(key) != value:
            raise StateCorrupt(
                f"ConfigMap {self._cm.where} exists but was not created by dcgm-migrate "
                f"(no label {key}={value}), so it is never read or written.",
                f"inspect it with `{self._kubectl()}`; rename or delete it if it is not needed, "
                "or run the migration in another namespace",
            )

    @staticmethod
    def _holds_a_state(cm: Obj) -> bool:
        """Both data keys of a state, the checksum matching a document that names its schema
        and namespace: only this tool writes that, so such a ConfigMap is ours whatever its
        labels say."""
        data = cm.get("data") or {}
        text = data.get(STATE_KEY)
        if not isinstance(text, str) or data.get(CHECKSUM_KEY) != checksum(text):
            return False
        try:
            document = decode(text)
        except ValueError:
            return False
        return isinstance(document, dict) and {"schema", "namespace"} <= document.keys()

    def _check_not_terminating(self, cm: Obj) -> None:
        """A state ConfigMap being deleted vanishes once its finalizers go: never lock or write
        it (the run's record would vanish with it)."""
        why = o.terminating(cm)
        if why is None:
            return
        raise StateConflict(
            f"ConfigMap {self._cm.where} holding the migration state is being deleted ({why}), "
            "so dcgm-migrate will not lock or write it.",
            f"keep a copy first (`{self._kubectl()}`); if the deletion was meant to reset the "
            "migration, let it finish (remove the finalizers if nothing needs them) and run "
            "again; otherwise ask whoever deleted it",
        )

    def _decode(self, cm: Obj) -> tuple[dict[str, Any], str]:
        """(document, its checksum) of a ConfigMap of ours; StateCorrupt when it cannot be."""
        self._check_ours(cm)
        data = cm.get("data") or {}
        text = data.get(STATE_KEY)
        if not isinstance(text, str):
            raise self._corrupt(f"has no {STATE_KEY} key")
        sha = checksum(text)
        if data.get(CHECKSUM_KEY) != sha:
            raise self._corrupt(
                f"does not match its checksum ({CHECKSUM_KEY}): it was edited by hand or "
                "corrupted"
            )
        try:
            document = decode(text)
        except ValueError:
            raise self._corrupt(f"holds invalid JSON in {STATE_KEY}") from None
        if not isinstance(document, dict):
            raise self._corrupt(f"holds JSON that is not an object in {STATE_KEY}")
        return document, sha

    def _stored_sha(self, cm: Obj | None) -> str | None:
        if cm is None:
            return None
        return str(((cm.get("data") or {}).get(CHECKSUM_KEY)) or "") or None

    def _new_configmap(self, text: str, annotations: dict[str, str]) -> Obj:
        meta: Obj = {
            "name": self._cm.name,
            "namespace": self._cm.namespace,
            "labels": {self._managed_by.key: self._managed_by.value},
        }
        if annotations:
            meta["annotations"] = annotations
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {STATE_KEY: text, CHECKSUM_KEY: checksum(text)},
        }
