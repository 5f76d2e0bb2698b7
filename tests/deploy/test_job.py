"""docs/job.yaml as docs/job.yaml's own steps run it: `kubectl apply`, follow, delete the
finished Job, change `--phase`, apply again — phases 1 to 3 in the image's pods, then `verify`
green; and a Job whose pod is deleted mid-run: SIGTERM stops the run (its lock released, the
interruption recorded), the Job starts another pod, which resumes from the state instead of
writing again what was done."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.deploy.conftest import NS, Sim, manifest, until

JOB = "job/dcgm-migrate-apply"
PHASE_ARGS = '- --phase\n            - "1"'


def _job_manifest(folder: Path, phase: int) -> Path:
    path = manifest("job.yaml", folder, {PHASE_ARGS: f'- --phase\n            - "{phase}"'})
    return path.rename(folder / f"job-phase-{phase}.yaml")


def _run_phase(sim: Sim, folder: Path, phase: int) -> float:
    """Apply the Job for `phase`, wait for Complete, delete it; its run time."""
    began = time.monotonic()
    sim.kubectl("apply", "-f", str(_job_manifest(folder, phase)))
    done = sim.kubectl("wait", "--for=condition=complete", JOB, "--timeout=180s", check=False,
                       timeout=200)
    took = time.monotonic() - began
    logs = sim.kubectl("logs", JOB, check=False).stdout
    assert done.returncode == 0, f"phase {phase}: {done.stderr}\n{logs[-3000:]}"
    assert f"run OK — phase{'s 1-' if phase > 1 else ' '}{phase} done" in logs, logs[-3000:]
    sim.kubectl("delete", JOB)
    return took


def test_job_runs_phases_1_to_3_and_verify_is_green(serve: Callable[..., Sim],
                                                     tmp_path: Path) -> None:
    sim = serve("--stack", "gpucluster", "--nodes", "4", "--time-scale", "0.01")
    sim.kubectl("apply", "-f", str(manifest("rbac.yaml", tmp_path)))
    took = {phase: _run_phase(sim, tmp_path, phase) for phase in (1, 2, 3)}
    print("\njob on a 4-node sim (time-scale 0.01), kubectl apply -> Complete: "
          + ", ".join(f"phase {p} {s:.1f} s" for p, s in took.items()))
    verify = sim.tool("verify")
    assert verify.returncode == 0, verify.stdout[-3000:]
    selector = sim.get("svc", "nvidia-dcgm")["spec"]["selector"]
    assert selector == {"nvidia.com/gpu-operator.dcgm": "true"}, selector


def test_a_deleted_job_pod_is_retried_and_resumes(serve: Callable[..., Sim],
                                                  tmp_path: Path) -> None:
    sim = serve("--stack", "gpucluster", "--nodes", "4", "--time-scale", "0.05")
    sim.kubectl("apply", "-f", str(manifest("rbac.yaml", tmp_path)),
                "-f", str(_job_manifest(tmp_path, 1)))
    # follow the first pod's log (`kubectl logs -f job/...`) until its first write is done
    first = until("the Job's pod running", lambda: [
        p["metadata"]["name"] for p in sim.get("pods", "-l", "job-name=dcgm-migrate-apply")[
            "items"] if p["status"].get("phase") == "Running"])[0]
    follow = subprocess.Popen(["kubectl", "--kubeconfig", str(sim.admin), "-n", NS, "logs",
                               "-f", first], stdout=subprocess.PIPE, text=True)
    assert follow.stdout is not None
    seen = []
    for line in follow.stdout:
        seen.append(line)
        if "done     DaemonSet/" in line:
            break
    sim.kubectl("delete", "pod", first)
    follow.wait(30)  # -f ends with the container
    written = [" ".join(line.split()[-2:]) for line in seen if "done     DaemonSet/" in line]
    assert written, "".join(seen)

    done = sim.kubectl("wait", "--for=condition=complete", JOB, "--timeout=180s",
                       check=False, timeout=200)
    logs = sim.kubectl("logs", JOB).stdout  # the pod that completed
    assert done.returncode == 0, done.stderr + logs[-3000:]
    job = sim.get(JOB)
    assert job["status"].get("succeeded") == 1 and job["status"].get("failed", 0) >= 1, job
    for step in written:  # what the deleted pod wrote is not written again
        assert f"writing  {step}" not in logs, logs[-3000:]
    assert "run OK — phase 1 done" in logs, logs[-3000:]
    status = sim.tool("status")
    assert "interrupted" in status.stdout, status.stdout[-3000:]
