"""The verdict's vocabulary (model/outcome.py): a `Finding` per check and object, the `Verdict`
over them, the `Remedy` a phase answers for, and the `Need` of one stable name. Pure data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from migrator.model.gates import GateResult
from migrator.model.gates import named as named  # re-exported for the verdict's modules
from migrator.model.snapshot import PodView
from migrator.model.stacks import Component


class Remedy(Enum):
    """What a phase's `apply` puts right, so a finding names the phase that answers for it."""

    COMMON_LABELS = "common-labels"  # every DCGM / exporter pod carries its common label
    ALIASES = "aliases"  # the tool's stable names, and the scrape paths through them
    SELECTORS = "selectors"  # the stable names select by the common labels


Answers = Mapping[Remedy, int]  # remedy → the number of the phase whose apply makes it


@dataclass(frozen=True)
class Fixes:
    """The commands a finding's fix names. `completed`: the highest phase completed, so one
    `apply --phase N` restores all and never leaves a later completed phase broken."""

    answers: Answers
    completed: int = 0

    def phase(self, remedy: Remedy) -> int:
        return self.answers.get(remedy, 0)

    def apply(self, remedy: Remedy) -> str:
        """The command that puts `remedy` right, in backticks."""
        return f"`dcgm-migrate apply --phase {max(self.phase(remedy), self.completed)}`"

    def relabel(self, label: str) -> str:
        """Pods lack the common label a switched Service selects by: the runbook's answer."""
        n = self.phase(Remedy.SELECTORS)
        return (f"a Service selects by {label}, which these pods lack (the operator re-rendered "
                f"their DaemonSet without it): run `dcgm-migrate rollback --phase {n}` now, while "
                f"the old selectors still match every pod, then `dcgm-migrate apply --phase {n}` "
                "once the operator's rollout is done (docs/runbook.md, 'Before an operator "
                "upgrade or CR edit')")


# The checks whose failure misroutes or drops consumers' traffic, defined once: the verdict line
# names them first, docs/prometheusrule.yaml alerts on them, and any fails the verdict.
TRAFFIC_CHECKS = ("stable-name", "nodes-covered", "local-traffic", "no-foreign-endpoints",
                  "ports-served", "shared-endpoints", "guard-live")


def traffic_critical(name: str) -> bool:
    """Does this check (`check/subject`, or the check alone) route consumers' traffic?"""
    return name.split("/", 1)[0] in TRAFFIC_CHECKS


@dataclass(frozen=True)
class Finding:
    """One check of the verdict on one object."""

    check: str  # stable-name, nodes-covered, pods-labelled, scrape-once, ...
    subject: str  # "Service/nvidia-dcgm", "DaemonSet/…", "Pod/…"
    ok: bool
    detail: str
    fix: str = ""
    phase: int = 0  # the phase whose apply makes it right; 0: no phase does

    @property
    def name(self) -> str:
        return f"{self.check}/{self.subject.split('/', 1)[-1]}"

    def gate(self) -> GateResult:
        detail = self.detail if self.ok or not self.fix else f"{self.detail}; fix: {self.fix}"
        return GateResult(self.name, self.ok, detail)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail,
                "fix": self.fix or None, "phase": self.phase}


@dataclass(frozen=True)
class Verdict:
    stack: str
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def failures(self, upto: int | None = None) -> list[Finding]:
        """Failed findings; with `upto`, only those phases 1..upto answer for."""
        return [f for f in self.findings
                if not f.ok and (upto is None or 1 <= f.phase <= upto)]

    def summary(self) -> str:
        """The verdict in one line (the guard's log, `guard --once`), traffic checks first."""
        bad = sorted(self.failures(), key=lambda f: not traffic_critical(f.name))
        if not bad:
            return f"the stable identity works ({len(self.findings)} checks)"
        return f"{len(bad)} of {len(self.findings)} checks fail: " + "; ".join(
            f"{f.name}: {f.detail}" for f in bad[:3]) + (" …" if len(bad) > 3 else "")

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "summary": self.summary(),
                "checks": [f.as_dict() for f in self.findings]}


def alive(pods: Iterable[PodView]) -> list[PodView]:
    """The pods not being deleted."""
    return [p for p in pods if not p.deleting]


@dataclass(frozen=True)
class Need:
    """One Service name consumers resolve, and the DaemonSets whose pods it must reach."""

    service: str
    components: tuple[Component, ...]
    alias: bool  # the tool's alias (the alias phase creates it), not an operator's Service

    @property
    def local(self) -> bool:
        return any(c.local_traffic for c in self.components)
