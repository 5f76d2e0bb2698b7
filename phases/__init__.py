"""The three migration phases, one pure module each with the same surface, the `Phase` protocol
(mypy checks each module in `PHASES`); they never import each other (phases/common.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from migrator.model.findings import Answers, Remedy
from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.steps import Step
from migrator.phases import alias, label, switch


class Phase(Protocol):
    """One phase module (`migrator.phases.label`, `.alias`, `.switch`)."""

    NUMBER: int  # module constants: the phase's number,
    NAME: str  # its name (the state's, every report's, the CLI's --phase),
    SWITCHES_SELECTORS: bool  # its steps move Service selectors,
    ANSWERS_FOR: frozenset[Remedy]  # what of the verdict its apply puts right
    def plan(self, ctx: PlanContext) -> PhasePlan: ...  # what would change now, with gates
    def before_write(self, ctx: PlanContext, step: Step) -> list[GateResult]: ...  # fresh reads
    def after_write(self, ctx: PlanContext, step: Step) -> list[GateResult]: ...  # waited for
    def verify(self, ctx: PlanContext, steps: Sequence[Step]) -> list[GateResult]: ...  # drift
    def rollback(self, ctx: PlanContext, steps: Sequence[Step]) -> PhasePlan: ...  # from state


PHASES: tuple[Phase, ...] = (label, alias, switch)


def by_number(number: int) -> Phase:
    """The phase numbered `number`; KeyError for a number no phase has."""
    for module in PHASES:
        if number == module.NUMBER:
            return module
    raise KeyError(number)


def numbers() -> tuple[int, ...]:
    return tuple(module.NUMBER for module in PHASES)


def answers() -> Answers:
    """Which phase answers for each of the verdict's remedies (the verdict's `phase`)."""
    return {remedy: module.NUMBER for module in PHASES for remedy in module.ANSWERS_FOR}


def selector_phase() -> Phase:
    return next(module for module in PHASES if module.SWITCHES_SELECTORS)


def alias_phase() -> Phase:
    """The phase whose steps create the aliases (what the guard may create again)."""
    return alias
