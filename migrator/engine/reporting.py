"""The report back end of the one loop (engine/loop.py): every phase as `apply --phase 3` would
meet it, judged, nothing written — the phases of every command's report (engine/assemble.py).

It is `projecting.Project` (each phase the loop reaches planned on the cluster as the earlier
writes would leave it) with a report's view of each phase:

- a completed phase shows its verification — judged on the cluster *as it is* (what `verify`
  answers), not on the projection, even where the loop re-runs it (drifted, or another stack);
- a phase the run would write shows its plan: changes, the plan's gates (no waits, no
  pre-gates: that is `--dry-run`'s view), and where it would stop; the loop goes on past a
  refusal to show every phase (`_unasked` plans the rest on the projection).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace

from migrator import phases
from migrator.engine.loop import Direction, Loop, PhaseWork, RunSettings, Stopped
from migrator.engine.projecting import Project, _Phase, changes_of, unasked
from migrator.engine.reports import PhaseView
from migrator.engine.state import PhaseStatus, State
from migrator.engine.walk import Action, Decision, decide
from migrator.model.discovery import discover
from migrator.model.gates import GateResult
from migrator.model.planning import Options, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import Step

OWNED_AFTER_SWITCH = (
    "--include-operator-owned changes nothing now: phase 3 is completed, so {services} stay "
    "as they are; to switch them too, run `dcgm-migrate rollback --phase 3`, then "
    "`dcgm-migrate apply --phase 3 --include-operator-owned`"
)


class Report(Project):
    """`Project`, viewed as the report shows each phase (module docstring)."""

    def __init__(self, snapshot: Snapshot, catalog: Catalog, options: Options) -> None:
        super().__init__(snapshot, catalog, RunSettings(options=options))
        self.decisions: dict[int, Decision] = {}

    def _judged(self, decision: Decision) -> PhaseView:
        """A completed phase: its verification on the cluster as it is now."""
        module, rec = decision.module, decision.record
        if self.projected is not self.now:
            decision = decide(module, rec, self.now, self.catalog,
                              discover(self.now, self.catalog).components, self.settings.options)
        options = self.settings.options
        again = module.plan(PlanContext(self.projected, self.catalog,
                                        discover(self.now, self.catalog).components, options))
        self.warnings += again.warnings  # e.g. operator-owned, still true
        notes = decision.handed_over
        if module.SWITCHES_SELECTORS and options.include_operator_owned and again.steps:
            notes.append(OWNED_AFTER_SWITCH.format(services=", ".join(
                s.object for s in again.steps)))
            self.warnings.append(notes[-1])
        return PhaseView(module.NUMBER, module.NAME, PhaseStatus.COMPLETED, (), decision.gates,
                         tuple(notes), decision.record_error)

    def holds(self, decision: Decision) -> None:
        self.decisions[decision.module.NUMBER] = decision
        self.views[decision.module.NUMBER] = self._judged(decision)

    def begin(self, decision: Decision, direction: Direction) -> None:
        number = decision.module.NUMBER
        self.decisions[number] = decision
        plan = decision.plan
        assert plan is not None
        if decision.action is Action.RERUN:
            self.views[number] = self._judged(decision)
        else:
            self.warnings += plan.warnings
        notes = list(plan.notes)
        earlier = [n for n, v in self.views.items() if v.status is not PhaseStatus.COMPLETED]
        if earlier and any(not r.ok for r in plan.gates):
            notes.append("gates show the cluster as the run would meet it after phase "
                         f"{', '.join(map(str, earlier))}")
        if plan.blocked and plan.blocked not in notes:
            notes.append(plan.blocked)
        self._on = _Phase(decision, {r.name: r for r in plan.gates}, notes, [],
                          self.projected)

    def write(self, work: PhaseWork, step: Step, pre: list[GateResult]) -> None:
        super().write(work, step, [])  # the report shows the plan's gates only

    def after(self, work: PhaseWork, step: Step, base: Snapshot | None, wrote: bool) -> None:
        """The report shows no waits."""

    def check(self, work: PhaseWork, step: Step) -> None:
        """The report shows no waits."""

    def _close(self, outcome: str) -> None:
        on = self._on
        assert on is not None and on.decision.plan is not None
        number = on.decision.module.NUMBER
        if number not in self.views:  # a re-run shows its verification (`begin`)
            plan = on.decision.plan
            self.views[number] = PhaseView(number, on.decision.module.NAME,
                                           on.decision.status, changes_of(plan.steps),
                                           tuple(on.gates.values()), tuple(on.notes),
                                           on.decision.record_error, plan.blocked)
        self._on = None


def walked(snapshot: Snapshot, catalog: Catalog, state: State | None, options: Options
           ) -> tuple[tuple[PhaseView, ...], dict[int, Decision], list[str]]:
    """Every phase through the one loop on the report back end: the views, the decisions the
    loop took, and the warnings the phases gave. A gate that would stop the run stops the
    loop there; the phases after it are shown as planned on the cluster as it would be."""
    backend = Report(snapshot, catalog, options)
    walking = state or State(snapshot.namespace)
    with contextlib.suppress(Stopped):
        Loop(backend, walking).apply(max(phases.numbers()))
    for number in (n for n in phases.numbers() if n not in backend.views):
        rec = walking.phase(number)
        decision = decide(phases.by_number(number), rec, backend.projected, catalog,
                          discover(snapshot, catalog).components, options)
        backend.decisions[number] = decision
        if decision.plan is None:
            backend.holds(decision)
            continue
        backend.warnings += decision.plan.warnings
        backend.views[number] = replace(unasked(backend, rec, False), preview=None)
    return (tuple(backend.views[n] for n in phases.numbers()), backend.decisions,
            backend.warnings)
