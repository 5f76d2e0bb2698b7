"""Which GPU Operator stack(s) run in a namespace, from the CRs and the objects (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migrator.model import objects as o
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component


@dataclass(frozen=True)
class Discovery:
    stack: str  # clusterpolicy | gpucluster | mixed | both | none
    components: tuple[Component, ...]  # present in the namespace (their DaemonSet exists)
    warnings: tuple[str, ...] = ()


OPERATOR_CRS = ("ClusterPolicy", "GPUCluster")


def collected(snapshot: Snapshot, obj: Mapping[str, Any]) -> str | None:
    """`Kind/name` of the deleted operator CR that controls this object, if garbage collection
    is about to remove it (owner uid gone or being deleted). None if it stays, or if the CRs
    could not be read."""
    ref = o.controller_owner(obj)
    if not snapshot.nvidia_api or not ref or ref.get("kind") not in OPERATOR_CRS:
        return None
    crs = snapshot.cluster_policies if ref["kind"] == "ClusterPolicy" else snapshot.gpu_clusters
    owner = next((c for c in crs if o.meta(c).get("uid") == ref.get("uid")), None)
    if owner is not None and not o.meta(owner).get("deletionTimestamp"):
        return None
    return f"{ref['kind']}/{ref.get('name')}"


def prepared_releases(snapshot: Snapshot, catalog: Catalog,
                      present: list[Component]) -> list[str]:
    """For a cluster prepared for an operator release (`--prepare-for`) not yet managing the
    stable names: the Services that release deletes, said while they still exist."""
    out = []
    for release in catalog.releases:
        prepared = [c for c in present if (label := release.component_labels.get(
            c.component)) and o.template_labels(snapshot.daemonsets[c.daemonset]).get(
            label.key) == label.value]
        managed = any(release.manages(s) for s in snapshot.services.values())
        doomed = [n for n in release.deletes_services if n in snapshot.services]
        if prepared and not managed and doomed:
            out.append(f"prepared for GPU Operator release {release.name}, which deletes "
                       f"{', '.join('Service/' + n for n in doomed)} when it is installed: "
                       "move every consumer of those names to the stable names first "
                       "(docs/runbook.md, 'Upgrading to an operator with shared Services')")
    return out


def discover(snapshot: Snapshot, catalog: Catalog) -> Discovery:
    present: list[Component] = []
    stacks: list[str] = []
    warnings: list[str] = []
    crs = {"clusterpolicy": snapshot.cluster_policies, "gpucluster": snapshot.gpu_clusters}
    for stack in catalog.stacks:
        # A DaemonSet whose CR was deleted is garbage, not a running stack (a stack change).
        running = [c for c in stack.components if c.daemonset in snapshot.daemonsets
                   and not collected(snapshot, snapshot.daemonsets[c.daemonset])]
        if not running and not crs.get(stack.name):
            continue
        stacks.append(stack.name)
        present.extend(running)
        warnings += [f"{stack.name}: DaemonSet/{c.daemonset} is not running here "
                     f"({c.component} disabled?); it is skipped"
                     for c in stack.components if c not in running]
        if running and not crs.get(stack.name):
            warnings.append(f"{stack.name}: its DaemonSets run but no {stack.cr.kind} exists")
    if not stacks:
        return Discovery("none", ())
    warnings += prepared_releases(snapshot, catalog, present)
    if len(stacks) == 1:
        return Discovery(stacks[0], tuple(present), tuple(warnings))
    cp, dra = ({p.node for c in catalog.stack(name).components if c in present
                for p in snapshot.pods_of(c.daemonset)} for name in ("clusterpolicy", "gpucluster"))
    shared = cp & dra
    sharing = ("the stable names belong to the ClusterPolicy's operator; after phase 2, "
               "`dcgm-migrate guard` adds the GPUCluster pods of every node the ClusterPolicy "
               f"stack does not run on (now {len(dra - cp)}) through EndpointSlices of its own "
               "(docs/runbook.md, 'Clusters running both stacks')")
    warnings.append(f"ClusterPolicy and GPUCluster stacks coexist on {len(shared)} nodes: "
                    f"{sharing}; each of those {len(shared)} nodes runs two exporters (its "
                    "GPUs are reported twice)" if shared else
                    "ClusterPolicy and GPUCluster stacks run on separate nodes "
                    f"({len(cp)} and {len(dra)}): {sharing}")
    return Discovery("both" if shared else "mixed", tuple(present), tuple(warnings))
