"""OnDelete DaemonSets: the tool rolls the pods itself (`RollPods`, phase 1 with
`--roll-on-delete`), deleting one node's outdated pod at a time and waiting for its
replacement to turn Ready before the next. The one step the loop runs pod by pod instead of
as a single write (`Step.pod_by_pod`). A part of the apply back end (engine/applying.py) in its
own module: it works through that back end's public face (`loop.Applier`: reads, saves,
refusal) and the phase being run (`loop.PhaseWork`).
"""

from __future__ import annotations

from migrator.engine import executor, interrupts
from migrator.engine.loop import Applier, PhaseWork
from migrator.engine.progress import StepEvent
from migrator.model import gates as g
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
        unready = [p for p in snap.pods_of(step.daemonset) if not p.ready]
        if unready:
            backend.refuse(rec, f"DaemonSet/{step.daemonset}: pods not ready on "
                     f"{', '.join(g.not_ready_where(unready)[:10])}; not deleting "
                     "another node's pod", "fix those nodes, then rerun to resume")
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
            backend.refuse(rec, f"DaemonSet/{step.daemonset}: the new pod on {pod.node} did not "
                     f"become Ready within {backend.settings.timeout:g}s",
                     "fix the node, then rerun to resume")
