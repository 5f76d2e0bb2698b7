"""The sim's container runtime as a kubelet behaves, through kubectl on bare pods of the image:
a container's exit and restarts (CrashLoopBackOff, `--previous`), a liveness probe that kills,
SIGKILL after the grace period for a process that ignores SIGTERM, one network namespace per
pod (both bind the same port), the read-only root and the emptyDir, the downward API, and
`kubectl logs` with its options."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.conftest import NS, REGISTRY_IMAGE, Sim, until

SHELL = ("import socket, sys, time; s = socket.socket(); s.bind(('', 7000)); s.listen(); "
         "print('bound', flush=True); time.sleep(600)")


def _pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "image": REGISTRY_IMAGE, "command": command,
                 "securityContext": {"readOnlyRootFilesystem": True,
                                     "allowPrivilegeEscalation": False},
                 "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                 "env": [{"name": "POD_IP",
                          "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}
    container.update(spec.pop("container", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                     "containers": [container], "volumes": [{"name": "tmp", "emptyDir": {}}],
                     **spec}}


def _status(sim: Sim, name: str) -> dict[str, Any]:
    status: dict[str, Any] = sim.get("pod", name)["status"]
    return status


def _container(sim: Sim, name: str) -> dict[str, Any]:
    statuses = _status(sim, name).get("containerStatuses") or [{}]
    return dict(statuses[0])


def test_containers_run_exit_restart_and_log_as_on_a_node(serve: Callable[..., Sim],
                                                         tmp_path: Path) -> None:
    sim = serve("--stack", "none", "--nodes", "2", "--time-scale", "0.01")
    pods = [
        _pod("crash", ["sh", "-c", "echo start $POD_IP; touch /x 2>&1; touch /tmp/y && "
                                   "echo tmp-ok; sleep 0.3; echo bye >&2; exit 3"]),
        _pod("once", ["dcgm-migrate", "--version"], restartPolicy="Never"),
        _pod("port-a", ["python3", "-c", SHELL]),
        _pod("port-b", ["python3", "-c", SHELL], container={"livenessProbe": {
            "tcpSocket": {"port": 7000}, "initialDelaySeconds": 3, "periodSeconds": 1,
            "failureThreshold": 1}}),
        _pod("dead", ["sleep", "600"], container={"livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1,
            "failureThreshold": 1, "timeoutSeconds": 1}}, terminationGracePeriodSeconds=1),
        _pod("stubborn", ["sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.1; done"],
             terminationGracePeriodSeconds=1),
    ]
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(yaml.safe_dump_all(pods))
    sim.kubectl("apply", "-f", str(manifest))

    # exit 3 under restartPolicy Always: Error, restarted after the back-off
    until("crash restarted", lambda: _container(sim, "crash").get("restartCount", 0) >= 1
          and "terminated" in _container(sim, "crash").get("lastState", {}))
    crash = _container(sim, "crash")
    assert crash["lastState"]["terminated"]["exitCode"] == 3, crash
    assert crash["lastState"]["terminated"]["reason"] == "Error", crash
    pod_ip = _status(sim, "crash")["podIP"]
    previous = sim.kubectl("logs", "crash", "--previous").stdout
    assert previous.splitlines() == [f"start {pod_ip}", "touch: cannot touch '/x': Read-only "
                                     "file system", "tmp-ok", "bye"], previous
    until("CrashLoopBackOff", lambda: (_container(sim, "crash").get("state", {}).get(
        "waiting", {}).get("reason")) == "CrashLoopBackOff", timeout=60, interval=0.05)

    # restartPolicy Never, exit 0: Succeeded, Completed; the log as kubectl shows it
    until("once Succeeded", lambda: _status(sim, "once").get("phase") == "Succeeded")
    assert _container(sim, "once")["state"]["terminated"]["reason"] == "Completed"
    assert sim.kubectl("logs", "once").stdout == "dcgm-migrate 0.1.0\n"
    stamped = sim.kubectl("logs", "once", "--timestamps").stdout
    assert stamped.endswith("Z dcgm-migrate 0.1.0\n") and stamped[:4].isdigit(), stamped
    assert sim.kubectl("logs", "once", "--tail", "0").stdout == ""
    assert sim.kubectl("logs", "once", "--since", "1h").stdout == "dcgm-migrate 0.1.0\n"

    # one network namespace per pod: both bind port 7000 and stay up; the probe reaches one
    def bound(name: str) -> bool:
        return sim.kubectl("logs", name, check=False).stdout == "bound\n"

    until("port-a bound", lambda: bound("port-a"))
    until("port-b bound", lambda: bound("port-b"))
    time.sleep(5)  # past port-b's liveness delay, a few of its periods
    assert _container(sim, "port-b")["restartCount"] == 0, _container(sim, "port-b")
    assert _container(sim, "port-a")["ready"] and _container(sim, "port-b")["ready"]

    # a liveness probe that fails kills the container (SIGTERM: 143), which is restarted
    until("dead restarted", lambda: "terminated" in _container(sim, "dead").get(
        "lastState", {}))
    assert _container(sim, "dead")["lastState"]["terminated"]["exitCode"] == 143

    # deletion: SIGTERM, ignored, then SIGKILL after the 1 s grace period; `logs -f` ends
    follow = subprocess.Popen(["kubectl", "--kubeconfig", str(sim.admin), "-n", NS, "logs",
                               "-f", "stubborn"], stdout=subprocess.PIPE, text=True)
    assert follow.stdout is not None and follow.stdout.readline() == "up\n"
    began = time.monotonic()
    sim.kubectl("delete", "pod", "stubborn", "--wait=true")
    assert time.monotonic() - began >= 1.0  # held for the grace period
    assert follow.wait(30) == 0
    gone = sim.kubectl("get", "pod", "stubborn", "-o", "json", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, json.dumps(gone.stdout)[:500]
