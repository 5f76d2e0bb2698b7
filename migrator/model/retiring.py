"""Recorded steps a re-plan no longer covers (pure): which of them no longer describe the
cluster, so that `verify` stops judging the run by them.

A completed phase is verified against its recorded steps. When the cluster moved on in a way
that is not drift the tool should undo — the object's stack was removed (a ClusterPolicy →
GPUCluster change), or an operator reverted a switch of a Service it owns and the user did not
ask again with `--include-operator-owned` — the step is retired: kept in the state for the
record, no longer verified or rolled back.
"""

from __future__ import annotations

from collections.abc import Sequence

from migrator.model.discovery import collected
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PlanContext
from migrator.model.steps import RollPods, SetLabels, SetSelector, Step

GONE = "gone"  # the object no longer exists
REVERTED = "reverted"  # the operator re-rendered an operator-owned Service


def retired(ctx: PlanContext, step: Step) -> tuple[str, str] | None:
    """(record status, reason) if this recorded step no longer describes the cluster."""
    if isinstance(step, SetLabels | RollPods):
        live = ctx.snapshot.daemonsets.get(step.daemonset)
    else:
        live = ctx.service(step.service)
    owner = collected(ctx.snapshot, live) if live is not None else None
    if live is None or owner:
        why = (f"is being garbage-collected: its {owner} was deleted" if owner else
               "no longer exists: deleted, or its stack was removed")
        return GONE, (f"{step.object} {why}; its recorded step is retired, nothing is left to "
                      "verify or roll back")
    if (isinstance(step, SetSelector) and step.operator_owned and not step.satisfied(live)
            and not ctx.options.include_operator_owned):
        owner = ctx.operator_owner(live) or "its operator"
        return REVERTED, (f"{step.object}: {owner} reverted the selector switch made with "
                          "--include-operator-owned; recorded as reverted by the operator "
                          "(run apply with --include-operator-owned to switch it again)")
    return None


def reasked(reverted: Sequence[Step], options: Options) -> list[GateResult]:
    """With --include-operator-owned, switches recorded as reverted by the operator are asked
    for again: each is a failed gate, so the phase re-runs (and the report shows why)."""
    if not options.include_operator_owned:
        return []
    return [GateResult(f"selector-holds/{s.service}", False, f"{s.object} was reverted by its "
                       "operator; --include-operator-owned switches it again")
            for s in reverted if isinstance(s, SetSelector)]
