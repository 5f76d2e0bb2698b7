"""Carrying out a stack change (`model/stackchange.py` plans it): each step's intent recorded in
the state's `stackChange` before its write and done with the next save, so rerunning the command
resumes; each step first asks whether the cluster already holds. `rollback` undoes what the
record says. A node counts as served again only by a pod of the new stack's DaemonSets
(`engine/gaps.py` measures), never by an old pod the garbage collector has not reached yet."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from migrator.engine import stacknodes
from migrator.engine.clock import Clock
from migrator.engine.gaps import GapMeter
from migrator.engine.progress import EndpointProgress, Listener
from migrator.engine.state.document import State, stamp
from migrator.errors import APIConflict, APINotFound, GateFailed, UsageError
from migrator.kube.client import Kube
from migrator.model import aliasing, kinds
from migrator.model import objects as o
from migrator.model import stackchange as sc
from migrator.model.phasestatus import PhaseStatus
from migrator.model.stacks import Catalog

Obj = dict[str, Any]
IN_PROGRESS, COMPLETED, ROLLED_BACK = (PhaseStatus.IN_PROGRESS.value, PhaseStatus.COMPLETED.value,
                                       PhaseStatus.ROLLED_BACK.value)
POLL_SECONDS = 0.5
# Seconds between two looks, while nodes wait, for nodes deleted meanwhile.
DELETED_EVERY = 10.0
# What `keep-service` records of a kept Service's spec, to create it again the same (`_live`).
KEPT_SPEC = ("type", "clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "ports",
             "internalTrafficPolicy", "sessionAffinity")


class Saver(Protocol):
    """`RunSession.save`: `later` keeps a confirmation back for the next save."""

    def __call__(self, state: State, *, later: bool = False) -> None: ...


@dataclass
class StackRun:
    kube: Kube
    namespace: str
    catalog: Catalog
    clock: Clock
    listener: Listener
    state: State
    save: Saver
    timeout: float = 600.0
    max_gap: float = 180.0
    meter: GapMeter | None = None
    heartbeat: Callable[[], None] = lambda: None  # the run lock renewed while a wait lasts

    @property
    def record(self) -> Obj:
        assert self.state.stack_change is not None
        return self.state.stack_change

    def steps(self) -> Obj:
        return self.record.setdefault("steps", {})  # type: ignore[no-any-return]

    def mark(self, step: sc.StackStep, status: str, **originals: Any) -> None:
        entry = self.steps().setdefault(step.id, {"action": step.action, "kind": step.kind,
                                                  "name": step.name})
        entry.update(originals)
        entry["status"], entry["at"] = status, stamp(self.clock.now())
        # "done" confirms the intent (or a wait) and rides on the next save: a rerun redoes a
        # step not recorded done, and each step first asks whether the cluster holds already
        self.save(self.state, later=status == "done")


def begin(state: State, change: sc.ChangePlan, now: str) -> Obj:
    """The record of this change: a new one, or the one a stopped run left (same target). The
    history says a change started (or resumed), so `status` names it while its steps run."""
    record = state.stack_change or {}
    if record.get("status") == COMPLETED and record.get("to") == change.target \
            and change.old_cr is None:
        return record  # run again after it completed: its record (rollback's originals) stays
    if record.get("status") == IN_PROGRESS:
        if record.get("to") != change.target:
            raise UsageError(
                f"A change to the {record.get('to')} stack is in progress (started "
                f"{record.get('started')}).", "finish it by running that change-stack again, "
                "or undo it with change-stack --rollback")
        state.log("stack-change-start", to=change.target, resumed=True)
        return record
    state.stack_change = {"to": change.target, "from": change.source, "status": IN_PROGRESS,
                          "started": now, "newCr": dict(change.new_cr),
                          "oldCr": change.old_cr, "steps": {}, "gaps": {}}
    state.log("stack-change-start", to=change.target)
    return state.stack_change


def _cr(run: StackRun, kind: str, name: str) -> Obj | None:
    return next((c for c in run.kube.list(kinds.BY_KIND[kind]).items if o.name(c) == name), None)


def _service(run: StackRun, name: str) -> Obj | None:
    return run.kube.get(kinds.SERVICE, name, run.namespace)


def _wait(run: StackRun, what: str, done: Callable[[], bool]) -> None:
    deadline = run.clock.monotonic() + run.timeout
    said = False
    while True:
        run.heartbeat()
        if run.meter is not None:
            run.meter.sample()
            for service, (ready, baseline) in run.meter.served().items():  # shown on change
                run.listener.endpoints(EndpointProgress(service, ready, baseline))
        if done():
            return
        if run.clock.monotonic() > deadline:
            raise GateFailed(f"{what}: not within {run.timeout:.0f} s.",
                             "run the same change-stack again to resume, or change-stack "
                             "--rollback")
        if not said:
            run.listener.message(f"waiting: {what}")
            said = True
        run.clock.sleep(POLL_SECONDS)


def _keep(run: StackRun, step: sc.StackStep) -> None:
    old_kind = run.catalog.stack(sc.source_of(run.record["to"])).cr.kind
    svc = _service(run, step.name)
    if svc is None or sc.kept(svc, old_kind):
        return
    spec = svc.get("spec") or {}
    run.mark(step, "intent", ownerReferences=o.meta(svc).get("ownerReferences") or [],
             **_originals(svc), spec={k: spec[k] for k in KEPT_SPEC if k in spec})
    _keep_from(run, svc, old_kind)


def _originals(svc: Obj) -> Obj:
    """What a Service's undo puts back: its labels, annotations and selector."""
    return {"labels": dict(o.meta(svc).get("labels") or {}),
            "annotations": dict(o.meta(svc).get("annotations") or {}),
            "selector": dict((svc.get("spec") or {}).get("selector") or {})}


def _live(run: StackRun, name: str) -> Obj | None:
    """The kept Service as it stands; garbage-collected after all (its old operator re-rendered
    it, owner included), created again as `keep-service` recorded it. None: never kept."""
    svc = _service(run, name)
    kept = (run.record.get("steps") or {}).get(f"{sc.KEEP}/Service/{name}") or {}
    if svc is not None or not kept.get("spec"):
        return svc
    meta = {"name": name, "namespace": run.namespace, "labels": kept.get("labels") or {},
            "annotations": kept.get("annotations") or {}}
    try:
        svc = run.kube.create({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
            **kept["spec"], "selector": kept.get("selector") or {}}}, kind=kinds.SERVICE)
    except APIConflict:  # created meanwhile (a rerun, the new operator)
        svc = _service(run, name)
    run.listener.message(f"warning: Service/{name} was garbage-collected with the old CR (its "
                         "operator re-rendered it, owner included, just before the delete): "
                         f"created again with clusterIP {kept['spec'].get('clusterIP')}")
    run.state.log("stack-service-recreated", service=name)
    return svc


def _retarget(run: StackRun, step: sc.StackStep) -> None:
    """The kept Service becomes the alias phase 2 would make (`model/aliasing.py`)."""
    comp = sc.component_for(run.catalog, "gpucluster", step.name)
    svc = _live(run, step.name)
    if svc is None or sc.retargeted(svc, run.catalog, comp):
        return
    _wait(run, f"Service/{comp.service} rendered by the GPUCluster",
          lambda: _service(run, comp.service) is not None)
    source = _service(run, comp.service) or {}
    owner = aliasing.owner_of(list(run.kube.list(kinds.GPU_CLUSTER).items))
    want = aliasing.alias_body(run.namespace, run.catalog.common, comp, source, owner)["metadata"]
    run.mark(step, "intent", **_originals(svc))
    # exactly the alias's labels and annotations: the old operator's scrape annotation or app
    # label kept would have each new exporter pod scraped twice
    _put_back(run, svc, want["labels"], want["annotations"], want.get("ownerReferences"),
              comp.app_selector)


def _put_back(run: StackRun, svc: Obj, labels: Mapping[str, str],
              annotations: Mapping[str, str], owners: Any, selector: Mapping[str, str]) -> None:
    meta, spec = o.meta(svc), svc.get("spec") or {}
    run.kube.patch(kinds.SERVICE, o.name(svc), run.namespace, {
        "metadata": {"labels": sc.selector_patch(meta.get("labels") or {}, labels),
                     "annotations": sc.selector_patch(meta.get("annotations") or {},
                                                      annotations),
                     "ownerReferences": owners},
        "spec": {"selector": sc.selector_patch(spec.get("selector") or {}, selector)}})


def _delete(run: StackRun, step: sc.StackStep) -> None:
    live = _cr(run, step.kind, step.name)
    if live is None:
        return
    run.mark(step, "intent", uid=o.meta(live).get("uid"))
    # The old operator re-renders the Services whole, owner included, on any reconcile (a
    # node label changed): kept again right before the delete, the window is one request.
    for service in sc.stable_names(run.catalog):
        _keep_from(run, _service(run, service), step.kind)
    with contextlib.suppress(APINotFound):  # gone meanwhile: what the step wants
        run.kube.delete(kinds.BY_KIND[step.kind], step.name, uid=o.meta(live).get("uid"))


def _create(run: StackRun, step: sc.StackStep) -> None:
    if _cr(run, step.kind, step.name) is not None:
        return
    body = sc.clean_cr(run.record["newCr"])
    run.mark(step, "intent")
    created = run.kube.create(body, kind=kinds.BY_KIND[step.kind])
    run.steps()[step.id]["uid"] = o.meta(created).get("uid")


def _await_gone(run: StackRun, step: sc.StackStep) -> None:
    """Wait for the old CR to go, stripping its owner from the stable Services again meanwhile
    (its operator may re-render them whole)."""
    def keep() -> None:
        for service in sc.stable_names(run.catalog):
            _keep_from(run, _live(run, service), step.kind)

    _until_gone(run, step.kind, step.name, keep)


def _until_gone(run: StackRun, kind: str, name: str, meanwhile: Callable[[], None] = lambda: None
                ) -> None:
    """Wait for a CR to go, `meanwhile` on every poll. A GPUCluster stays until its operator has
    drained its DCGM DaemonSets and dropped its finalizer: past --timeout, the finalizers are
    named."""
    def gone() -> bool:
        meanwhile()
        return _cr(run, kind, name) is None

    try:
        _wait(run, f"{kind}/{name} deleted", gone)
    except GateFailed:
        held = o.meta(_cr(run, kind, name) or {}).get("finalizers")
        if not held:
            raise
        raise GateFailed(
            f"{kind}/{name} is still being deleted after {run.timeout:.0f} s: its finalizers "
            f"hold it ({', '.join(held)}), and the GPU Operator removes its own once its DCGM "
            "pods are gone.", "check that the GPU Operator is running and what holds the CR "
            f"(`kubectl describe {kinds.BY_KIND[kind].plural} {name}`), then run the same "
            "change-stack again to resume, or change-stack --rollback") from None


def _leave_deleted(run: StackRun, meter: GapMeter) -> None:
    """Stop waiting for the nodes deleted meanwhile, said and recorded (the baseline a rerun
    resumes from leaves them too)."""
    deleted = stacknodes.deleted(run.kube, run.namespace, run.catalog, run.record["to"],
                                 meter.waiting_nodes())
    for name, nodes in sorted(deleted.items()):
        for node in sorted(nodes):
            meter.forget(name, node)
            run.listener.message(f"Service/{name}: node {node} is not waited for: it was "
                                 "deleted (the new stack's DaemonSet made every pod it wants, "
                                 "none there)")
            run.state.log("stack-node-deleted", service=name, node=node)
        run.record["baseline"] = {k: sorted(v) for k, v in meter.nodes.items()}
        run.save(run.state)


def _serving(run: StackRun, step: sc.StackStep) -> None:
    """Wait until every node served at the start is served again by the new stack's pods (the
    old ones may outlive their CR a while: the garbage collector reaches them in its own time),
    but for nodes deleted meanwhile; a gap over --max-gap fails."""
    meter = run.meter
    if meter is None:
        return
    looked = [float("-inf")]  # when `_leave_deleted` last looked

    def back() -> bool:
        for service in sc.stable_names(run.catalog):
            _live(run, service)
        now = run.clock.monotonic()
        if not meter.all_served() and now - looked[0] >= DELETED_EVERY:
            looked[0] = now
            _leave_deleted(run, meter)
        over = meter.over(run.max_gap)
        if over:
            run.record["gaps"] = meter.as_record()
            raise GateFailed(
                f"nodes without a Ready endpoint behind the stable names for longer than "
                f"--max-gap {run.max_gap:.0f} s: {', '.join(over)}.",
                "see why their new pods are not Ready (`kubectl -n "
                f"{run.namespace} get pods -o wide`; none scheduled: a node whose "
                "`nvidia.com/gpu.deploy.*` label for the new stack says \"false\" keeps that "
                "component off it, docs/runbook.md 'Changing stack'), then run the same "
                "change-stack again")
        # the pods are listed only once every node has some Ready endpoint again, and only
        # while one is served by a pod not judged yet
        return meter.all_served() and meter.renewed(lambda: {
            pod.uid for pod in stacknodes.new_stack_pods(run.kube, run.namespace, run.catalog,
                                                         run.record["to"])})

    _wait(run, "every node served again by the stable names", back)
    run.record["gaps"] = meter.as_record()
    run.save(run.state)


# What each step of a change does (`run-phases` is `commands.apply`'s, then `finish`).
ACTIONS: dict[str, Callable[[StackRun, sc.StackStep], None]] = {
    sc.KEEP: _keep, sc.DELETE: _delete, sc.GONE: _await_gone, sc.RETARGET: _retarget,
    sc.CREATE: _create, sc.SERVING: _serving}


def execute(run: StackRun, change: sc.ChangePlan) -> None:
    """Every step up to (not including) `run-phases`, each recorded before and after."""
    if run.meter is not None:
        run.meter.sample()
    for step in change.steps:
        if step.action == sc.PHASES:
            return
        if (run.steps().get(step.id) or {}).get("status") == "done":  # phase 3 may move it on
            continue
        run.listener.message(f"{step.action} {step.kind}/{step.name}: {step.detail}")
        ACTIONS[step.action](run, step)
        run.mark(step, "done")


def finish(run: StackRun, change: sc.ChangePlan) -> None:
    """The new stack's phases ran: the change is completed."""
    for step in change.steps:
        if step.action == sc.PHASES:
            run.steps()[step.id] = {"action": step.action, "kind": step.kind, "name": step.name,
                                    "status": "done", "at": stamp(run.clock.now())}
    _close(run, COMPLETED, "stack-changed")


def _close(run: StackRun, status: str, event: str) -> None:
    run.record["status"], run.record["finished"] = status, stamp(run.clock.now())
    run.state.log(event, to=run.record.get("to"))
    run.save(run.state)


def rollback(run: StackRun) -> list[str]:
    """Undo the recorded change: new CR deleted (Services kept), old CR created again, each kept
    Service's labels, annotations, selector and owner put back. Returns what it did."""
    record = run.record
    record["rollback"] = stamp(run.clock.now())  # a stopped undo is resumed as an undo
    run.save(run.state)
    steps: Mapping[str, Obj] = record.get("steps") or {}
    done: list[str] = []
    create = next((s for s in steps.values() if s["action"] == sc.CREATE), None)
    if create is not None:
        for name in sc.stable_names(run.catalog):
            _keep_from(run, _service(run, name), create["kind"])
            done.append(f"Service/{name}: out of {create['kind']}/{create['name']}'s reach")
        live = _cr(run, create["kind"], create["name"])
        if live is not None:
            run.kube.delete(kinds.BY_KIND[create["kind"]], create["name"],
                            uid=o.meta(live).get("uid"))
            done.append(f"deleted {create['kind']}/{create['name']}")
        _until_gone(run, create["kind"], create["name"])
    old = record.get("oldCr")
    delete = next((s for s in steps.values() if s["action"] == sc.DELETE), None)
    recreated = None
    if delete is not None and old:
        recreated = _cr(run, delete["kind"], delete["name"])
        if recreated is None:
            recreated = run.kube.create(sc.clean_cr(old), kind=kinds.BY_KIND[delete["kind"]])
            done.append(f"created {delete['kind']}/{delete['name']} again")
    for s in steps.values():
        if s["action"] == sc.KEEP and "selector" in s and (svc := _service(run, s["name"])):
            refs = [{**r, "uid": o.meta(recreated).get("uid")} for r in s.get("ownerReferences")
                    or [] if recreated is not None and r.get("kind") == recreated.get("kind")]
            _put_back(run, svc, s["labels"], s["annotations"], refs or None, s["selector"])
            done.append(f"Service/{s['name']}: labels, annotations, selector and owner put back")
    _close(run, ROLLED_BACK, "stack-change-rolled-back")
    return done


def _keep_from(run: StackRun, svc: Obj | None, kind: str) -> None:
    """The Service (as read) out of `kind`'s reach: that owner gone from its references."""
    if svc is None or sc.kept(svc, kind):
        return
    name = o.name(svc)
    refs = o.meta(svc).get("ownerReferences") or []
    rest = [r for r in refs if r.get("kind") != kind]
    try:  # guarded: a failed test is fine when the live Service holds no such owner already
        run.kube.patch(kinds.SERVICE, name, run.namespace, [
            {"op": "test", "path": "/metadata/ownerReferences", "value": refs},
            {"op": "replace", "path": "/metadata/ownerReferences", "value": rest}
            if rest else {"op": "remove", "path": "/metadata/ownerReferences"}], patch_type="json")
    except (APIConflict, APINotFound):
        live = _service(run, name)
        if live is None or not sc.kept(live, kind):
            raise

