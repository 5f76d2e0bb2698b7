"""Which run a state document shows unfinished, pure: the operation (`apply` or `rollback`)
and target of the run that left phases in progress, from the starts its history records.
`status` describes it (engine/runstatus.py); the guard asks it of the alias phase."""

from __future__ import annotations

from migrator import phases
from migrator.engine.state.document import PhaseRecord, State
from migrator.model.phasestatus import holds

STARTS = {"phase-start": "apply", "rollback-start": "rollback"}


def _operation(state: State, active: list[PhaseRecord]) -> tuple[str | None, int | None]:
    """(apply | rollback, its --phase) of the run that left `active` in progress, or (none
    active) of the newest start the history records."""
    numbers = {r.number for r in active}
    for event in reversed(state.history):
        operation = STARTS.get(str(event.get("event")))
        if operation and (not numbers or event.get("phase") in numbers):
            target = event.get("target")
            known = isinstance(target, int) and target in phases.numbers()
            return operation, target if known else None
    if any(r.undo for r in active):
        return "rollback", None
    return ("apply", None) if active else (None, None)


def unfinished(state: State) -> tuple[str | None, int | None, list[PhaseRecord]]:
    """The run that did not finish: (operation, target, its phases in progress or left to do),
    or (None, None, [])."""
    active = sorted((r for r in state.phases.values() if r.status.unfinished),
                    key=lambda r: r.number)
    if active:
        operation, target = _operation(state, active)
        if target is None:
            target = (min if operation == "rollback" else max)(r.number for r in active)
        return operation, target, active
    operation, target = _operation(state, [])  # unfinished while its target is not reached
    if operation is None or target is None:
        return None, None, []
    rest = [state.phase(n) for n in phases.numbers()
            if (n <= target and not holds(state.phase(n).status) if operation == "apply"
                else n >= target and state.phase(n).status.applied)]
    return (operation, target, rest) if rest else (None, None, [])
