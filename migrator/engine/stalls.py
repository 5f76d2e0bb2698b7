"""Why a rollout stopped moving, in words an SRE can act on: which nodes stopped reporting
(their pods marked not Ready by the node lifecycle controller), which pods are not Ready or
not yet updated. Reads go through `Kube`; the judging is `gates.nodes_reporting`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from migrator.engine import observe
from migrator.errors import APIError
from migrator.model import gates as g
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.snapshot import PodView

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
NODE_HINT = ("bring the node back (its kubelet must report again), or drain and remove it from "
             "the cluster; then run the same command again: it resumes where it stopped")
POD_HINT = ("fix those nodes (kubectl describe pod), then run the same command again: it "
            "resumes where it stopped")


def read_nodes(kube: Kube, names: Sequence[str]) -> dict[str, Obj | None]:
    """The first few Nodes by name, for their Ready condition; none when the tool may not
    read Nodes (docs/rbac.yaml grants none: the detail is a courtesy)."""
    out: dict[str, Obj | None] = {}
    for name in names[:g.MAX_NAMED]:
        try:
            out[name] = kube.get(kinds.NODE, name)
        except APIError:
            break
    return out


def lost_nodes_detail(kube: Kube, namespace: str, ds: Obj) -> str:
    """While a rollout does not move: the nodes running its pods that stopped reporting, ""
    when none (one printed pod list of the DaemonSet and the EndpointSlices, the pods they
    contradict read whole, and a Node read each when RBAC allows)."""
    name = o.name(ds)
    pods = observe.read_daemonset_pods(kube, namespace, ds)
    gate = g.nodes_reporting(name, pods, read_nodes(kube, g.lost_nodes(pods)))
    return "" if gate.ok else gate.detail


def where_stuck(kube: Kube, daemonset: str, pods: Sequence[PodView],
                template_labels: Mapping[str, str | None]) -> tuple[str, str]:
    """(where a stalled rollout is stuck, what to do): nodes that stopped reporting first,
    then nodes whose pods are not Ready, then nodes whose pods are not yet updated."""
    lost = g.nodes_reporting(daemonset, pods, read_nodes(kube, g.lost_nodes(pods)))
    if not lost.ok:
        return lost.detail, NODE_HINT
    unready = g.not_ready_where(pods)
    if unready:
        return f"pods not ready on nodes: {', '.join(unready[:10])}", POD_HINT
    old = sorted({p.node for p in pods
                  if any(p.labels.get(k) != v for k, v in template_labels.items())})
    return f"pods not yet updated on nodes: {', '.join(old[:10]) or 'none'}", POD_HINT
