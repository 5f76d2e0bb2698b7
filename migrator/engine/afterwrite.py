"""After a write: wait for the step's post-gates (rollout, `after_write`, no-loss gates) and
undo a selector change that lost endpoints; `said`: those waits as `--dry-run` describes them."""

from __future__ import annotations

from typing import NoReturn

from migrator.engine import executor, stalls
from migrator.engine.loop import Applier, PhaseWork
from migrator.engine.progress import EndpointProgress, RolloutProgress, StepEvent
from migrator.engine.state import PhaseRecord
from migrator.engine.waiting import RolloutOutcome
from migrator.model import gates as g
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.gates import GateKind, GateResult, ServiceBaseline
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.steps import Step
from migrator.model.wording import counted

# a failed gate of these kinds stops the wait at once: lost endpoints (act now) or a node that
# stopped reporting (cannot heal by waiting); an endpoint dip the step did not cause is waited out
STOPS_AT_ONCE = frozenset({GateKind.ENDPOINTS, GateKind.NODES_REPORTING})


def wait(backend: Applier, phase: PhaseWork, step: Step, base: Snapshot | None) -> None:
    """Wait for the step's post-gates. `base` (the pre-write read) supplies only what no step
    changes (CRs, ServiceMonitors); every check reads the rest afresh."""
    now = backend.fresh(base or phase.decided)
    base_snap = base or now  # with no pre-write read, this read serves as the base
    ds_now = now.daemonsets.get(step.rollout_of() or "")
    if ds_now is not None and o.update_strategy(ds_now) == "OnDelete":
        return  # the template change rolls nothing; a RollPods step (if any) rolls pods
    rolls = step.rollout_of() if ds_now is not None else None
    if rolls is not None:
        if step.rolls_pods():  # minutes, maybe: `status` shows the write done meanwhile
            backend.flush()
        with backend.quiet(rolls):
            out = backend.waiter.rollout(
                rolls, backend.settings.timeout,
                lambda ds, pace: backend.listener.rollout(RolloutProgress(
                    o.name(ds), *g.rollout_counts(ds), eta_seconds=pace.eta)),
                blocked=lambda: stalls.lost_nodes_detail(
                    backend.kube, backend.namespace, base_snap.daemonsets[rolls]))
        if not out.complete:
            _fail_rollout(backend, phase.rec, step, base_snap, out)
    dips: dict[str, str] = {}

    def judged(snap: Snapshot) -> list[GateResult]:
        results = list(phase.module.after_write(backend.context(snap), step))
        if rolls is not None:
            results.append(g.nodes_reporting(rolls, snap.pods_of(rolls)))
        return results + [_endpoints_gate(snap, b, step, phase.plan) for b in phase.bases]

    def check() -> list[GateResult]:
        snap = backend.fresh(base_snap)
        results = judged(snap)
        if g.failed(results) and snap.nodes is None:  # a node deleted since the baseline?
            known = backend.with_nodes(snap)
            if known.nodes is not None:
                snap, results = known, judged(known)
        for b in phase.bases:  # each guarded Service's lowest count so far
            ready = snap.endpoints_of(b.service).ready_total
            low = backend.result.lowest.get(b.service, (ready, b.total))
            backend.result.lowest[b.service] = (min(low[0], ready), b.total)
            backend.listener.endpoints(EndpointProgress(b.service, ready, b.total))
        for r in results:
            if r.kind is GateKind.ENDPOINTS_DIP and not r.ok:
                dips.setdefault(r.name.partition("/")[2], r.detail)
        return results

    results = backend.until(
        check, fatal=lambda rs: any(r.kind in STOPS_AT_ONCE for r in g.failed(rs)))
    for service, detail in sorted(dips.items()):
        note = f"Service/{service} dipped below its baseline during {step.object}: {detail}"
        backend.result.notes.append(note)
        backend.listener.message(note)
    if not g.failed(results):
        return
    undo = step.inverse() if step.selector_change(step.name) else None
    if undo is not None:  # a selector change that lost endpoints is undone at once
        lost = [r for r in g.failed(results) if r.kind is GateKind.ENDPOINTS]
        if lost:
            executor.execute(undo, backend.kube, backend.namespace, backend.catalog)
            backend.result.writes += 1
            phase.mark(step, "skipped")
            backend.listener.step(StepEvent(phase.rec.number, step, "restored"))
            backend.refuse(phase.rec, f"{step.object}: endpoints dropped after the selector "
                           f"change ({g.describe(lost)}); the old selector was restored",
                           "check the pods the new selector should match, then retry")
    backend.refuse(phase.rec, f"{step.object}: {g.describe(results)}",
                   "run `dcgm-migrate status` to see the gates; rerun to resume")


def _endpoints_gate(snap: Snapshot, base: ServiceBaseline, step: Step,
                    plan: PhasePlan) -> GateResult:
    """Pods roll: the DaemonSet's budget. A Service write: only a loss it caused is fatal."""
    if step.kind == kinds.DAEMONSET:
        return g.endpoints_hold(snap, base, plan.tolerance.get(base.service, 0))
    change = step.selector_change(base.service)
    if change is not None:
        return g.switch_loss(snap, base, *change)
    selector = o.dig(snap.services.get(base.service) or {}, "spec", "selector") or {}
    return g.switch_loss(snap, base, selector, selector)


def _fail_rollout(backend: Applier, rec: PhaseRecord, step: Step, base: Snapshot,
                  out: RolloutOutcome) -> NoReturn:
    if out.ds is None:
        backend.refuse(rec, f"DaemonSet/{step.name} disappeared during its rollout",
                       "find out who deleted it (operator cleanup, a deleted CR); plan again")
    counts = g.rollout_complete(out.ds).detail
    if out.blocked:
        backend.refuse(rec, f"DaemonSet/{step.name} cannot finish rolling out ({counts}): "
                       f"{out.blocked}", stalls.NODE_HINT)
    pods = backend.fresh(base).pods_of(step.name)
    where, hint = stalls.where_stuck(backend.kube, backend.namespace, step.name, pods,
                                     step.pod_labels(), backend.settings.timeout)
    backend.refuse(rec, f"DaemonSet/{step.name} made no progress for {out.stalled_for:.0f}s "
                   f"(--timeout {backend.settings.timeout:g}s; {counts}); {where}", hint)


def said(ctx: PlanContext, work: PhaseWork, step: Step, before: Snapshot, after: Snapshot
         ) -> list[str]:
    """What `wait` would wait for after this step (`ctx`: on `after`), as `--dry-run` says it."""
    out = []
    ds = before.daemonsets.get(step.rollout_of() or "")
    labels = ", ".join(f"{k}={v}" if v is not None else f"no {k}"
                       for k, v in step.pod_labels().items())
    if step.pod_by_pod and step.name in before.daemonsets:
        pods = [p for p in before.pods_of(step.name) if not p.deleting]
        out.append(f"DaemonSet/{step.name}'s {counted(len(pods), 'pod')} relabelled in place, "
                   "none restarted" if step.type == "relabel-pods" else
                   f"DaemonSet/{step.name}'s {counted(len(pods), 'old pod')} deleted one node at "
                   "a time, each after the previous node's new pod is Ready (--roll-on-delete)")
    elif ds is not None and o.update_strategy(ds) == "OnDelete":
        return []  # the template change rolls nothing (`afterwrite.wait`)
    elif ds is not None and step.rolls_pods():
        desired = g.rollout_counts(ds)[2]
        out.append(f"the rollout of DaemonSet/{step.name}: {counted(desired, 'pod')} replaced, "
                   f"at most {o.max_unavailable(ds, desired)} unavailable at a time")
    for r in work.module.after_write(ctx, step):
        check, _, name = r.name.partition("/")
        if check == "rollout-complete":
            continue  # the rollout line above
        if check == "pods-labelled":
            out.append(f"every pod of DaemonSet/{name} to carry {labels}" if labels else
                       f"every pod of DaemonSet/{name} to carry its new template's labels")
        elif check == "endpointslices":
            ready = after.endpoints_of(name).ready_total
            out.append(f"the EndpointSlices of Service/{name} to list exactly its {ready} "
                       "Ready pods")
        else:
            out.append(f"{r.name}: {r.detail}")
    return out


def baselines_said(plan: PhasePlan) -> list[str]:
    """The no-loss gates the run checks after every write of the phase."""
    out = []
    for base in plan.guarded:
        budget = plan.tolerance.get(base.service, 0)
        where = " per node" if base.local else ""
        out.append(f"Service/{base.service} to keep its {base.total} ready endpoints{where} "
                   + (f"(at most {budget} missing while pods roll)" if budget
                      else "(none lost)"))
    return out
