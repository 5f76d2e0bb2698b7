"""Both GPU Operator CRs at once, on an operator release that refuses it. Pure.

The released GPU Operator (NVIDIA/gpu-operator a22dbf671, commit 9654928ac "do not allow
ClusterPolicy & GPUCluster co-existence") refuses the pair from both sides:
`controllers/gpucluster_controller.go` `validatePrerequisites` makes the GPUCluster NotReady
with the Error condition `PrerequisiteNotMet` ("... may not exist at the same time") and renders
nothing, and `controllers/clusterpolicy_controller.go` `Reconcile` sets `ReconcileFailed`
("... cannot co-exist") and returns before it reconciles any operand, drivers and device
plugins included. A release that lets both coexist (none has shipped) writes neither, so the
refusal is read from those conditions, the operator's own words, not guessed from a version.

`findings` is the verdict's check (registered in `model/outcome.py`); `coexistence_refused`
answers the commands that must never create the second CR (`change-stack`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import objects as o
from migrator.model.findings import Finding
from migrator.model.snapshot import Snapshot

CHECK = "one-operator-cr"
STALLED = ("the GPU Operator stops reconciling every operand while both ClusterPolicy and "
           "GPUCluster exist")
# internal/conditions/consts.go, and the messages the two controllers write (a22dbf671)
PREREQUISITE_NOT_MET = "PrerequisiteNotMet"
RECONCILE_FAILED = "ReconcileFailed"
REFUSED_WORDS = ("may not exist at the same time", "cannot co-exist")


def refusal(cr: Mapping[str, Any]) -> str | None:
    """The operator's refusal of the other CR, as written in this CR's Error condition."""
    for cond in (cr.get("status") or {}).get("conditions") or []:
        if (cond.get("type") == "Error" and cond.get("status") == "True"
                and cond.get("reason") in (PREREQUISITE_NOT_MET, RECONCILE_FAILED)
                and any(w in str(cond.get("message") or "") for w in REFUSED_WORDS)):
            return f"{cond.get('reason')}: {cond.get('message')}"
    return None


def coexistence_refused(crs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the operator has refused a second CR on this cluster (either CR says so)."""
    return any(refusal(cr) for cr in crs)


def _newest(crs: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, Mapping[str, Any]]:
    return max(crs, key=lambda kc: (o.meta(kc[1]).get("creationTimestamp") or "", kc[0]))


def findings(snapshot: Snapshot) -> list[Finding]:
    """Red when a ClusterPolicy and a GPUCluster both exist and the operator refuses the pair
    (nothing when only one kind exists, or the release reconciles both)."""
    if not snapshot.cluster_policies or not snapshot.gpu_clusters:
        return []
    crs = [("ClusterPolicy", c) for c in snapshot.cluster_policies] + [
        ("GPUCluster", c) for c in snapshot.gpu_clusters]
    said = [f"{kind}/{o.name(cr)}: {r}" for kind, cr in crs if (r := refusal(cr))]
    if not said:
        return []
    kind, newest = _newest(crs)
    names = ", ".join(f"{k}/{o.name(c)}" for k, c in crs)
    older = next(c for k, c in crs if k != kind)
    plural, target = (("gpuclusters", "gpucluster") if kind == "GPUCluster"
                      else ("clusterpolicies", "clusterpolicy"))
    fix = (f"delete {kind}/{o.name(newest)}, created last, which the operator refused "
           f"(`kubectl delete {plural} {o.name(newest)}`); to change stack to it instead, "
           f"delete it all the same, then run change-stack --to {target} with its manifest and "
           f"--delete-cr {o.name(older)} (docs/runbook.md, 'Changing stack')")
    return [Finding(CHECK, f"{kind}/{o.name(newest)}", False,
                    f"{STALLED}: {names} ({'; '.join(said)})", fix)]
