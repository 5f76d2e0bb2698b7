"""The one walk of the phases, pure: per phase, from the cluster (as read, or as it would be)
and what the state recorded, the decision a run takes. A completed phase **holds** or is **run
again** (drifted, or the stack changed); one in progress or failed is **resumed** from the
recorded originals, less the steps the cluster no longer describes (retired first); a pending
one is **run**; a rollback is planned from what the phase wrote, less what was handed over. The
runner, the dry-run preview and the report all take these decisions (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from migrator.engine.state import PhaseRecord, PhaseStatus
from migrator.model import gates as g
from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.retiring import HANDED_OVER, reasked, retired
from migrator.model.steps import Step, from_record
from migrator.phases import Phase


class Action(Enum):
    HOLDS = "holds"  # completed, and it still holds: left alone
    RUN = "run"  # pending or rolled back: planned from scratch
    RESUME = "resume"  # in progress or failed: re-planned from the recorded originals
    RERUN = "rerun"  # completed, but drifted or planned for another stack: run again
    UNDO = "undo"  # rolled back from what it wrote


@dataclass(frozen=True)
class Retirement:
    """A recorded step the cluster no longer describes, kept with `status` (model/retiring.py)."""

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
        return self.record.status if self.record is not None else PhaseStatus.PENDING

    @property
    def record_error(self) -> str | None:
        return self.record.error if self.record is not None else None

    @property
    def handed_over(self) -> list[str]:
        return [r.reason for r in self.retire if r.status == HANDED_OVER]

    @property
    def drift(self) -> list[GateResult]:
        """A completed phase's failed verification gates."""
        return g.failed(self.gates) if self.status is PhaseStatus.COMPLETED else []


def _retirements(ctx: PlanContext, rec: PhaseRecord, only: str | None
                 ) -> tuple[Retirement, ...]:
    out = []
    for r in rec.steps:
        if r.status not in ("intent", "done"):
            continue
        found = retired(ctx, from_record(r.step))
        if found is not None and (only is None or found[0] == only):
            out.append(Retirement(r.id, found[0], found[1]))
    return tuple(out)


def _replanned(ctx: PlanContext, rec: PhaseRecord) -> tuple[PlanContext, tuple[Retirement, ...]]:
    """The context with the recorded originals, less those of the steps retired now."""
    retire = _retirements(ctx, rec, None)
    gone = {r.step_id for r in retire}
    return replace(ctx, recorded={k: v for k, v in rec.recorded().items()
                                  if k not in gone}), retire


def _kept(ctx: PlanContext, rec: PhaseRecord) -> tuple[list[Step], tuple[Retirement, ...]]:
    """What the phase wrote, less what an operator release manages now (handed over)."""
    handed = _retirements(ctx, rec, HANDED_OVER)
    gone = {r.step_id for r in handed}
    return [from_record(r.step) for r in rec.steps
            if r.status in ("intent", "done") and r.id not in gone], handed


def decide(module: Phase, rec: PhaseRecord | None, ctx: PlanContext, *,
           new_stack: str | None = None) -> Decision:
    """The decision for one phase of `apply` on `ctx` (no originals); `new_stack`: the stack
    running now when it differs from the recorded one (every completed phase runs again)."""
    status = rec.status if rec is not None else PhaseStatus.PENDING
    if status is PhaseStatus.COMPLETED and rec is not None:
        kept, handed = _kept(ctx, rec)
        gates = tuple(module.verify(ctx, kept) + reasked(rec.reverted_steps(), ctx.options))
        drift = g.failed(gates)
        if not drift and new_stack is None:
            return Decision(module, rec, Action.HOLDS, ctx, gates, None, handed)
        reason = g.describe(drift) if drift else f"stack changed to {new_stack}"
        plan_ctx, retire = _replanned(ctx, rec)
        return Decision(module, rec, Action.RERUN, plan_ctx, gates, module.plan(plan_ctx),
                        retire, reason)
    if status.unfinished and rec is not None:
        plan_ctx, retire = _replanned(ctx, rec)
        plan = module.plan(plan_ctx)
        return Decision(module, rec, Action.RESUME, plan_ctx, tuple(plan.gates), plan, retire)
    plan = module.plan(ctx)
    return Decision(module, rec, Action.RUN, ctx, tuple(plan.gates), plan)


def undo(module: Phase, rec: PhaseRecord, ctx: PlanContext) -> Decision:
    """The decision for one phase of `rollback`: what it wrote, undone, less what was handed
    over (left alone, and said so)."""
    wrote, handed = _kept(ctx, rec)
    plan = module.rollback(ctx, wrote)
    return Decision(module, rec, Action.UNDO, ctx, tuple(plan.gates), plan, handed)
