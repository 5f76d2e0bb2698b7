"""OnDelete DaemonSets: the tool rolls the pods itself (`RollPods`, phase 1 with
`--roll-on-delete`), deleting one node's outdated pod at a time and waiting for its
replacement to turn Ready before the next. The one step the loop runs pod by pod instead of
as a single write (`Step.pod_by_pod`). A part of the apply back end (engine/applying.py) in its
own module: it works through that back end's public face (`loop.Applier`: reads, saves,
refusal) and the phase being run (`loop.PhaseWork`).
"""

from __future__ import annotations

from migrator.engine import executor, interrupts, stalls
from migrator.engine.loop import Applier, PhaseWork
from migrator.engine.progress import StepEvent
from migrator.engine.state import PhaseRecord
from migrator.model import halfrolls, kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.snapshot import Snapshot
from migrator.model.steps import RollPods, Step


def roll(backend: Applier, phase: PhaseWork, step: Step) -> None:
    """Delete pods whose labels differ from the template, or of an older template while the
    controller counts pods not updated (model/halfrolls.py), one node at a time, each after
    the previous node's new pod is Ready."""
    assert isinstance(step, RollPods), f"{step.type} is not run pod by pod"
    rec = phase.rec
    while True:
        snap = backend.snapshot()
        ds = snap.daemonsets.get(step.daemonset)
        if ds is None:
            return
        want = {k: o.template_labels(ds).get(k) for k in step.label_keys}
        stale = halfrolls.stale_pods(snap, ds, step.label_keys)  # any half-roll is finished
        if not stale:
            phase.mark(step, "done")
            backend.save()
            return
        if any(not p.ready for p in snap.pods_of(step.daemonset)):
            _wait_ready(backend, rec, step, snap)  # e.g. a pod still starting after a stop
            continue
        pod = stale[0]
        with interrupts.shielded():  # a signal stops the run once this delete is answered
            phase.mark(step, "intent")
            backend.save()
            executor.delete_pod(backend.kube, backend.namespace, pod.name, pod.uid)
            backend.result.writes += 1
        backend.listener.step(StepEvent(rec.number, step, "writing"))
        deadline = backend.clock.monotonic() + backend.settings.timeout

        def node_back(node: str = pod.node, snap: Snapshot = snap, gone: str = pod.uid,
                      want: dict[str, str | None] = want) -> list[GateResult]:
            fresh = backend.fresh(snap)
            new = [p for p in fresh.pods_of(step.daemonset)
                   if p.node == node and not p.deleting]
            ok = any(p.ready and all(p.labels.get(k) == v for k, v in want.items())
                     and p.uid != gone for p in new)
            return [GateResult(f"node-back/{node}", ok, f"new pod on {node}")]

        results = backend.waiter.until(node_back, deadline, wake_kind=kinds.POD)
        if not all(r.ok for r in results):
            fresh = backend.fresh(snap)
            _, hint = stalls.where_stuck(
                backend.kube, step.daemonset,
                [p for p in fresh.pods_of(step.daemonset) if p.node == pod.node], want,
                namespace=backend.namespace, timeout=backend.settings.timeout)
            backend.refuse(rec, f"DaemonSet/{step.daemonset}: the new pod on {pod.node} did not "
                     f"become Ready within {backend.settings.timeout:g}s", hint)


def _wait_ready(backend: Applier, rec: PhaseRecord, step: RollPods, snap: Snapshot) -> None:
    """Every pod of the DaemonSet Ready before another node's pod is deleted: waited for
    within `--timeout` (a pod still starting, as a rerun after a stop finds it), then refused
    naming where it is stuck and what helps (engine/stalls.py: a longer `--timeout` when the
    pods are only starting, the nodes when something is wrong with them)."""
    deadline = backend.clock.monotonic() + backend.settings.timeout

    def ready() -> list[GateResult]:
        pods = backend.fresh(snap).pods_of(step.daemonset)
        return [GateResult(f"pods-ready/{step.daemonset}", all(p.ready for p in pods),
                           "every pod Ready")]

    if all(r.ok for r in backend.waiter.until(ready, deadline, wake_kind=kinds.POD)):
        return
    fresh = backend.fresh(snap)
    ds = fresh.daemonsets.get(step.daemonset) or {}
    where, hint = stalls.where_stuck(
        backend.kube, step.daemonset, fresh.pods_of(step.daemonset),
        {k: o.template_labels(ds).get(k) for k in step.label_keys},
        namespace=backend.namespace, timeout=backend.settings.timeout)
    backend.refuse(rec, f"DaemonSet/{step.daemonset}: {where}; not deleting another node's "
                   "pod", hint)
