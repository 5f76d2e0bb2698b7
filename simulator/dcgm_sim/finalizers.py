"""Finalizer rules of the API server, pure: which updates may touch `metadata.finalizers`, when
an update that removes the last one deletes the object, and which garbage-collection finalizers
a DELETE leaves (apiserver/pkg/registry/generic/registry/store.go,
apimachinery/pkg/api/validation/objectmeta.go).
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

ORPHAN = "orphan"  # metav1.FinalizerOrphanDependents
FOREGROUND = "foregroundDeletion"  # metav1.FinalizerDeleteDependents


def new_finalizers_problem(current: Obj, new: Obj) -> str:
    """`ValidateObjectMetaUpdate`: once an object is being deleted an update may remove
    finalizers but not add any; the field error, or "" when the update is allowed."""
    if not current["metadata"].get("deletionTimestamp"):
        return ""
    old = set(current["metadata"].get("finalizers") or [])
    extra = sorted(set(new["metadata"].get("finalizers") or []) - old)
    if not extra:
        return ""
    found = ", ".join(f'"{f}"' for f in extra)
    return ("metadata.finalizers: Forbidden: no new finalizers can be added if the object is "
            f"being deleted, found new finalizers []string{{{found}}}")


def emptied(current: Obj, new: Obj) -> bool:
    """`shouldDeleteDuringUpdate`: the update removed the last finalizer of an object whose
    deletion is not waiting on a grace period, so the object goes."""
    old_meta, new_meta = current["metadata"], new["metadata"]
    return bool(old_meta.get("deletionTimestamp") and old_meta.get("finalizers")
                and not new_meta.get("finalizers")
                and not old_meta.get("deletionGracePeriodSeconds"))


def for_deletion(existing: list[str], propagation: str | None) -> list[str]:
    """`deletionFinalizersForGarbageCollection`: the finalizers a DELETE leaves on the object.

    An explicit policy replaces the GC finalizers (Orphan: `orphan`, Foreground:
    `foregroundDeletion`, Background: neither); without one those already present stay (the
    default for every kind served here is background deletion). Other finalizers are kept."""
    if propagation is None:
        return list(existing)
    out = [f for f in existing if f not in (ORPHAN, FOREGROUND)]
    if propagation == "Orphan":
        out.append(ORPHAN)
    elif propagation == "Foreground":
        out.append(FOREGROUND)
    return out
