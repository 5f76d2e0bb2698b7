"""SIGTERM (a Job eviction, `timeout`, a pod deletion) stops a run the way Ctrl-C does: the
write in flight finishes and is recorded, the lock is released, the resume command is printed,
exit 143 (docs/runbook.md, "Exit codes" and "Resume after an interruption"); the rerun ends
where an uninterrupted run ends. Real subprocesses, bounded waits."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dcgm_sim.controllers.operator import RESYNC_SECONDS
from migrator.engine.state import lock as locking
from migrator.model import kinds
from tests.helpers import crash
from tests.helpers.stackprep import manifest
from tests.reliability.conftest import APPLY, NS, ROLLBACK, EndState, Env

STATE_CM = "dcgm-migrate-state"
pytestmark = pytest.mark.usefixtures("fresh_interpreters")  # signals: real process starts


def _lock_annotations(env: Env) -> dict[str, str]:
    cm = env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM)
    annotations = (cm or {}).get("metadata", {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in locking.KEYS}






def _patches(env: Env, since: int = 0) -> list[int]:
    """The positions (1-based, from `since`) of the DaemonSet patches among the writes."""
    return [i for i, w in enumerate(env.writes(since), 1)
            if w.verb == "patch" and w.resource == "daemonsets"]


def test_sigterm_during_a_write_finishes_it_releases_the_lock_and_the_rerun_completes(
        fresh: Callable[..., Env], migrated: EndState) -> None:
    env = fresh(time_scale=0.25)  # each new pod takes 0.5 s to become Ready
    env.sim.server.faults.update(hang_nth_write=1, hang_write_of="patch daemonsets")
    proc = crash.start(env.kubeconfig, *APPLY)
    try:
        assert env.sim.server.faults.wait_held(60), "the DaemonSet patch never came"
        proc.send_signal(signal.SIGTERM)  # the patch landed; its answer is still on its way
        time.sleep(0.5)
        assert proc.poll() is None, "SIGTERM cut the write in flight short"
    finally:
        env.sim.server.faults.release_held()
    code, _, err = crash.finish(proc)

    assert code == 143, err
    assert "Traceback" not in err
    assert "interrupted: the run's lock is released" in err
    assert ("interrupted (SIGTERM): run the same command again to resume: dcgm-migrate "
            + " ".join(APPLY)) in err
    assert _lock_annotations(env) == {}
    doc = crash.live_document(env.sim)
    phase1 = doc["phases"][0]
    assert phase1["status"] == "in-progress"
    # The patch in flight was recorded done before the run stopped: no intent left dangling.
    assert [r["status"] for r in phase1["steps"]] == ["done"], phase1["steps"]

    again = crash.run(env.kubeconfig, *APPLY)
    assert again.code == 0, again.stderr
    assert "took over" not in again.stderr  # the lock was released, nothing to take over
    assert crash.diff(migrated.objects, crash.comparable(env.sim)) == []
    assert crash.state_summary(env.sim) == migrated.state
    assert not env.finish()


def test_sigterm_while_a_rollback_waits_for_its_rollout(fresh: Callable[..., Env]) -> None:
    """Mid-rollout: the rollback's DaemonSet patch is done and its pods are rolling (`--rolling`:
    in place, the rollback would be over before the signal)."""
    rollback = (*ROLLBACK, "--rolling")
    env = fresh(time_scale=0.25)
    before = crash.comparable(env.sim)
    assert crash.run(env.kubeconfig, *APPLY, "--timeout", "5m").code == 0
    mark = env.mark()
    proc = crash.start(env.kubeconfig, *rollback)
    crash.until(lambda: bool(_patches(env, mark)), proc)
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    code, _, err = crash.finish(proc)

    assert code == 143, err
    assert "interrupted (SIGTERM): run the same command again to resume: dcgm-migrate " \
        + " ".join(rollback) in err
    assert _lock_annotations(env) == {}
    statuses = [p["status"] for p in crash.live_document(env.sim)["phases"]]
    assert statuses[0] == "in-progress" and statuses != ["rolled-back"] * 3, statuses

    again = crash.run(env.kubeconfig, *rollback)
    assert again.code == 0, again.stderr
    assert [p["status"] for p in crash.state_document(env.sim)["phases"]] == ["rolled-back"] * 3
    assert crash.diff(before, crash.comparable(env.sim)) == []
    assert not env.finish()


def test_sigterm_while_change_stack_waits_stops_it_at_once_and_the_rerun_completes(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """Mid-change, waiting for the new stack's pods with the stable names' EndpointSlices
    watched for the gap meter: the watch ends with the run (no wait for the server to end the
    stream), the lock is released, and the same command completes the change. The new pods
    take 6 simulated (here real) seconds to start, so the wait outlasts a loaded machine."""
    env = fresh("clusterpolicy", monitor=False, time_scale=1.0, pod_start_seconds=6.0,
                operator_reconcile_seconds=RESYNC_SECONDS)
    assert crash.run(env.kubeconfig, *APPLY).code == 0
    args = ("change-stack", "--to", "gpucluster", "-f", str(manifest(tmp_path, "gpucluster")),
            "--delete-cr",
            "gpu-cluster-policy", "--yes", "--settle", "0s")
    proc = crash.start(env.kubeconfig, *args)

    def retargeted() -> bool:  # the step before the wait for the new pods, recorded done
        steps = crash.live_document(env.sim).get("stackChange", {}).get("steps") or {}
        return all((steps.get(f"retarget/Service/{name}") or {}).get("status") == "done"
                   for name in ("nvidia-dcgm", "nvidia-dcgm-exporter"))

    crash.until(retargeted, proc)
    mark = env.mark()
    # Each poll of the wait reads the kept Services; its first poll says "waiting: ..." before
    # it sleeps, so a second read of one proves the run is inside the wait.
    crash.until(lambda: len(env.sim.server.log.find(
        mark, verb="get", resource="services", name="nvidia-dcgm")) >= 2, proc)
    proc.send_signal(signal.SIGTERM)
    began = time.monotonic()
    code, _, err = crash.finish(proc)

    assert code == 143, err
    assert time.monotonic() - began < 10, "the run outlived its SIGTERM"
    assert "waiting: every node served again by the stable names" in err
    assert "interrupted (SIGTERM): run the same command again to resume" in err
    assert _lock_annotations(env) == {}
    assert crash.live_document(env.sim)["stackChange"]["status"] == "in-progress"

    again = crash.run(env.kubeconfig, *args)
    assert again.code == 0, again.stderr
    assert crash.state_document(env.sim)["stackChange"]["status"] == "completed"
