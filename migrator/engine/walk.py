"""The one walk of the phases, pure: for each phase, from the cluster (as read, or as it would
be after the earlier phases), what the state recorded and the options, the decision a run
takes — and its judgement of that phase.

- completed: verified against the recorded steps (less those an operator release manages now:
  handed over, not drift); it **holds**, or it is **run again** (drifted, or the stack
  changed);
- in progress or failed: **resumed**, re-planned from the recorded originals, less the
  recorded steps the cluster no longer describes (`model/retiring.py`: retired first);
- pending or rolled back: **run**, planned from scratch;
- a rollback (`undo`): planned from what the phase wrote, less what was handed over.

Three consumers take the same decisions (docs/architecture.md, "The walk"): the runner
executes them on a fresh read before each phase, the dry-run preview projects them onto the
cluster as it would be, and the report summarises them. None of them decides on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from migrator.engine.state import PhaseRecord, PhaseStatus
from migrator.model import gates as g
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.retiring import HANDED_OVER, reasked, retired
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component
from migrator.model.steps import from_record
from migrator.phases import Phase


class Action(Enum):
    HOLDS = "holds"  # completed, and it still holds: left alone
    RUN = "run"  # pending or rolled back: planned from scratch
    RESUME = "resume"  # in progress or failed: re-planned from the recorded originals
    RERUN = "rerun"  # completed, but drifted or planned for another stack: run again
    UNDO = "undo"  # rolled back from what it wrote


@dataclass(frozen=True)
class Retirement:
    """A recorded step the cluster no longer describes: kept for the record with `status`
    (`model/retiring.py`), no longer verified, rolled back or used as an original."""

    step_id: str
    status: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """What a run does with one phase, and the context it decided in."""

    module: Phase
    record: PhaseRecord | None
    action: Action
    ctx: PlanContext  # the cluster and the originals the plan (or verification) used
    gates: tuple[GateResult, ...]  # completed: its verification now; else the plan's gates
    plan: PhasePlan | None  # what the run writes (None when it holds)
    retire: tuple[Retirement, ...] = ()  # recorded steps the run retires before planning
    reason: str = ""  # RERUN: why the phase runs again

    @property
    def status(self) -> PhaseStatus:
        """The phase's recorded status (pending with no record)."""
        return self.record.status if self.record is not None else PhaseStatus.PENDING

    @property
    def record_error(self) -> str | None:
        """The last error the state recorded for this phase."""
        return self.record.error if self.record is not None else None

    @property
    def handed_over(self) -> list[str]:
        return [r.reason for r in self.retire if r.status == HANDED_OVER]

    @property
    def drift(self) -> list[GateResult]:
        """A completed phase's failed verification gates."""
        return g.failed(self.gates) if self.status is PhaseStatus.COMPLETED else []


def _retirements(ctx: PlanContext, rec: PhaseRecord | None, only: str | None
                 ) -> tuple[Retirement, ...]:
    if rec is None:
        return ()
    out = []
    for r in rec.steps:
        if r.status not in ("intent", "done"):
            continue
        found = retired(ctx, from_record(r.step))
        if found is not None and (only is None or found[0] == only):
            out.append(Retirement(r.id, found[0], found[1]))
    return tuple(out)


def _originals(rec: PhaseRecord, retire: tuple[Retirement, ...]) -> Mapping[str, Any]:
    gone = {r.step_id for r in retire}
    return {k: v for k, v in rec.recorded().items() if k not in gone}


def _context(snapshot: Snapshot, catalog: Catalog, components: tuple[Component, ...],
             options: Options, recorded: Mapping[str, Any] | None = None) -> PlanContext:
    return PlanContext(snapshot, catalog, components, options, dict(recorded or {}))


def decide(module: Phase, rec: PhaseRecord | None, snapshot: Snapshot, catalog: Catalog,
           components: tuple[Component, ...], options: Options, *,
           new_stack: str | None = None) -> Decision:
    """The decision for one phase of `apply` (module docstring); `new_stack`: the stack the
    cluster runs now when it differs from the recorded one (every completed phase runs
    again)."""
    ctx = _context(snapshot, catalog, components, options)
    status = rec.status if rec is not None else PhaseStatus.PENDING
    reason = ""
    if status is PhaseStatus.COMPLETED and rec is not None:
        handed = _retirements(ctx, rec, HANDED_OVER)
        gone = {r.step_id for r in handed}
        kept = [from_record(r.step) for r in rec.steps
                if r.status in ("intent", "done") and r.id not in gone]
        gates = tuple(module.verify(ctx, kept) + reasked(rec.reverted_steps(), options))
        drift = g.failed(gates)
        if not drift and new_stack is None:
            return Decision(module, rec, Action.HOLDS, ctx, gates, None, handed)
        reason = g.describe(drift) if drift else f"stack changed to {new_stack}"
        retire = _retirements(ctx, rec, None)
        plan_ctx = _context(snapshot, catalog, components, options, _originals(rec, retire))
        return Decision(module, rec, Action.RERUN, plan_ctx, gates, module.plan(plan_ctx),
                        retire, reason)
    if status.unfinished and rec is not None:
        retire = _retirements(ctx, rec, None)
        plan_ctx = _context(snapshot, catalog, components, options, _originals(rec, retire))
        plan = module.plan(plan_ctx)
        return Decision(module, rec, Action.RESUME, plan_ctx, tuple(plan.gates), plan, retire)
    plan = module.plan(ctx)
    return Decision(module, rec, Action.RUN, ctx, tuple(plan.gates), plan)


def undo(module: Phase, rec: PhaseRecord, snapshot: Snapshot, catalog: Catalog,
         components: tuple[Component, ...], options: Options) -> Decision:
    """The decision for one phase of `rollback`: what it wrote, undone newest first, less what
    an operator release manages now (left alone, and said so)."""
    ctx = _context(snapshot, catalog, components, options)
    handed = _retirements(ctx, rec, HANDED_OVER)
    gone = {r.step_id for r in handed}
    wrote = [from_record(r.step) for r in rec.steps
             if r.status in ("intent", "done") and r.id not in gone]
    plan = module.rollback(ctx, wrote)
    return Decision(module, rec, Action.UNDO, ctx, tuple(plan.gates), plan, handed)
