"""OnDelete DaemonSets rolled by the tool (`RollPods`, `--roll-on-delete`): one node's outdated pod
deleted at a time, the next after its replacement is Ready; the one step run pod by pod."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn

from migrator.engine import executor, interrupts, stalls
from migrator.engine.loop import Applier, PhaseWork
from migrator.engine.progress import StepEvent
from migrator.model import halfrolls, kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.steps import RollPods, Step


def roll(backend: Applier, phase: PhaseWork, step: Step) -> None:
    """Delete the pods `halfrolls.stale_pods` names, one node at a time, each after the
    previous node's new pod is Ready (any half-roll is finished too)."""
    assert isinstance(step, RollPods), f"{step.type} is not run pod by pod"
    while True:
        snap = backend.snapshot()
        ds = snap.daemonsets.get(step.daemonset)
        if ds is None:
            return
        want = {k: o.template_labels(ds).get(k) for k in step.label_keys}
        stale = halfrolls.stale_pods(snap, ds, step.label_keys)
        if not stale:
            phase.mark(step, "done")
            backend.save()
            return
        if any(not p.ready for p in snap.pods_of(step.daemonset)):
            _wait_ready(backend, phase, step, snap)  # e.g. a pod still starting after a stop
            continue
        pod = stale[0]
        with interrupts.shielded():  # a signal stops the run once this delete is answered
            phase.mark(step, "intent")
            backend.save()
            executor.delete_pod(backend.kube, backend.namespace, pod.name, pod.uid)
            backend.result.writes += 1
        backend.listener.step(StepEvent(phase.rec.number, step, "writing"))

        def node_back(pod: PodView = pod, snap: Snapshot = snap,
                      want: dict[str, str | None] = want) -> list[GateResult]:
            ok = any(p.node == pod.node and not p.deleting and p.ready and p.uid != pod.uid
                     and all(p.labels.get(k) == v for k, v in want.items())
                     for p in backend.fresh(snap).pods_of(step.daemonset))
            return [GateResult(f"node-back/{pod.node}", ok, f"new pod on {pod.node}")]

        if not _waited(backend, node_back):
            _stuck(backend, phase, step, [p for p in backend.fresh(snap).pods_of(step.daemonset)
                                          if p.node == pod.node], want,
                   f"the new pod on {pod.node} did not become Ready within "
                   f"{backend.settings.timeout:g}s")


def _waited(backend: Applier, gates: Callable[[], list[GateResult]]) -> bool:
    deadline = backend.clock.monotonic() + backend.settings.timeout
    return all(r.ok for r in backend.waiter.until(gates, deadline, wake_kind=kinds.POD))


def _wait_ready(backend: Applier, phase: PhaseWork, step: RollPods, snap: Snapshot) -> None:
    """Every pod Ready before another node's pod is deleted: waited for within `--timeout`,
    then refused naming where it is stuck and what helps (engine/stalls.py)."""

    def ready() -> list[GateResult]:
        pods = backend.fresh(snap).pods_of(step.daemonset)
        return [GateResult(f"pods-ready/{step.daemonset}", all(p.ready for p in pods),
                           "every pod Ready")]

    if not _waited(backend, ready):
        fresh = backend.fresh(snap)
        ds = fresh.daemonsets.get(step.daemonset) or {}
        _stuck(backend, phase, step, fresh.pods_of(step.daemonset),
               {k: o.template_labels(ds).get(k) for k in step.label_keys}, None)


def _stuck(backend: Applier, phase: PhaseWork, step: RollPods, pods: Sequence[PodView],
           want: dict[str, str | None], message: str | None) -> NoReturn:
    """Refused: `message`, or where the pods are stuck, and what helps."""
    where, hint = stalls.where_stuck(backend.kube, step.daemonset, pods, want,
                                     namespace=backend.namespace,
                                     timeout=backend.settings.timeout)
    backend.refuse(phase.rec, f"DaemonSet/{step.daemonset}: "
                   + (message or f"{where}; not deleting another node's pod"), hint)
