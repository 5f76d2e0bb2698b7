"""A phase's status, and the one answer to "does phase N hold" (commands, report, guard all ask
`holds`). The state document stores the value strings (schema 1), so old state loads unchanged."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from migrator.model.gates import GateResult


class PhaseStatus(Enum):
    PENDING = "pending"  # never run (or no state)
    IN_PROGRESS = "in-progress"  # a run (apply or rollback) is in it, or was killed in it
    COMPLETED = "completed"
    FAILED = "failed"  # a gate stopped it: resumed by the same command
    ROLLED_BACK = "rolled-back"

    @property
    def applied(self) -> bool:
        """Something of the phase was (or may have been) written and not undone."""
        return self in (PhaseStatus.IN_PROGRESS, PhaseStatus.COMPLETED, PhaseStatus.FAILED)

    @property
    def unfinished(self) -> bool:
        """A run stopped inside this phase: resumed from its recorded originals."""
        return self in (PhaseStatus.IN_PROGRESS, PhaseStatus.FAILED)


def holds(status: PhaseStatus, verification: Iterable[GateResult] = ()) -> bool:
    """Recorded completed, and none of its verification gates (when given) fails now."""
    return status is PhaseStatus.COMPLETED and all(g.ok for g in verification)
