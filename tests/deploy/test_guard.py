"""docs/guard.yaml on a cluster running both stacks, as docs/runbook.md's procedure does it:
phase 3, then `kubectl apply -f docs/guard.yaml`; two replicas of the image run for real, one
leads the Lease, the shared EndpointSlices appear and the guard's log names them; a deleted
leader is replaced and the other replica takes the Lease."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.deploy.conftest import REGISTRY_IMAGE, Sim, manifest, until

GUARD = "app.kubernetes.io/name=dcgm-migrate-guard"
SHARED = "endpointslice.kubernetes.io/managed-by=dcgm-migrate"


def _running(sim: Sim) -> list[dict[str, Any]]:
    pods = sim.get("pods", "-l", GUARD)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True"
                    for c in p["status"].get("conditions", []))]


def _two_running(sim: Sim) -> list[dict[str, Any]]:
    """Both replicas Ready (none while fewer are)."""
    running = _running(sim)
    return running if len(running) == 2 else []


def _holder(sim: Sim) -> str:
    """The pod name of the Lease's holder (identities are `<pod>_<pid>`), "" when none."""
    spec = sim.get("lease", "dcgm-migrate-guard")["spec"]
    return str(spec.get("holderIdentity") or "").rsplit("_", 1)[0]


def test_guard_deployment_shares_the_names_and_fails_over(
        serve: Callable[..., Sim], tmp_path: Path) -> None:
    sim = serve("--stack", "mixed", "--operator-release", "future-coexistence", "--nodes", "3",
                "--time-scale", "0.02")
    applied = sim.tool("apply", "--phase", "3", "--yes")
    assert applied.returncode in (0, 1), applied.stderr[-2000:]

    began = time.monotonic()
    sim.kubectl("apply", "-f", str(manifest("rbac.yaml", tmp_path)),
                "-f", str(manifest("guard.yaml", tmp_path)))
    slices = until("the guard's shared EndpointSlices", lambda: sim.get(
        "endpointslices", "-l", SHARED)["items"], timeout=120, interval=0.1)
    first_slice = time.monotonic() - began
    print(f"\nguard: kubectl apply -> first shared EndpointSlice {first_slice:.1f} s")
    until("both shared names", lambda: len(sim.get("endpointslices", "-l", SHARED)["items"]) == 2)
    slices = sim.get("endpointslices", "-l", SHARED)["items"]
    assert sorted(s["metadata"]["labels"]["kubernetes.io/service-name"] for s in slices) == [
        "nvidia-dcgm", "nvidia-dcgm-exporter"]

    pods = until("two Ready guard replicas", lambda: _two_running(sim))
    assert all(p["spec"]["containers"][0]["image"] == REGISTRY_IMAGE for p in pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # the anti-affinity's preference
    leader = until("a Lease holder", lambda: _holder(sim))
    assert leader in {p["metadata"]["name"] for p in pods}
    status = pods[0]["status"]["containerStatuses"][0]
    assert status["state"].get("running") and status["restartCount"] == 0

    # the runbook's check: the guard's log names the slices it created
    logs = sim.kubectl("logs", "-l", GUARD, "--prefix", "--tail", "-1").stdout
    created = [line for line in logs.splitlines() if "EndpointSlice" in line]
    assert any(f"create EndpointSlice/{s['metadata']['name']}" in line
               for s in slices for line in created), logs[-3000:]
    one = sim.kubectl("logs", "deploy/dcgm-migrate-guard").stdout  # kubectl picks a replica
    assert "guarding aliases in namespace gpu-operator" in one, one

    # the leader's pod deleted: SIGTERM releases the Lease, the standby takes it at its next
    # try (every 2 s) and the ReplicaSet starts a replacement. A real node takes seconds to
    # start that (image pull, sandbox); the sim's node setting makes it 300 simulated seconds
    # (6 s), lest a replacement that starts at once race the standby for the released Lease.
    sim.kubectl("annotate", "nodes", "--all", "--overwrite",
                "sim.dcgm-migrate/pod-start-seconds=300")
    deleted_at = time.monotonic()
    sim.kubectl("delete", "pod", leader)
    successor = until("another holder", lambda: (h := _holder(sim)) and h != leader and h)
    print(f"guard: leader deleted -> Lease held by the other replica "
          f"{time.monotonic() - deleted_at:.1f} s")
    assert successor in {p["metadata"]["name"] for p in pods}
    replaced = until("a replacement replica", lambda: _two_running(sim))
    assert leader not in {p["metadata"]["name"] for p in replaced}
    assert len(sim.get("endpointslices", "-l", SHARED)["items"]) == 2
    verify = sim.tool("verify")
    assert verify.returncode == 0, verify.stdout[-3000:]
