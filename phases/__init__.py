"""The three migration phases, one module each with the same small surface:

    NUMBER, NAME
    plan(ctx) -> PhasePlan                       what would change now, with gate status
    before_write(ctx, step) -> [GateResult]     pre-gates, checked on fresh reads per step
    after_write(ctx, step) -> [GateResult]      post-gates the runner waits for
    verify(ctx, steps) -> [GateResult]          does a completed phase still hold (drift)
    rollback(ctx, steps) -> PhasePlan           inverse steps from what the state recorded

Phases are pure (no I/O) and never import each other; the engine runs them in order.
"""

from __future__ import annotations

from types import ModuleType

from migrator.phases import alias, label, switch

PHASES: tuple[ModuleType, ...] = (label, alias, switch)


def by_number(number: int) -> ModuleType:
    return PHASES[number - 1]
