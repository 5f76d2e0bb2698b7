"""Ending a simulated pod's containers as a kubelet reports it: one status write (the
`pods/status` subresource, over the API) with phase Succeeded or Failed, every container
`terminated` with the exit code, Ready False. For pods the sim only simulates (no image run),
whose containers would otherwise run forever."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dcgm_sim.store import now_rfc3339


def terminated_status(pod: Any, exit_code: int) -> dict[str, Any]:
    """The status a kubelet writes when every container of `pod` (an official-client V1Pod)
    exited with `exit_code`: Succeeded for 0, else Failed."""
    now = now_rfc3339()
    status = pod.status
    started = status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ") if status.start_time else now
    reason = "Completed" if exit_code == 0 else "Error"
    containers = [{"name": c.name, "image": c.image, "imageID": "", "ready": False,
                   "restartCount": 0, "started": False, "lastState": {},
                   "state": {"terminated": {"exitCode": exit_code, "reason": reason,
                                            "startedAt": started, "finishedAt": now}}}
                  for c in pod.spec.containers]
    conditions = [{"type": t, "status": "False" if t in ("Ready", "ContainersReady") else "True",
                   "lastProbeTime": None, "lastTransitionTime": now,
                   **({"reason": "PodCompleted"} if t in ("Ready", "ContainersReady") else {})}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                            "ContainersReady", "PodScheduled")]
    return {"phase": "Succeeded" if exit_code == 0 else "Failed", "conditions": conditions,
            "containerStatuses": containers, "hostIP": status.host_ip, "podIP": status.pod_ip,
            "startTime": started, "qosClass": status.qos_class}


def finish_pod(core: client.CoreV1Api, namespace: str, name: str, exit_code: int = 0) -> None:
    """Write the terminated status of pod `name` (Succeeded for exit code 0, else Failed)."""
    pod = core.read_namespaced_pod(name, namespace)
    body = core.api_client.sanitize_for_serialization(pod)
    body["status"] = terminated_status(pod, exit_code)
    core.replace_namespaced_pod_status(name, namespace, body)
