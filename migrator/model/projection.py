"""The cluster as it would be after a step's write and all it waits for (pure): what
`apply --dry-run` plans each phase against, since a server-side dry run persists nothing. The
preview says which waits these stand for (`engine/projecting.py`)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from migrator.model import monitoring
from migrator.model import objects as o
from migrator.model.snapshot import EndpointView, ServiceEndpoints, Snapshot
from migrator.model.steps import (
    CreateAlias,
    DeleteAlias,
    HoldStrategy,
    LabelMap,
    RollPods,
    SetLabels,
    SetSelector,
    Step,
)

Obj = dict[str, Any]


def _relabel(labels: Mapping[str, str], change: LabelMap) -> dict[str, str]:
    """The labels with `change` applied (a None value removes its key)."""
    return {k: v for k, v in {**labels, **change}.items() if v is not None}


def endpoints_for(snapshot: Snapshot, service: Obj) -> ServiceEndpoints:
    """What the EndpointSlice controller would list for this Service over these pods."""
    views = tuple(EndpointView(pod=p.name, node=p.node or None, ready=p.ready, serving=p.ready)
                  for p in snapshot.pods_matching(o.dig(service, "spec", "selector") or {}))
    return ServiceEndpoints(o.name(service), views)


def _with_pods(snapshot: Snapshot, daemonset: str, change: LabelMap) -> Snapshot:
    """The DaemonSet's pods relabelled; endpoints recomputed where a selector uses a changed key."""
    if not change:
        return snapshot
    pods = tuple(replace(p, labels=_relabel(p.labels, change))
                 if p.daemonset == daemonset else p
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


def after(snapshot: Snapshot, step: Step) -> Snapshot:
    """The snapshot as it would be once `step` was written and had taken effect."""
    if isinstance(step, CreateAlias):
        return _with_service(snapshot, step.body)
    if isinstance(step, DeleteAlias):
        return replace(snapshot,
                       services={n: s for n, s in snapshot.services.items() if n != step.service},
                       endpoints={n: e for n, e in snapshot.endpoints.items()
                                  if n != step.service})
    if isinstance(step, SetSelector):
        svc = snapshot.services.get(step.service)
        return snapshot if svc is None else _with_service(
            snapshot, {**svc, "spec": {**(svc.get("spec") or {}), "selector": dict(step.after)}})
    ds = snapshot.daemonsets.get(step.daemonset)
    if ds is None:
        return snapshot
    if isinstance(step, SetLabels):
        return _set_labels(step, ds, snapshot)
    if isinstance(step, RollPods):  # RelabelPods too: the pods carry the template's labels
        template = o.template_labels(ds)
        return _with_pods(snapshot, step.daemonset,
                          {k: template.get(k) for k in step.label_keys})
    hold = isinstance(step, HoldStrategy)
    spec = {**(ds.get("spec") or {}),
            "updateStrategy": {"type": "OnDelete"} if hold else dict(step.strategy)}
    annotations = {k: v for k, v in o.annotations_of(ds).items() if k != o.HELD_STRATEGY}
    if hold:
        annotations[o.HELD_STRATEGY] = json.dumps(dict(step.strategy), sort_keys=True)
    meta = {**(ds.get("metadata") or {}), "annotations": annotations}
    return replace(snapshot, daemonsets={**snapshot.daemonsets,
                                         step.daemonset: {**ds, "metadata": meta, "spec": spec}})


def _set_labels(step: SetLabels, ds: Obj, snapshot: Snapshot) -> Snapshot:
    meta = {**(ds.get("metadata") or {}), "labels": _relabel(o.labels(ds), step.meta_after)}
    template = dict(o.dig(ds, "spec", "template") or {})
    template["metadata"] = {**(template.get("metadata") or {}),
                            "labels": _relabel(o.template_labels(ds), step.template_after)}
    labelled = {**ds, "metadata": meta, "spec": {**(ds.get("spec") or {}), "template": template}}
    out = replace(snapshot, daemonsets={**snapshot.daemonsets, step.daemonset: labelled})
    if not step.rolls_pods() or o.update_strategy(ds) == "OnDelete":
        return out  # nothing rolls: the pods keep their labels (RollPods may delete them)
    return _with_pods(out, step.daemonset, step.template_after)
