"""Both GPU Operator CRs at once, on a release that refuses it. Pure. The released operator
(NVIDIA/gpu-operator 9654928ac) marks the GPUCluster `PrerequisiteNotMet` and the ClusterPolicy
`ReconcileFailed` and reconciles no operand; the refusal is read from those Error conditions, not
guessed from a version. `findings` is the verdict's check; `coexistence_refused` answers
`change-stack`, which must never create the second CR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import objects as o
from migrator.model.findings import Finding
from migrator.model.snapshot import Snapshot

CHECK = "one-operator-cr"
STALLED = ("the GPU Operator stops reconciling every operand while both ClusterPolicy and "
           "GPUCluster exist")
REASONS = ("PrerequisiteNotMet", "ReconcileFailed")  # internal/conditions/consts.go
REFUSED_WORDS = ("may not exist at the same time", "cannot co-exist")


def refusal(cr: Mapping[str, Any]) -> str | None:
    """The operator's refusal of the other CR, as written in this CR's Error condition."""
    for cond in (cr.get("status") or {}).get("conditions") or []:
        if (cond.get("type") == "Error" and cond.get("status") == "True"
                and cond.get("reason") in REASONS
                and any(w in str(cond.get("message") or "") for w in REFUSED_WORDS)):
            return f"{cond.get('reason')}: {cond.get('message')}"
    return None


def coexistence_refused(crs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the operator has refused a second CR on this cluster (either CR says so)."""
    return any(refusal(cr) for cr in crs)


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
    kind, newest = max(crs, key=lambda kc: (o.meta(kc[1]).get("creationTimestamp") or "", kc[0]))
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
