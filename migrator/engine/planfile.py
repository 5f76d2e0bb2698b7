"""The plan file (`plan --out`, `apply --plan`) under a checksum: a modified file is refused
(exit 2), a cluster changed since is named field by field (exit 4)."""

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
              objects: Mapping[str, Mapping[str, str]] | None = None,
              options: Mapping[str, Any] | None = None) -> None:
    """The report, its fingerprint's fields per object and the planning options, checksummed."""
    body: dict[str, Any] = {"format": PLAN_FORMAT, "report": report}
    if objects is not None:
        body["objects"] = {name: dict(fields) for name, fields in objects.items()}
    if options is not None:
        body["options"] = dict(options)
    doc = {**body, "checksum": _plan_checksum(body)}
    try:
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    except OSError as exc:
        raise UsageError(f"Cannot write the plan to {path}: {exc.strerror}.",
                         "choose a writable path for --out") from exc


def flags(options: Mapping[str, Any]) -> list[str]:
    """Planning options as their command-line flags (a string option with its value)."""
    out: list[str] = []
    for key, value in sorted(options.items()):
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, str) and value:
            out += [flag, value]
    return out


STALE_SHOWN = 5  # changed fields a stale-plan error names; the rest are counted


def check_plan_file(path: Path, snap: Snapshot, namespace: str, phase: int,
                    options: Mapping[str, Any]) -> None:
    """The plan file is ours (under its checksum), for this namespace and these `options` (if
    it records them), and the cluster has not changed since."""
    quoted = shlex.quote(str(path))
    fresh = f"`dcgm-migrate plan --out {quoted}`"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"Plan file {path} does not exist.",
                         f"save one with {fresh}") from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"Plan file {path} is not a readable dcgm-migrate plan.",
                         f"save a fresh one with {fresh}") from exc
    if not isinstance(doc, dict) or doc.get("format") != PLAN_FORMAT:
        raise UsageError(f"Plan file {path} is not a dcgm-migrate plan.",
                         f"save one with {fresh}")
    body = {k: v for k, v in doc.items() if k != "checksum"}
    if doc.get("checksum") != _plan_checksum(body):
        raise UsageError(f"Plan file {path} was modified after it was saved (checksum "
                         "mismatch).", f"save a fresh one with {fresh}")
    saved: dict[str, Any] = doc["report"]
    if saved.get("namespace") != namespace:
        raise UsageError(f"Plan file {path} was made for namespace {saved.get('namespace')!r}, "
                         f"not {namespace!r}.", f"pass the matching namespace: "
                         f"`-n {saved.get('namespace')}`, or make a new plan for this one: "
                         f"`dcgm-migrate plan --out {quoted} -n {namespace}`")
    planned = doc.get("options")
    if isinstance(planned, dict) and flags(planned) != flags(options):
        made, given = flags(planned), flags(options)
        raise UsageError(
            f"Plan file {path} was made with {' '.join(made) or 'no planning options'}, but "
            f"this apply passes {' '.join(given) or 'none'}: what would run is not the plan "
            "that was reviewed.",
            f"apply it with its options: `dcgm-migrate apply --phase {phase} --plan {quoted} "
            f"{' '.join([*made, '-n', namespace])}`, or plan with these: `dcgm-migrate plan "
            f"--out {quoted} {' '.join([*given, '-n', namespace])}`")
    if saved.get("fingerprint") != snap.fingerprint():
        what = ""
        if isinstance(doc.get("objects"), dict):  # plans saved before it: no names
            changed = changed_fields(doc["objects"], snap.fingerprint_fields())
            more = len(changed) - STALE_SHOWN
            what = (": changed " + ", ".join(changed[:STALE_SHOWN])
                    + (f" and {more} more" if more > 0 else "")) if changed else ""
        raise StalePlan(f"The cluster changed since plan {path} was saved, so it is "
                        f"stale{what}.",
                        f"save a fresh plan with `dcgm-migrate plan --out {quoted} -n "
                        f"{namespace}`, review it, then apply that one: `dcgm-migrate apply "
                        f"--phase {phase} --plan {quoted} -n {namespace}`")
