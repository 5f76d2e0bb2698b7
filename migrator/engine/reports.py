"""The reports the commands return, typed; serialised to `-o json` by cli/render.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator.errors import MigrateError
from migrator.model.gates import GateResult
from migrator.model.outcome import Finding, Verdict
from migrator.model.phasestatus import PhaseStatus, holds
from migrator.model.steps import Change

if TYPE_CHECKING:
    from migrator.engine.guard import PassResult


@dataclass(frozen=True)
class PhasePreview:
    """`apply --dry-run` and `rollback --dry-run`: what the run would do with one phase."""

    outcome: str  # would-run | would-roll-back | holds | would-stop | not-reached
    would_wait_for: tuple[str, ...]


@dataclass(frozen=True)
class PhaseView:
    """One phase as every report shows it: its recorded status, what its plan changes, its
    gates judged on the cluster as it is now, and why it stopped or cannot start."""

    number: int
    name: str
    status: PhaseStatus
    changes: tuple[Change, ...]
    gates: tuple[GateResult, ...]
    notes: tuple[str, ...]
    error: str | None
    blocked: str | None = None
    preview: PhasePreview | None = None


@dataclass(frozen=True)
class StackChange:
    """The stack running now is not the one the completed phases were planned for: a warning
    that says how to re-plan, never a gate."""

    recorded: str
    live: str
    # a change-stack has not finished: the commands that go on with it and that undo it
    unfinished: tuple[str, str] | None = None

    def __str__(self) -> str:
        if self.unfinished is not None:
            resume, undo = self.unfinished
            return (f"a change-stack from {self.recorded} to {self.live} has not finished: "
                    f"`{resume}` goes on with it, `{undo}` undoes it (docs/runbook.md, "
                    "'Changing stack')")
        return (f"the GPU Operator stack changed from {self.recorded} (recorded) to "
                f"{self.live}: the completed phases were planned for {self.recorded}; "
                f"`dcgm-migrate apply --phase 3` re-plans them for {self.live} "
                "(docs/runbook.md, 'Changing stack')")


@dataclass(frozen=True)
class PlanReport:
    """What `plan` prints: the common part of every report of the cluster."""

    stack: str
    namespace: str
    fingerprint: str
    components: tuple[str, ...]
    phases: tuple[PhaseView, ...]
    warnings: tuple[str, ...]
    tool_duplicates: int
    scrape_duplicates: int
    verdict: Verdict
    lost_state: tuple[str, ...]
    stack_change: StackChange | None = None
    objects: Mapping[str, Mapping[str, str]] | None = None  # `plan`: what the fingerprint covers

    def holds(self, upto: int) -> bool:
        """Phases 1..upto completed for the stack running now, their verification passing."""
        return self.stack_change is None and all(
            holds(v.status, v.gates) for v in self.phases if v.number <= upto)

    @property
    def rolled_back(self) -> bool:
        """A deliberate full rollback: the checks the phases make pass are expected to fail."""
        first = min(self.phases, key=lambda v: v.number, default=None)
        return first is not None and first.status is PhaseStatus.ROLLED_BACK and all(
            v.status in (PhaseStatus.ROLLED_BACK, PhaseStatus.PENDING) for v in self.phases)

    def unexpected_failures(self) -> list[Finding]:
        """The failed checks the cluster should pass (after a full rollback: no phase's)."""
        bad = self.verdict.failures()
        return [f for f in bad if f.phase == 0] if self.rolled_back else bad


@dataclass(frozen=True)
class Closing:
    """A command's closing line (`verdict: OK — …`), kept as data so the renderer, not the
    engine, decides how it looks."""

    subject: str  # verdict | run | dry run | status
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"{self.subject}: {'OK' if self.ok else 'NOT OK'} — {self.detail}"


@dataclass(frozen=True)
class Target:
    """Where a write would land, shown in the question before the first one: a runbook run
    against the wrong context is stopped there."""

    context: str
    server: str
    namespace: str


@dataclass(frozen=True)
class Question:
    """What `apply` and `rollback` ask before their first write."""

    report: PlanReport
    target: Target


@dataclass(frozen=True)
class Lowest:
    """A Service's fewest ready endpoints during the run, beside its baseline."""

    lowest: int
    baseline: int


@dataclass(frozen=True)
class RunOutcome:
    """What an apply or rollback run did (or, with `dry_run`, would send)."""

    operation: str  # apply | rollback
    writes: int
    dry_run: bool
    lowest_endpoints: Mapping[str, Lowest]
    notes: tuple[str, ...] | None = None  # None: no run went (apply with nothing to do)


@dataclass(frozen=True)
class RunReport:
    """`apply` (also `--dry-run`) and `rollback`: the report after the run."""

    report: PlanReport
    result: RunOutcome
    ok: bool


@dataclass(frozen=True)
class StateDigest:
    """What `status` shows of the state ConfigMap; never the originals it keeps."""

    plan_fingerprint: str | None
    updated: str
    last_error: str | None
    history: tuple[Mapping[str, Any], ...]  # the last 10 events, oldest first


@dataclass(frozen=True)
class LockView:
    """The run lock as `status` shows it, with why its holder is known to be gone."""

    holder: str
    acquired: str | None
    expires: str | None
    live: bool  # its expiry is in the future
    gone: str | None  # why its holder is provably gone, or None


@dataclass(frozen=True)
class RollbackStep:
    """One recorded step of a phase and what its undo would do."""

    object: str
    type: str
    status: str  # to-do | intent | done | skipped
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class RollbackPhase:
    """What `rollback --phase N` would undo of one phase, step by step."""

    phase: int
    name: str
    status: PhaseStatus
    steps: tuple[RollbackStep, ...]


@dataclass(frozen=True)
class RunView:
    """The run in the state: what holds the lock, where an interrupted run would resume,
    what it waits for."""

    state: str  # idle | running | rolling-back | interrupted
    operation: str | None
    target: int | None
    phase: int | None
    lock: LockView | None
    resume: str | None
    last_event: Mapping[str, Any] | None
    waits_for: str | None
    rollback: tuple[RollbackPhase, ...] | None


@dataclass(frozen=True)
class StatusReport:
    """`status` and `verify`."""

    report: PlanReport
    state: StateDigest | None
    run: RunView
    ok: bool
    state_error: MigrateError | None = None  # state unreadable: reported, then exit 3


@dataclass(frozen=True)
class UnlockReport:
    """`unlock`: which holder's lock went, and whether that took `--force`."""

    namespace: str
    released: str | None  # the holder whose lock was released
    forced: bool
    holder_gone: str | None


@dataclass(frozen=True)
class PreflightReport:
    """`preflight`: the read-only checks, each with its fix."""

    namespace: str
    server: str
    checks: tuple[GateResult, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


@dataclass(frozen=True)
class GuardReport:
    """`guard --once`: what one pass wrote, and the verdict after it."""

    namespace: str
    passed: PassResult
    verdict: Verdict


Report = (PlanReport | Question | RunReport | StatusReport | UnlockReport | PreflightReport
          | GuardReport)
