"""What the phases share (they never import each other): the plan each builds, as lists."""

from __future__ import annotations

from collections.abc import Mapping
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

    def plan(self, blocked: str | None = None, fix: str | None = None,
             tolerance: Mapping[str, int] | None = None) -> PhasePlan:
        return PhasePlan(number=self.number, name=self.name, steps=tuple(self.steps),
                         gates=tuple(self.gates), warnings=tuple(self.warnings),
                         notes=tuple(self.notes), blocked=blocked, fix=fix,
                         guarded=tuple(self.guarded), tolerance=dict(tolerance or {}),
                         checks=tuple(self.checks))
