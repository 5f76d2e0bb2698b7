"""Why a rollout stopped moving, in words an SRE can act on: nodes that stopped reporting, pods
not Ready or not yet updated, or merely still starting (the fix: a longer `--timeout`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from migrator.engine import reads
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
DEFAULT_TIMEOUT = 600.0  # the CLI's --timeout default (10m)
# Waiting reasons of a container that is on its way up; any other one is an error.
STARTING_REASONS = ("", "ContainerCreating", "PodInitializing")
STOPPED_PHASES = ("Failed", "Succeeded", "Unknown")


def still_starting(pod: Mapping[str, Any]) -> bool:
    """On its way to Ready with nothing wrong: scheduled, not stopped, no container restarted,
    failed or waiting for any reason but its creation."""
    if o.meta(pod).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") in STOPPED_PHASES:
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return False
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        state = cs.get("state") or {}
        waiting = state.get("waiting")
        if int(cs.get("restartCount") or 0) > 0:
            return False
        if waiting is not None and str(waiting.get("reason") or "") not in STARTING_REASONS:
            return False
        if (state.get("terminated") or {}).get("exitCode") not in (None, 0):
            return False
    return True


STARTING = ("nothing is wrong with those pods that the API shows: they are still starting (no "
            "error, no restart) and took longer than --timeout allows")
NOT_REPLACED = ("no pod is failing: the DaemonSet controller had not replaced those pods yet "
                "when --timeout ran out")


def timeout_hint(timeout: float, why: str = STARTING) -> str:
    """The fix when nothing is wrong but time: the default deadline, or twice the one run out."""
    seconds = max(DEFAULT_TIMEOUT, 2 * timeout)
    longer = f"{seconds / 60:.0f}m" if seconds % 60 == 0 else f"{seconds:.0f}s"
    return (f"{why}; run the same command again with a longer one (it resumes where it "
            f"stopped): `--timeout {longer}`")


def _all_starting(kube: Kube, namespace: str, unready: Sequence[PodView]) -> bool:
    """Every not-Ready pod (the first few, read whole) is still starting; False unreadable."""
    if not unready:
        return False
    try:
        pods = [kube.get(kinds.POD, p.name, namespace) for p in unready[:g.MAX_NAMED]]
    except APIError:
        return False
    return all(pod is not None and still_starting(pod) for pod in pods)


def _nodes_reporting(kube: Kube, daemonset: str, pods: Sequence[PodView]) -> g.GateResult:
    """`g.nodes_reporting`, with the first few lost Nodes read (none if RBAC does not allow)."""
    nodes: dict[str, Obj | None] = {}
    for name in g.lost_nodes(pods)[:g.MAX_NAMED]:
        try:
            nodes[name] = kube.get(kinds.NODE, name)
        except APIError:
            break
    return g.nodes_reporting(daemonset, pods, nodes)


def lost_nodes_detail(kube: Kube, namespace: str, ds: Obj) -> str:
    """While a rollout does not move: its nodes that stopped reporting ("": none)."""
    gate = _nodes_reporting(kube, o.name(ds), reads.read_daemonset_pods(kube, namespace, ds))
    return "" if gate.ok else gate.detail


def where_stuck(kube: Kube, namespace: str, daemonset: str, pods: Sequence[PodView],
                template_labels: Mapping[str, str | None], timeout: float) -> tuple[str, str]:
    """(where a stalled rollout is stuck, what to do): nodes that stopped reporting, else pods
    not Ready, else not yet updated; still starting or not yet replaced: a longer `--timeout`."""
    lost = _nodes_reporting(kube, daemonset, pods)
    if not lost.ok:
        return lost.detail, NODE_HINT
    unready = g.not_ready_where(pods)
    if unready:
        slow = _all_starting(kube, namespace, [p for p in pods if not p.ready])
        return (f"pods not ready on nodes: {', '.join(unready[:10])}",
                timeout_hint(timeout) if slow else POD_HINT)
    old = sorted({p.node for p in pods
                  if any(p.labels.get(k) != v for k, v in template_labels.items())})
    return (f"pods not yet updated on nodes: {', '.join(old[:10]) or 'none'}",
            timeout_hint(timeout, NOT_REPLACED))
