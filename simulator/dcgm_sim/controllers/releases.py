"""The GPU Operator releases the operator imitation can run, each named for what it is.

- `shipped` (the default): the released GPU Operator, v26.7.0 on, modelled from
  NVIDIA/gpu-operator at a22dbf671f2e26f9a1e342f8eea28e196235e110 (the commit the fixtures pin).
  A ClusterPolicy and a GPUCluster may not exist at the same time (9654928ac "Remove mode label
  and do not allow ClusterPolicy & GPUCluster co-existence"): `controllers/gpucluster_controller.go`
  `validatePrerequisites` refuses the GPUCluster while a ClusterPolicy exists, and
  `controllers/clusterpolicy_controller.go` `Reconcile` returns "conflicting GPUCluster resource
  %q detected; ClusterPolicy and GPUCluster cannot co-exist" before reconciling any operand.
  The same commit removed the node label `nvidia.com/gpu-operator.resource-allocation.mode`, and
  GPUCluster cleanup (`deleteStateRelatedObjects`, internal/state/state_skel.go) spares nothing.
  So the seed offers no `mixed` or `both` cluster under it.
- `future-coexistence`: a release that lets both stacks run in one cluster, which none has
  shipped. Modelled on upstream just before 9654928ac (its parent, never released): both CRs
  reconciled side by side, nodes split between the stacks by the mode label the node-labelling
  controller set (`controllers/nodelabeling_controller.go` at 9654928ac^), and on the TODOs at
  a22dbf671 ("remove the below code block once both ClusterPolicy and GPUCluster can co-exist",
  "relax this prerequisite once ClusterPolicy and GPUCluster can co-exist"). Cadence and cleanup
  as `shipped`. `mixed` and `both` exist for it.
- `shared-services-fork`: the seed author's fork, rahulait/gpu-operator@5746d440: both CRs
  reconciled, and a SharedServiceReconciler that owns `nvidia-dcgm` / `nvidia-dcgm-exporter`
  (controllers/sharedservices.py says what it does and what could not be read); its
  `deleteStateRelatedObjects` skips those two Services ("Shared endpoints have their own
  lifecycle"). `mixed` and `both` exist for it too.
"""

from __future__ import annotations

from dataclasses import dataclass

SHIPPED = "shipped"
FUTURE_COEXISTENCE = "future-coexistence"
SHARED_SERVICES_FORK = "shared-services-fork"
RELEASES = (SHIPPED, FUTURE_COEXISTENCE, SHARED_SERVICES_FORK)
DEFAULT = SHIPPED
COEXISTING_STACKS = frozenset({"mixed", "both"})


@dataclass(frozen=True)
class Release:
    """What differs between the releases; everything else is modelled once, from a22dbf671."""

    name: str
    coexistence: bool  # both CRs reconciled at once (False: each refuses the other)
    mode_label: bool  # nodes carry nvidia.com/gpu-operator.resource-allocation.mode
    spares_shared_services: bool  # GPUCluster cleanup skips nvidia-dcgm / nvidia-dcgm-exporter
    shared_services: bool  # the SharedServiceReconciler and its DaemonSet/Service shapes


_ALL = {
    SHIPPED: Release(SHIPPED, coexistence=False, mode_label=False,
                     spares_shared_services=False, shared_services=False),
    FUTURE_COEXISTENCE: Release(FUTURE_COEXISTENCE, coexistence=True, mode_label=True,
                                spares_shared_services=False, shared_services=False),
    SHARED_SERVICES_FORK: Release(SHARED_SERVICES_FORK, coexistence=True, mode_label=True,
                                  spares_shared_services=True, shared_services=True),
}


def release(name: str) -> Release:
    """The release called `name`; ValueError naming the choices for any other."""
    found = _ALL.get(name)
    if found is None:
        raise ValueError(f"unknown operator release {name!r}: one of {', '.join(RELEASES)}")
    return found


def check_stack(stack: str, name: str) -> None:
    """Refuse a seed the release cannot hold (`mixed`/`both` need both CRs at once, which the
    shipped operator refuses) and an unknown release: ValueError, one sentence with the fix."""
    if stack in COEXISTING_STACKS and not release(name).coexistence:
        raise ValueError(
            f"--stack {stack} needs a ClusterPolicy and a GPUCluster at once, which the {name} "
            f"GPU Operator release refuses; pass --operator-release {FUTURE_COEXISTENCE} (or "
            f"{SHARED_SERVICES_FORK}), the releases that let both stacks coexist.")
    release(name)
