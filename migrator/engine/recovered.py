"""A state lost after phase 1, rebuilt from the marks phase 1 left on the DaemonSets (only when
they are the tool's only marks), so `rollback --phase 1` can undo it."""

from __future__ import annotations

from collections.abc import Callable

from migrator.engine.clock import Clock
from migrator.engine.state import PhaseStatus, State
from migrator.engine.state.configmap import restore_hint
from migrator.errors import UsageError
from migrator.model import halfrolls, labelmarks
from migrator.model import objects as o
from migrator.model.discovery import discover
from migrator.model.outcome import tool_marks
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import SetLabels

LABEL_PHASE = 1  # the phase whose writes the marks record (phases/label.py)


def phase_one_only(snapshot: Snapshot, catalog: Catalog) -> list[labelmarks.LabelsMark]:
    """Phase 1's marks, when they are every mark the tool left here (else [])."""
    marks = labelmarks.marked(snapshot.daemonsets)
    described = [labelmarks.described(m) for m in marks]
    return marks if marks and tool_marks(snapshot, catalog) == described else []


def from_marks(snapshot: Snapshot, catalog: Catalog, namespace: str, clock: Clock,
               say: Callable[[str], None]) -> State | None:
    """A state with phase 1 completed as the marks record it (None: no such marks), said
    through `say`. The labels' values now are what phase 1 wrote."""
    marks = phase_one_only(snapshot, catalog)
    if not marks:
        return None
    say("no state ConfigMap: phase 1 is rolled back from the marks it left on "
        + ", ".join(labelmarks.described(m) for m in marks))
    state = State(namespace, stack=discover(snapshot, catalog).stack, clock=clock)
    rec = state.phase(LABEL_PHASE)
    rec.status, rec.started, rec.finished = PhaseStatus.COMPLETED, state.stamp(), state.stamp()
    rec.wrote_labels = True
    for mark in marks:
        ds = snapshot.daemonsets[mark.daemonset]
        rec.mark(SetLabels(mark.daemonset,
                           {k: o.labels(ds).get(k) for k in mark.meta_before},
                           {k: o.template_labels(ds).get(k) for k in mark.template_before},
                           dict(mark.meta_before), dict(mark.template_before)), "done")
    state.log("recovered", source="phase 1's marks on the DaemonSets",
              daemonsets=[m.daemonset for m in marks])
    return state


def refuse_lost_state(snapshot: Snapshot, catalog: Catalog, namespace: str) -> None:
    """No state, but the tool's marks: originals recorded now would be wrong, so stop here."""
    marks = tool_marks(snapshot, catalog)
    if not marks:
        return
    cm, mb = catalog.common.state_configmap, catalog.common.managed_by
    raise UsageError(
        f"No state ConfigMap {namespace}/{cm}, yet {len(marks)} objects carry dcgm-migrate's "
        f"marks ({', '.join(marks[:3])}{' …' if len(marks) > 3 else ''}): the state was "
        "deleted, and what to roll back is not known.",
        f"{restore_hint(namespace, cm, f'{mb.key}={mb.value}')}, then run the command again "
        f"(`dcgm-migrate status -n {namespace}` lists every marked object); "
        + (f"without a backup, `dcgm-migrate rollback --phase 1 -n {namespace}` undoes phase 1 "
           "from the marks it left on the DaemonSets, and the migration starts over"
           if phase_one_only(snapshot, catalog)
           else "without a backup see docs/runbook.md, 'Restoring the state'"))


def reopen_half_rolled(state: State, snapshot: Snapshot, catalog: Catalog) -> list[int]:
    """Phase 1 rolled back while an OnDelete DaemonSet's pods keep the common label: reopened as
    failed (labels recorded as they are), so `rollback --phase 1 --roll-on-delete` rolls the
    pods. The phase numbers reopened."""
    rec = state.phase(LABEL_PHASE)
    if rec.status is not PhaseStatus.ROLLED_BACK:
        return []
    left = []
    for comp in discover(snapshot, catalog).components:
        ds = snapshot.daemonsets.get(comp.daemonset)
        key = comp.common_label.key
        if ds is None or not halfrolls.on_delete(ds) or not halfrolls.stale_pods(
                snapshot, ds, [key]):
            continue
        left.append(comp.daemonset)
        wanted = {key: comp.common_label.value}
        rec.mark(SetLabels(comp.daemonset, wanted, wanted, {key: o.labels(ds).get(key)},
                           {key: o.template_labels(ds).get(key)}), "done")
    if not left:
        return []
    rec.status = PhaseStatus.FAILED
    state.log("reopened", phase=LABEL_PHASE, reason="pods left with the labels",
              daemonsets=left)
    return [LABEL_PHASE]
