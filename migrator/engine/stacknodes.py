"""The new stack's pods during a stack change, and the nodes deleted meanwhile (a scale-down):
a wait for those would never end, nor would a rerun's (`engine/stackchange.py` waits)."""

from __future__ import annotations

from collections.abc import Mapping

from migrator.engine.reads import listed_pods, node_names
from migrator.kube.client import Kube
from migrator.model import kinds, stacks
from migrator.model import objects as o
from migrator.model import stackchange as sc
from migrator.model.snapshot import PodView
from migrator.model.stacks import Catalog


def new_stack_pods(kube: Kube, namespace: str, catalog: Catalog, target: str) -> list[PodView]:
    """The pods the `target` stack's DaemonSets control (their printed rows say so)."""
    comps = catalog.stack(target).components
    daemonsets = {c.daemonset for c in comps}
    return [pod for pod in listed_pods(kube, namespace, stacks.pod_selectors(comps))
            if pod.daemonset in daemonsets]


def deleted(kube: Kube, namespace: str, catalog: Catalog, target: str,
            waiting: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Of the nodes still `waiting` per stable name, those deleted. Looked for only where the
    new stack's DaemonSet for the name wants no pod: it has observed its spec and made every pod
    it wants (`currentNumberScheduled == desiredNumberScheduled`, as many nodes with a live pod
    of it), none there; then the Nodes are listed (names only). A node that exists but whose
    `nvidia.com/gpu.deploy.*` label for the new stack says "false" is still waited for: that
    gap is the --max-gap failure that names the label."""
    out = {}
    pods: list[PodView] | None = None
    for name, nodes in waiting.items():
        daemonset = sc.component_for(catalog, target, name).daemonset
        ds = kube.get(kinds.DAEMONSET, daemonset, namespace)
        status = (ds or {}).get("status") or {}
        if ds is None or not o.observed(ds) or status.get("currentNumberScheduled") != \
                status.get("desiredNumberScheduled"):
            continue
        if pods is None:
            pods = new_stack_pods(kube, namespace, catalog, target)
        running = {p.node for p in pods if p.daemonset == daemonset and not p.deleting}
        if len(running) != status.get("desiredNumberScheduled"):
            continue  # a pod being replaced, or a status behind its pods: look again later
        if left := nodes - running:
            out[name] = left
    if out:
        existing = node_names(kube)
        out = {name: gone for name, nodes in out.items() if (gone := nodes - existing)}
    return out
