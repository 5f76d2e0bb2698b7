"""Adoption of orphans by a controller, after kubernetes/pkg/controller/controller_ref_manager.go
(`ClaimObject`, `AdoptPod`). Pure.

A pod with no controller reference, in the controller's namespace, not being deleted, whose
labels match the controller's selector, is claimed by a controller that is not itself being
deleted: it gets a controller reference (`controller: true`, `blockOwnerDeletion: true`) and is
from then on that controller's pod, to be kept or rolled by its update strategy like any other.
(Upstream also releases owned pods whose labels stopped matching; the sim does not.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dcgm_sim.controllers import pods as P
from dcgm_sim.jsoncopy import clone
from dcgm_sim.labelselectors import label_selector_as_selector

Obj = dict[str, Any]


def claimable(owner: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """`ClaimObject`'s orphan branch: may `owner` adopt `obj`?"""
    if P.is_deleting(owner) or P.is_deleting(obj) or P.controller_ref(obj) is not None:
        return False
    if obj["metadata"].get("namespace") != owner["metadata"].get("namespace"):
        return False
    raw = (owner.get("spec") or {}).get("selector")
    if not raw:
        return False  # an empty selector adopts nothing (DaemonSet validation requires one)
    selector = label_selector_as_selector(raw)
    return not selector.empty and selector.matches(P.labels_of(obj))


def adopted(owner: Mapping[str, Any], obj: Mapping[str, Any]) -> Obj:
    """`AdoptPod`: the object with `owner`'s controller reference added (a new dict; the
    resourceVersion is kept so the write fails on a concurrent change)."""
    new = clone(dict(obj))
    refs = list(new["metadata"].get("ownerReferences") or [])
    refs.append(P.owner_reference(owner))
    new["metadata"]["ownerReferences"] = refs
    return new
