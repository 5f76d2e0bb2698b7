"""What the phases share (they never import each other): the plan each builds, as lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from migrator.model.gates import GateResult, ServiceBaseline
from migrator.model.planning import PhasePlan
from migrator.model.steps import Step


@dataclass
class Draft:
    """A phase's plan while it is built, frozen into a `PhasePlan` by `plan`."""

    number: int
    name: str
    steps: list[Step] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    guarded: list[ServiceBaseline] = field(default_factory=list)
    checks: list[Step] = field(default_factory=list)

    def gate(self, results: Sequence[GateResult]) -> list[str]:
        """Add gates, and return the details of those failing. One that heals by itself (`wait`:
        garbage collection is removing what it names) passes now and is noted: the loop waits
        for it before the write (`before_write`)."""
        for r in results:
            if r.wait:
                self.notes.append(r.detail)
            self.gates.append(GateResult(r.name, True, r.detail) if r.wait else r)
        return [r.detail for r in results if not r.ok and not r.wait]

    def plan(self, blocked: str | None = None, fix: str | None = None,
             tolerance: Mapping[str, int] | None = None) -> PhasePlan:
        return PhasePlan(number=self.number, name=self.name, steps=tuple(self.steps),
                         gates=tuple(self.gates), warnings=tuple(self.warnings),
                         notes=tuple(self.notes), blocked=blocked, fix=fix,
                         guarded=tuple(self.guarded), tolerance=dict(tolerance or {}),
                         checks=tuple(self.checks))
