"""The cluster as it would be after a step's write, in pure code: what `apply --dry-run`
plans each phase against. A server-side dry run persists nothing, so without this every later
phase would be planned against the unchanged cluster (phase 3 refusing because no pod carries
the common label yet, or previewing nothing because no alias exists yet).

Each write is projected as if it had taken effect and everything it waits for were over:

- labels (`SetLabels`) on the DaemonSet's metadata and pod template, and — when the template
  change rolls the pods (RollingUpdate) — on its pods, as if rolled out (same nodes, same
  readiness: a pod that is not Ready now is not Ready afterwards either);
- pods deleted one node at a time (`RollPods`): they carry the template's labels;
- an alias created (`CreateAlias`, with `monitoring.with_service` as the phases' what-if
  gates do), a selector replaced (`SetSelector`), an alias deleted (`DeleteAlias`);
- the EndpointSlices of every Service whose selection changed, as the EndpointSlice controller
  would write them: one endpoint per pod the selector matches, ready when the pod is.

Nothing here is evaluated against the API server: the preview says which waits these stand
for ("would wait for …", `engine/projecting.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from functools import singledispatch
from typing import Any

from migrator.model import monitoring
from migrator.model import objects as o
from migrator.model.snapshot import EndpointView, ServiceEndpoints, Snapshot
from migrator.model.stepbase import LabelMap
from migrator.model.steps import (
    CreateAlias,
    DeleteAlias,
    HoldStrategy,
    RelabelPods,
    RestoreStrategy,
    RollPods,
    SetLabels,
    SetSelector,
    Step,
)

Obj = dict[str, Any]


def after(snapshot: Snapshot, step: Step) -> Snapshot:
    """The snapshot as it would be once `step` was written and had taken effect."""
    return _project(step, snapshot)


def _relabel(labels: Mapping[str, str], change: LabelMap) -> dict[str, str]:
    out = dict(labels)
    for key, value in change.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def endpoints_for(snapshot: Snapshot, service: Obj) -> ServiceEndpoints:
    """What the EndpointSlice controller would list for this Service over these pods."""
    views = tuple(EndpointView(pod=p.name, node=p.node or None, ready=p.ready,
                               serving=p.ready, terminating=False)
                  for p in snapshot.pods_matching(o.dig(service, "spec", "selector") or {}))
    return ServiceEndpoints(o.name(service), views)


def _with_pods(snapshot: Snapshot, daemonset: str, change: LabelMap) -> Snapshot:
    """The DaemonSet's pods relabelled, and the endpoints of every Service selecting by one
    of the changed keys recomputed (who is selected may have changed)."""
    if not change:
        return snapshot
    pods = tuple(replace(p, labels=_relabel(p.labels, change))
                 if p.owner_kind == "DaemonSet" and p.owner_name == daemonset else p
                 for p in snapshot.pods)
    moved = replace(snapshot, pods=pods)
    keys = set(change)
    endpoints = dict(moved.endpoints)
    for name, svc in moved.services.items():
        if keys & set(o.dig(svc, "spec", "selector") or {}):
            endpoints[name] = endpoints_for(moved, svc)
    return replace(moved, endpoints=endpoints)


def _with_service(snapshot: Snapshot, service: Obj) -> Snapshot:
    """The Service created or replaced, with the endpoints its selector would have."""
    made = monitoring.with_service(snapshot, service)
    return replace(made, endpoints={**made.endpoints,
                                    o.name(service): endpoints_for(made, service)})


@singledispatch
def _project(step: Step, snapshot: Snapshot) -> Snapshot:
    raise TypeError(f"no projection for {type(step).__name__}")


@_project.register(SetLabels)
def _set_labels(step: SetLabels, snapshot: Snapshot) -> Snapshot:
    ds = snapshot.daemonsets.get(step.daemonset)
    if ds is None:
        return snapshot
    meta = dict(ds.get("metadata") or {})
    meta["labels"] = _relabel(o.labels(ds), step.meta_after)
    spec = dict(ds.get("spec") or {})
    template = dict(spec.get("template") or {})
    template["metadata"] = {**(template.get("metadata") or {}),
                            "labels": _relabel(o.template_labels(ds), step.template_after)}
    spec["template"] = template
    labelled = {**ds, "metadata": meta, "spec": spec}
    out = replace(snapshot, daemonsets={**snapshot.daemonsets, step.daemonset: labelled})
    if not step.rolls_pods() or o.update_strategy(ds) == "OnDelete":
        return out  # nothing rolls: the pods keep their labels (RollPods may delete them)
    return _with_pods(out, step.daemonset, step.template_after)


@_project.register(RollPods)
@_project.register(RelabelPods)
def _roll_pods(step: RollPods | RelabelPods, snapshot: Snapshot) -> Snapshot:
    ds = snapshot.daemonsets.get(step.daemonset)
    if ds is None:
        return snapshot
    template = o.template_labels(ds)
    return _with_pods(snapshot, step.daemonset, {k: template.get(k) for k in step.label_keys})


@_project.register(HoldStrategy)
@_project.register(RestoreStrategy)
def _strategy(step: HoldStrategy | RestoreStrategy, snapshot: Snapshot) -> Snapshot:
    ds = snapshot.daemonsets.get(step.daemonset)
    if ds is None:
        return snapshot
    hold = isinstance(step, HoldStrategy)
    spec = {**(ds.get("spec") or {}),
            "updateStrategy": {"type": "OnDelete"} if hold else dict(step.strategy)}
    annotations = {k: v for k, v in o.annotations_of(ds).items() if k != o.HELD_STRATEGY}
    if hold:
        annotations[o.HELD_STRATEGY] = json.dumps(dict(step.strategy), sort_keys=True)
    meta = {**(ds.get("metadata") or {}), "annotations": annotations}
    return replace(snapshot, daemonsets={**snapshot.daemonsets,
                                         step.daemonset: {**ds, "metadata": meta, "spec": spec}})


@_project.register(CreateAlias)
def _create_alias(step: CreateAlias, snapshot: Snapshot) -> Snapshot:
    return _with_service(snapshot, step.body)


@_project.register(SetSelector)
def _set_selector(step: SetSelector, snapshot: Snapshot) -> Snapshot:
    svc = snapshot.services.get(step.service)
    if svc is None:
        return snapshot
    switched = {**svc, "spec": {**(svc.get("spec") or {}), "selector": dict(step.after)}}
    return _with_service(snapshot, switched)


@_project.register(DeleteAlias)
def _delete_alias(step: DeleteAlias, snapshot: Snapshot) -> Snapshot:
    services = {n: s for n, s in snapshot.services.items() if n != step.service}
    endpoints = {n: e for n, e in snapshot.endpoints.items() if n != step.service}
    return replace(snapshot, services=services, endpoints=endpoints)
