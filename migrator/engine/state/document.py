"""The state document (schema 1) kept in the state ConfigMap: stack, plan fingerprint, per-phase
status and timestamps, per-step records (intent before the write, done after; the originals
rollback needs), endpoint baselines, the last error and a bounded history. Nothing secret;
timestamps come from the run's injected Clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from migrator import phases as phase_modules
from migrator.engine.clock import Clock, SystemClock
from migrator.engine.state.configmap import corrupt_hint
from migrator.errors import StateCorrupt
from migrator.model.phasestatus import PhaseStatus
from migrator.model.retiring import GONE, HANDED_OVER, REPLACED, REVERTED
from migrator.model.steps import SetSelector, Step, from_record, to_record

SCHEMA_VERSION = 1
HISTORY_LIMIT = 50
RETIRED = (GONE, REVERTED, REPLACED, HANDED_OVER)  # step records model/retiring.py set aside


def stamp(moment: datetime) -> str:
    """A recorded time: UTC, whole seconds, `Z` (the schema-1 format)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StepRecord:
    step: dict[str, Any]
    status: str  # intent | done | skipped
    at: str

    @property
    def id(self) -> str:
        return from_record(self.step).id


@dataclass
class PhaseRecord:
    number: int
    status: PhaseStatus = PhaseStatus.PENDING  # stored as its string (schema 1)
    started: str | None = None
    finished: str | None = None
    steps: list[StepRecord] = field(default_factory=list)
    undo: list[StepRecord] = field(default_factory=list)  # rollback's own progress
    baselines: list[dict[str, Any]] = field(default_factory=list)
    wrote_labels: bool = False
    error: str | None = None
    clock: Clock = field(default_factory=SystemClock, repr=False, compare=False)

    @property
    def name(self) -> str:
        return phase_modules.by_number(self.number).NAME

    def recorded(self) -> dict[str, dict[str, Any]]:
        """Step id → step record: the originals to resume with (not a retired record's)."""
        return {r.id: r.step for r in self.steps if r.status not in RETIRED}

    def done_steps(self) -> list[Step]:
        """Steps that were written (or may have been: intent without done), oldest first."""
        return [from_record(r.step) for r in self.steps if r.status in ("intent", "done")]

    def reverted_steps(self) -> list[Step]:
        """Operator-owned switches the operator reverted (model/retiring.py)."""
        return [from_record(r.step) for r in self.steps if r.status == "reverted"]

    def mark(self, step: Step, status: str, *, undo: bool = False) -> None:
        records = self.undo if undo else self.steps
        for r in records:
            if r.id == step.id:
                new = to_record(step)
                if r.status in RETIRED or _extends(new, r.step):
                    r.step = new  # a new object's own originals, or more labels of the same
                r.status, r.at = status, stamp(self.clock.now())
                return
        records.append(StepRecord(to_record(step), status, stamp(self.clock.now())))


def _status(text: Any) -> PhaseStatus:
    try:
        return PhaseStatus(text)
    except ValueError:
        raise ValueError(f"unknown phase status {text!r}") from None


def _rows(records: list[StepRecord]) -> list[dict[str, Any]]:
    return [{"status": r.status, "at": r.at, "step": r.step} for r in records]


def _records(rows: Any) -> list[StepRecord]:
    return [StepRecord(dict(r["step"]), str(r["status"]), str(r["at"])) for r in rows or []]


def _extends(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """`new` is `old` with more labels (phase 1 again with `--prepare-for`), same originals."""
    if new.get("type") != old.get("type") or new.get("type") != "set-labels":
        return False
    keys = ("meta_before", "template_before", "meta_after", "template_after")
    return new != old and all(
        all(k in new[f] and new[f][k] == v for k, v in (old.get(f) or {}).items())
        for f in keys)


@dataclass
class State:
    namespace: str
    stack: str = "none"
    plan_fingerprint: str | None = None
    phases: dict[int, PhaseRecord] = field(
        default_factory=lambda: {n: PhaseRecord(n) for n in phase_modules.numbers()})
    last_error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    stack_change: dict[str, Any] | None = None  # engine/stackchange.py's record
    created: str = ""  # "": now, on the clock
    updated: str = ""
    clock: Clock = field(default_factory=SystemClock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.created = self.created or self.stamp()
        self.updated = self.updated or self.stamp()
        for record in self.phases.values():
            record.clock = self.clock

    def stamp(self) -> str:
        """Now, as recorded in the document."""
        return stamp(self.clock.now())

    def phase(self, number: int) -> PhaseRecord:
        return self.phases[number]

    def stack_changed(self, live: str) -> bool:
        """The stack running now is not the one the completed phases were planned for."""
        completed = any(p.status is PhaseStatus.COMPLETED for p in self.phases.values())
        return completed and self.stack not in ("none", live) and live != "none"

    def completed_phase(self) -> int:
        """The highest phase recorded completed (0: none): what a fix restores up to."""
        return max((n for n, p in self.phases.items() if p.status is PhaseStatus.COMPLETED),
                   default=0)

    def foreign_allowed(self) -> frozenset[str]:
        """Services a holding switch let select foreign pods (`--allow-foreign-pods`)."""
        return frozenset(s.service for p in self.phases.values() if p.status.applied
                         for s in p.done_steps()
                         if isinstance(s, SetSelector) and s.allow_foreign)

    def log(self, event: str, **details: Any) -> None:
        self.history.append({"at": self.stamp(), "event": event, **details})
        del self.history[:-HISTORY_LIMIT]

    def to_document(self) -> dict[str, Any]:
        self.updated = self.stamp()
        return {
            "schema": SCHEMA_VERSION, "namespace": self.namespace, "stack": self.stack,
            "planFingerprint": self.plan_fingerprint, "created": self.created,
            "updated": self.updated, "lastError": self.last_error,
            "phases": [
                {"number": p.number, "name": p.name, "status": p.status.value,
                 "started": p.started, "finished": p.finished, "error": p.error,
                 "wroteLabels": p.wrote_labels, "baselines": p.baselines,
                 "steps": _rows(p.steps), "undo": _rows(p.undo)}
                for p in sorted(self.phases.values(), key=lambda p: p.number)
            ],
            "history": self.history,
            **({"stackChange": self.stack_change} if self.stack_change is not None else {}),
        }

    @staticmethod
    def from_document(doc: dict[str, Any], clock: Clock | None = None,
                      where: tuple[str, str] = ("gpu-operator", "dcgm-migrate-state")) -> State:
        """The state a document holds; StateCorrupt, with the fix for the ConfigMap `where`
        (namespace, name), when it is not one this version reads."""
        if doc.get("schema") != SCHEMA_VERSION:
            raise StateCorrupt(
                f"The state ConfigMap has schema {doc.get('schema')!r}, but this tool reads "
                f"schema {SCHEMA_VERSION}.",
                "use the dcgm-migrate version that wrote it (`dcgm-migrate --version` names "
                f"this one), or {corrupt_hint(*where)}")
        try:
            phases = {}
            for p in doc["phases"]:
                phases[int(p["number"])] = record = PhaseRecord(
                    number=int(p["number"]), status=_status(p["status"]), started=p.get("started"),
                    finished=p.get("finished"), error=p.get("error"),
                    wrote_labels=bool(p.get("wroteLabels")),
                    baselines=list(p.get("baselines") or []),
                    steps=_records(p.get("steps")), undo=_records(p.get("undo")))
                for r in [*record.steps, *record.undo]:
                    from_record(r.step)  # validates the record's shape
            return State(namespace=str(doc["namespace"]), stack=str(doc["stack"]),
                         plan_fingerprint=doc.get("planFingerprint"), phases=phases,
                         last_error=doc.get("lastError"), history=list(doc.get("history") or []),
                         stack_change=doc.get("stackChange"),
                         created=str(doc.get("created") or ""),
                         updated=str(doc.get("updated") or ""),
                         clock=clock or SystemClock())
        except (KeyError, TypeError, ValueError) as exc:
            raise StateCorrupt(
                f"The state ConfigMap does not hold a valid dcgm-migrate state ({exc}).",
                corrupt_hint(*where)) from exc
