"""Phase 1's pod work. In place (`RelabelPods`): each pod on the previous revision gets the new
template's labels and hash by a JSON patch testing its uid and hash, if the revisions differ in
labels only. OnDelete DaemonSets rolled by the tool (`RollPods`, `--roll-on-delete`): one node's
outdated pod deleted at a time, the next after its replacement is Ready (run pod by pod)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

from migrator.engine import executor, interrupts, stalls
from migrator.engine.loop import Applier, PhaseWork
from migrator.engine.progress import StepEvent
from migrator.errors import (
    APIConflict,
    APIInvalid,
    APINotFound,
    APITestFailed,
    APIWebhookDenied,
)
from migrator.model import gates as g
from migrator.model import halfrolls, kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.halfrolls import HASH_LABEL, POD_GENERATION, TEMPLATE_GENERATION
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.steps import RelabelPods, RollPods, Step, labels_match
from migrator.model.wording import counted

Obj = dict[str, Any]
# Pod patches in flight: client-go's default burst (`rest.DefaultBurst`), enough for 5,000
# patches in seconds, few enough that priority and fairness never queues the tool behind itself.
MAX_IN_FLIGHT = 10
# What to do when the DaemonSet controller does not act in time and the DaemonSet stays held.
CONTROLLER_FIX = ("check the kube-controller-manager, then rerun to resume (the DaemonSet's own "
                  "updateStrategy is restored by that run)")


def template_of(revision: Mapping[str, Any]) -> Obj:
    """The pod template a ControllerRevision's `data` restores (`$patch` set aside)."""
    template = dict(o.dig(revision, "data", "spec", "template") or {})
    template.pop("$patch", None)
    return template


def is_current(revision: Mapping[str, Any], ds: Mapping[str, Any]) -> bool:
    """`revision`, the DaemonSet's highest, is its controller's revision of the current
    template: the controller has observed the current generation (kubernetes
    pkg/controller/daemon: `syncDaemonSet` records it only after `constructHistory` has made
    or renumbered the current revision above every other) and the labels are the template's.
    Not the whole template compared: a kube-controller-manager older than the API server
    serialises it otherwise (before v1.34 a zero `creationTimestamp` as `null`, which v1.34
    omits; a field it does not know, dropped), and would never match during an upgrade."""
    labels = o.dig(template_of(revision), "metadata", "labels") or {}
    return o.observed(ds) and labels == o.template_labels(ds)


def _sans_nulls(value: Any) -> Any:
    """`value` without its null fields: decoded into the API's types, a null field and an absent
    one are the same zero value (so a revision written before v1.34 proves the same as one
    written after, though only the older one spells `creationTimestamp: null`)."""
    if isinstance(value, Mapping):
        return {k: _sans_nulls(v) for k, v in value.items() if v is not None}
    return [_sans_nulls(v) for v in value] if isinstance(value, list) else value


def only_labels_differ(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The proof the in-place path stands on: the revisions' templates differ in labels only."""
    def sans_labels(template: Obj) -> Obj:
        return {**template, "metadata": {k: v for k, v in (template.get("metadata") or {}).items()
                                         if k != "labels"}}
    return bool(_sans_nulls(sans_labels(template_of(old)))
                == _sans_nulls(sans_labels(template_of(new))))


def _pointer(key: str) -> str:
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


def pod_patch(pod: PodView, old: Mapping[str, str], new: Mapping[str, str],
              new_hash: str, generation: str | None = None) -> list[Obj]:
    """A JSON patch moving the pod from the old template's labels to the new one's, applying
    only to this pod (uid) while it still carries the old hash."""
    ops: list[Obj] = [{"op": "test", "path": "/metadata/uid", "value": pod.uid},
                      {"op": "test", "path": _pointer(HASH_LABEL),
                       "value": pod.labels.get(HASH_LABEL)}]
    for key in sorted((set(old) | set(new)) - {HASH_LABEL, POD_GENERATION}):
        want = new.get(key)
        if pod.labels.get(key) == want:
            continue
        ops.append({"op": "remove", "path": _pointer(key)} if want is None else
                   {"op": "add", "path": _pointer(key), "value": want})
    ops.append({"op": "replace", "path": _pointer(HASH_LABEL), "value": new_hash})
    if generation is not None and pod.labels.get(POD_GENERATION) not in (None, generation):
        ops.append({"op": "replace", "path": _pointer(POD_GENERATION), "value": generation})
    return ops


def _revisions(backend: Applier, ds: Obj) -> list[Obj]:
    """The DaemonSet's ControllerRevisions: listed by its selector, owned by its uid."""
    selector = ",".join(f"{k}={v}" for k, v in sorted(
        (o.dig(ds, "spec", "selector", "matchLabels") or {}).items()))
    uid = o.meta(ds).get("uid")
    return [r for r in backend.kube.list(kinds.CONTROLLER_REVISION, backend.namespace,
                                         label_selector=selector or None).items
            if any(ref.get("uid") == uid for ref in o.meta(r).get("ownerReferences") or [])]


def relabel(backend: Applier, phase: PhaseWork, step: Step) -> None:
    """Wait for the controller's revision of the relabelled template, then patch every pod
    the proof allows, at most `MAX_IN_FLIGHT` at a time; the rest is said and left to roll."""
    assert isinstance(step, RelabelPods), f"{step.type} is not relabelled in place"
    rec, kube, name = phase.rec, backend.kube, step.daemonset
    backend.record(phase, step, "intent")
    backend.listener.step(StepEvent(rec.number, step, "writing"))
    found: list[tuple[Obj, list[Obj]]] = []

    def current() -> list[GateResult]:
        found.clear()
        ds = kube.get(kinds.DAEMONSET, name, backend.namespace)
        if ds is None:
            return [GateResult(f"revision/{name}", True, "DaemonSet gone")]
        revs = sorted(_revisions(backend, ds), key=lambda r: int(r.get("revision") or 0))
        ok = bool(revs) and is_current(revs[-1], ds)
        if ok:
            found.append((ds, revs))
        generation = o.meta(ds).get("generation")
        why = "" if ok else " not created yet" if o.observed(ds) else (
            f" not confirmed yet (generation {generation} not observed)")
        return [GateResult(f"revision/{name}", ok,
                           f"the controller's revision of the relabelled template{why}")]

    results = backend.until(current, kinds.CONTROLLER_REVISION)
    if g.failed(results):
        backend.refuse(rec, f"DaemonSet/{name}: no ControllerRevision for its relabelled "
                       f"template within {backend.settings.timeout:g}s ({results[0].detail}); "
                       "it stays on OnDelete", CONTROLLER_FIX)
    done, left = _patch_pods(backend, phase, step, *found[0]) if found else (0, [])
    if done:
        _until_counted(backend, phase, step, len(left))
    backend.record(phase, step, "done", later=True)
    note = (f"DaemonSet/{name}: {counted(done, 'pod')} relabelled in place"
            + (f"; left to its rollout: {'; '.join(left)}" if left else ""))
    backend.listener.message(note)
    if left:
        backend.result.notes.append(note)
    backend.listener.step(StepEvent(rec.number, step, "done"))


def counted_updated(name: str, ds: Mapping[str, Any] | None, left: int) -> GateResult:
    """The DaemonSet controller counts the relabelled pods as updated: it has observed the
    current spec, and `updatedNumberScheduled` misses no node but those of pods `left` to roll.
    The controller reads pods and DaemonSets through separate informers, and counts from the
    same pod cache it rolls from: restoring RollingUpdate before it has seen the relabels would
    let it delete pods it still takes for old (`IsPodUpdated` compares their hash label)."""
    if ds is None:
        return GateResult(f"counted-updated/{name}", True, "DaemonSet gone")
    status, observed = ds.get("status") or {}, o.observed(ds)
    updated = int(status.get("updatedNumberScheduled") or 0)
    desired = int(status.get("desiredNumberScheduled") or 0)
    ok = observed and updated + left >= desired
    return GateResult(f"counted-updated/{name}", ok,
                      f"its controller counts {updated}/{desired} pods updated"
                      + (f", {left} left to roll" if left else "")
                      + ("" if observed else ", the current spec not observed yet"))


def _until_counted(backend: Applier, phase: PhaseWork, step: RelabelPods, left: int) -> None:
    """Wait for `counted_updated` before the strategy can be restored."""
    name = step.daemonset
    results = backend.until(lambda: [counted_updated(
        name, backend.kube.get(kinds.DAEMONSET, name, backend.namespace), left)],
        kinds.DAEMONSET)
    if g.failed(results):
        backend.refuse(phase.rec, f"DaemonSet/{name}: its controller has not counted the "
                       f"relabelled pods as updated within {backend.settings.timeout:g}s "
                       f"({results[0].detail}); it stays on OnDelete",
                       CONTROLLER_FIX)


def _patch_pods(backend: Applier, phase: PhaseWork, step: RelabelPods, ds: Obj,
                revs: list[Obj]) -> tuple[int, list[str]]:
    """(pods patched, why the others were left to roll)."""
    current = revs[-1]
    new_hash = o.labels(current).get(HASH_LABEL, "")
    by_hash = {o.labels(r).get(HASH_LABEL): r for r in revs}
    hash_key = backend.catalog.common.operator_hash_annotation
    if step.rendered is not None and o.annotations_of(ds).get(hash_key) != step.rendered:
        return 0, [f"the operator re-rendered it ({hash_key} "
                   f"{step.rendered} → {o.annotations_of(ds).get(hash_key)})"]
    pods = [p for p in backend.fresh(phase.decided).pods_of(step.daemonset)
            if not p.deleting and p.labels.get(HASH_LABEL) != new_hash]
    left: list[str] = []
    new_labels = o.template_labels(ds)
    # what a patch writes, for a pod whose answer was lost (its retry fails its own `test`)
    written = {**{k: v for k, v in new_labels.items() if k != POD_GENERATION},
               HASH_LABEL: new_hash}
    work: list[tuple[PodView, list[Obj]]] = []
    for pod in pods:
        old = by_hash.get(pod.labels.get(HASH_LABEL))
        if old is None or not only_labels_differ(old, current):
            left.append(f"{pod.name} (its revision differs from the current one in more "
                        "than labels)" if old is not None else
                        f"{pod.name} (on a revision no longer kept)")
            continue
        work.append((pod, pod_patch(pod, o.labels(template_of(old)), new_labels, new_hash,
                                    o.annotations_of(ds).get(TEMPLATE_GENERATION))))

    def send(item: tuple[PodView, list[Obj]]) -> str | None:
        """Why the pod is left to roll, or None once it carries the new labels. A refusal by
        admission (a policy's 422, a webhook's 403) leaves it to roll like a pod that changed:
        the rollout restarts it as `--rolling` would, and the note says why. RBAC's 403 is
        raised: a missing permission stops the run (exit 3), no pod restarted for it."""
        pod, ops = item
        try:
            backend.kube.patch(kinds.POD, pod.name, backend.namespace, ops, patch_type="json")
        except APITestFailed:  # changed since it was read, or patched already (a lost answer)
            now = backend.kube.get(kinds.POD, pod.name, backend.namespace)
            if now is not None and o.meta(now).get("uid") == pod.uid and labels_match(
                    o.labels(now), written):
                return None
            return f"{pod.name} (changed since it was read)"
        except (APIInvalid, APIWebhookDenied) as err:  # admission refused it
            return f"{pod.name} (its relabel refused: {err})"
        except (APIConflict, APINotFound):
            return f"{pod.name} (changed since it was read)"
        return None

    with interrupts.shielded(), ThreadPoolExecutor(MAX_IN_FLIGHT) as pool:
        answers = list(pool.map(send, work))
    backend.result.writes += len(work)
    left += [a for a in answers if a is not None]
    return len(work) - sum(a is not None for a in answers), left


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
            backend.record(phase, step, "done")
            return
        if any(not p.ready for p in snap.pods_of(step.daemonset)):
            _wait_ready(backend, phase, step, snap)  # e.g. a pod still starting after a stop
            continue
        pod = stale[0]
        with interrupts.shielded():  # a signal stops the run once this delete is answered
            backend.record(phase, step, "intent")
            executor.delete_pod(backend.kube, backend.namespace, pod.name, pod.uid)
            backend.result.writes += 1
        backend.listener.step(StepEvent(phase.rec.number, step, "writing"))

        def node_back(pod: PodView = pod, snap: Snapshot = snap,
                      want: dict[str, str | None] = want) -> list[GateResult]:
            ok = any(p.node == pod.node and not p.deleting and p.ready and p.uid != pod.uid
                     and all(p.labels.get(k) == v for k, v in want.items())
                     for p in backend.fresh(snap).pods_of(step.daemonset))
            return [GateResult(f"node-back/{pod.node}", ok, f"new pod on {pod.node}")]

        if g.failed(backend.until(node_back, kinds.POD)):
            _stuck(backend, phase, step, [p for p in backend.fresh(snap).pods_of(step.daemonset)
                                          if p.node == pod.node], want,
                   f"the new pod on {pod.node} did not become Ready within "
                   f"{backend.settings.timeout:g}s")


def _wait_ready(backend: Applier, phase: PhaseWork, step: RollPods, snap: Snapshot) -> None:
    """Every pod Ready before another node's pod is deleted: waited for within `--timeout`,
    then refused naming where it is stuck and what helps (engine/stalls.py)."""

    def ready() -> list[GateResult]:
        pods = backend.fresh(snap).pods_of(step.daemonset)
        return [GateResult(f"pods-ready/{step.daemonset}", all(p.ready for p in pods),
                           "every pod Ready")]

    if g.failed(backend.until(ready, kinds.POD)):
        fresh = backend.fresh(snap)
        ds = fresh.daemonsets.get(step.daemonset) or {}
        _stuck(backend, phase, step, fresh.pods_of(step.daemonset),
               {k: o.template_labels(ds).get(k) for k in step.label_keys}, None)


def _stuck(backend: Applier, phase: PhaseWork, step: RollPods, pods: Sequence[PodView],
           want: dict[str, str | None], message: str | None) -> NoReturn:
    """Refused: `message`, or where the pods are stuck, and what helps."""
    where, hint = stalls.where_stuck(backend.kube, backend.namespace, step.daemonset, pods,
                                     want, backend.settings.timeout)
    backend.refuse(phase.rec, f"DaemonSet/{step.daemonset}: "
                   + (message or f"{where}; not deleting another node's pod"), hint)
