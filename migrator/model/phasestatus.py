"""A phase's status, as a type, and the one answer to "does phase N hold".

The state document stores the status as its string (`pending | in-progress | completed |
failed | rolled-back`, schema 1), so existing state ConfigMaps load unchanged; everything above
the document compares `PhaseStatus` members, never strings. Pure: the commands, the report,
the verdict's callers and the guard all ask `holds`, so no two of them can disagree on it.
"""

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
    """Does the phase hold: recorded completed, and none of its verification gates (what
    `walk.decide` re-checks on the live cluster, when the caller has them) fails now."""
    return status is PhaseStatus.COMPLETED and all(g.ok for g in verification)
