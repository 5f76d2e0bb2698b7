"""The pod status a kubelet reports for a pod whose containers really run. Pure.

After `kubelet_pods.go` `getPhase`: Pending until a container has started; Running while any
runs or will be restarted; once none runs or will run again, Succeeded when every container
exited 0, else Failed (also for a deleted pod whose containers stopped: the kubelet reports a
terminal phase before the pod is removed). Ready (and ContainersReady) when every container is
ready (its readiness probe passes, or it runs and has none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dcgm_sim.controllers.podstatus import pending_status, running_status
from dcgm_sim.runtime.worker import Snapshot

Obj = dict[str, Any]


def phase(snapshot: Snapshot) -> str:
    states = [c["state"] for c in snapshot.containers]
    if snapshot.ended and snapshot.started:
        codes = [int((s.get("terminated") or {}).get("exitCode", 1)) for s in states]
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
    if snapshot.ended:
        return "Failed"  # the sandbox could not be made
    return "Running" if snapshot.started else "Pending"


def pod_status(pod: Mapping[str, Any], node: Mapping[str, Any], ips: Sequence[str],
               snapshot: Snapshot, image_ids: Mapping[str, str], now: str,
               node_allows_ready: bool = True) -> Obj:
    """`status` for `pod` from its worker's `snapshot` (`image_ids`: container -> imageID)."""
    current = phase(snapshot)
    ready = (current == "Running" and node_allows_ready
             and all(c["ready"] for c in snapshot.containers))
    if current == "Pending":
        status = pending_status(pod, node, now)
    else:
        status = running_status(pod, node, list(ips), ready, now)
    status["phase"] = current
    images = {c.get("name"): c.get("image", "") for c in (pod.get("spec") or {}).get(
        "containers") or []}
    status["containerStatuses"] = [
        {**c, "image": images.get(c["name"], ""), "imageID": image_ids.get(c["name"], ""),
         "ready": bool(c["ready"]) and current == "Running"}
        for c in snapshot.containers]
    return status
