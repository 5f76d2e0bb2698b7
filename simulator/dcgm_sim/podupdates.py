"""What an update may change in a pod's spec, after `ValidatePodUpdate`
(kubernetes/pkg/apis/core/validation/validation.go). Pure.

Metadata is free but for identity (`ValidateObjectMetaUpdate`, in `admission`): labels and
annotations may change in place, which is what relabelling a running pod relies on. The spec is
immutable but for container and init-container images, `activeDeadlineSeconds` (set from none,
or lowered, never raised or removed), tolerations (only additions; an existing one may change
only its `tolerationSeconds`: `validateOnlyAddedTolerations`) and
`terminationGracePeriodSeconds` (only to 1 from a negative value). Not modelled: scheduling
gates, in-place resize, ephemeral containers.
"""

from __future__ import annotations

from typing import Any

from dcgm_sim.jsoncopy import clone
from dcgm_sim.statuses import FieldErrors

Obj = dict[str, Any]

_MAX_INT32 = 2**31 - 1
_FORBIDDEN = ("pod updates may not change fields other than `spec.containers[*].image`,"
              "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
              "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
              "(allow it to be set to 1 if it was previously negative)")


def validate(spec: Obj, old_spec: Obj, errors: FieldErrors) -> None:
    """`ValidatePodUpdate`'s spec rules: `spec` may replace `old_spec` (both defaulted)?"""
    if not _deadline_ok(spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds"),
                        errors):
        return
    _only_added_tolerations(spec.get("tolerations") or [], old_spec.get("tolerations") or [],
                            errors)
    munged = clone(spec)
    for group in ("initContainers", "containers"):
        olds = old_spec.get(group) or []
        for i, c in enumerate(munged.get(group) or []):
            if i < len(olds) and "image" in olds[i]:
                c["image"] = olds[i]["image"]
    for key in ("activeDeadlineSeconds", "tolerations"):
        munged.pop(key, None)
        if key in old_spec:
            munged[key] = old_spec[key]
    old_grace = old_spec.get("terminationGracePeriodSeconds")
    if old_grace is not None and old_grace < 0 and munged.get(
            "terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if munged != old_spec:
        errors.add("Forbidden", "spec", _FORBIDDEN)


def _deadline_ok(new: Any, old: Any, errors: FieldErrors) -> bool:
    """From none to a positive value, or from a value to a lesser, non-negative one."""
    path = "spec.activeDeadlineSeconds"
    if new is not None:
        if not isinstance(new, int) or new < 0 or new > _MAX_INT32:
            errors.add("Invalid", path, f"must be between 0 and {_MAX_INT32}, inclusive", new)
            return False
        if old is not None and old < new:
            errors.add("Invalid", path, "must be less than or equal to previous value", new)
            return False
    elif old is not None:
        errors.add("Invalid", path, "must not update from a positive integer to nil value", new)
    return True


def _only_added_tolerations(new: list[Obj], old: list[Obj], errors: FieldErrors) -> None:
    """`validateOnlyAddedTolerations`: every old toleration is still there, its
    `tolerationSeconds` alone may differ."""
    for before in old:
        rest = {k: v for k, v in before.items() if k != "tolerationSeconds"}
        if not any({k: v for k, v in t.items() if k != "tolerationSeconds"} == rest
                   for t in new):
            errors.add("Forbidden", "spec.tolerations",
                       "existing toleration can not be modified except its tolerationSeconds")
            return
