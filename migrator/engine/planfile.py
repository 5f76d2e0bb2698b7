"""The plan file (`plan --out`, `apply --plan`): the plan report's document and what its
fingerprint covers per object, under a checksum, so a modified file is refused (exit 2) and a
cluster that changed since is named field by field (exit 4)."""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from migrator.errors import StalePlan, UsageError
from migrator.model.snapshot import Snapshot, changed_fields

PLAN_FORMAT = "dcgm-migrate/plan-v1"


def _plan_checksum(body: dict[str, Any]) -> str:
    raw = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()


def save_plan(path: Path, report: dict[str, Any],
              objects: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """The plan file: the report's document, and what its fingerprint covers per object and
    field (`objects`, so a stale plan names what changed), under a checksum."""
    body: dict[str, Any] = {"format": PLAN_FORMAT, "report": report}
    if objects is not None:
        body["objects"] = {name: dict(fields) for name, fields in objects.items()}
    doc = {**body, "checksum": _plan_checksum(body)}
    try:
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise UsageError(f"Cannot write the plan to {path}: {exc.strerror}.",
                         "choose a writable path for --out") from exc


def _read_plan(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"Plan file {path} does not exist.",
                         "save one with `dcgm-migrate plan --out FILE`") from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"Plan file {path} is not a readable dcgm-migrate plan.",
                         "save a fresh one with `dcgm-migrate plan --out FILE`") from exc
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise UsageError(f"Plan file {path} is not a dcgm-migrate plan.",
                         "save one with `dcgm-migrate plan --out FILE`")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if doc.get("checksum") != _plan_checksum(body):
        raise UsageError(f"Plan file {path} was modified after it was saved (checksum "
                         "mismatch).", "save a fresh one with `dcgm-migrate plan --out FILE`")
    return doc


STALE_SHOWN = 5  # changed fields a stale-plan error names; the rest are counted


def check_plan_file(path: Path, snap: Snapshot, namespace: str, phase: int) -> None:
    doc = _read_plan(path)
    saved: dict[str, Any] = doc["report"]
    if saved.get("namespace") != namespace:
        raise UsageError(f"Plan file {path} was made for namespace {saved.get('namespace')!r}, "
                         f"not {namespace!r}.", "pass the matching -n, or make a new plan")
    if saved.get("fingerprint") != snap.fingerprint():
        what = ""
        if isinstance(doc.get("objects"), dict):  # plans saved before it: no names
            changed = changed_fields(doc["objects"], snap.fingerprint_fields())
            more = len(changed) - STALE_SHOWN
            what = (": changed " + ", ".join(changed[:STALE_SHOWN])
                    + (f" and {more} more" if more > 0 else "")) if changed else ""
        quoted = shlex.quote(str(path))
        raise StalePlan(f"The cluster changed since plan {path} was saved, so it is "
                        f"stale{what}.",
                        f"save a fresh plan with `dcgm-migrate plan --out {quoted} -n "
                        f"{namespace}`, review it, then apply that one: `dcgm-migrate apply "
                        f"--phase {phase} --plan {quoted} -n {namespace}`")
