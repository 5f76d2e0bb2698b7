"""`status` tells a run in progress from an interrupted one and from a rollback (the `run`
object of docs/output.schema.json, and the table): who holds the lock and since when, the
command that resumes an interrupted run, the rollback's own steps instead of the forward diff,
and the history. A rollback stopped between two phases (SIGTERM, or kill -9 whose lock the next
run takes over at once) reads as interrupted — `status` and `verify` exit 1 — until it is
resumed. The runs are real subprocesses on a sim with slow pod starts; `status` is the CLI
in-process."""

from __future__ import annotations

import shlex
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim.controllers.operator import RESYNC_SECONDS
from migrator.model import kinds
from tests.helpers import cli, crash
from tests.helpers.stackprep import manifest
from tests.reliability.conftest import APPLY, NS, ROLLBACK, Env

STATE_CM = "dcgm-migrate-state"
SLOW = 0.25  # real seconds per simulated second: a new pod is Ready after 0.5 s


def _phases(env: Env) -> list[dict[str, Any]]:
    phases: list[dict[str, Any]] = crash.live_document(env.sim).get("phases") or []
    return phases


def _step_status(env: Env, step: str) -> str | None:
    """A `change-stack` step's recorded status, read while the run holds the lock."""
    doc = crash.live_document(env.sim)
    status = ((doc.get("stackChange") or {}).get("steps") or {}).get(step, {}).get("status")
    return None if status is None else str(status)


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    code, _, err = crash.finish(proc)
    return code, err


def _status(env: Env) -> tuple[int, dict[str, Any], str]:
    doc = cli.run(env.kubeconfig, "status", "-o", "json")  # validated against the schema
    table = cli.run(env.kubeconfig, "status")
    assert doc.code == table.code
    return doc.code, doc.json(), table.stdout


def test_status_during_a_run_then_after_sigterm_then_after_the_resume(
        fresh: Callable[..., Env]) -> None:
    env = fresh(time_scale=SLOW)
    # --rolling: phase 1 waits on rollouts long enough to be caught mid-run (in place, it
    # is over within a second)
    proc = crash.start(env.kubeconfig, *APPLY, "--rolling")
    try:
        crash.until(lambda: any(p["status"] == "in-progress" for p in _phases(env)), proc)
        code, doc, table = _status(env)
        run = doc["run"]
        assert run["state"] == "running", run
        assert (run["operation"], run["target"], run["phase"]) == ("apply", 3, 1)
        assert run["lock"]["live"] and run["lock"]["holder"].endswith(f" pid {proc.pid}")
        assert run["lock"]["acquired"] and run["lock"]["expires"] and run["resume"] is None
        assert run["lastEvent"]["event"] == "phase-start" and run["rollback"] is None
        assert "run running — apply --phase 3, at phase 1" in table
        assert f"lock: {run['lock']['holder']}, since {run['lock']['acquired']}" in table
        assert "History (last " in table
        assert "phase-start options=--rolling phase=1 target=3" in table  # keys sorted
        # Once phase 1 has written a label, the run waits on that DaemonSet (its rollout, or
        # the next label write once the rollout is over): status says which.
        crash.until(lambda: any(r["status"] == "done" for p in _phases(env) if p["number"] == 1
                                for r in p.get("steps") or []), proc)
        code, doc, table = _status(env)
        waits = doc["run"]["waitsFor"] or ""
        assert "DaemonSet/nvidia-dcgm" in waits, doc["run"]
        assert "waits for: the " in table
    finally:
        stopped, err = _stop(proc)
    assert stopped == 143, err

    code, doc, table = _status(env)
    run = doc["run"]
    assert run["state"] == "interrupted", run
    assert run["waitsFor"] is None  # nothing runs, so nothing waits
    assert run["lock"] is None  # released on SIGTERM
    # the stopped run's --rolling repeated: the resumed run rolls as it did
    assert run["resume"] == (f"dcgm-migrate apply --phase 3 --rolling -n {NS} "
                             f"--kubeconfig {env.kubeconfig}")
    assert code == 1 and doc["ok"] is False  # an interrupted run never looks healthy
    assert "run interrupted — apply --phase 3, at phase 1, and no run holds the lock" in table
    assert f"resume: dcgm-migrate apply --phase 3 --rolling -n {NS}" in table
    assert ("status NOT OK — a run was interrupted; resume: `dcgm-migrate apply --phase 3 "
            f"--rolling -n {NS}") in table

    again = crash.run(env.kubeconfig, *shlex.split(run["resume"])[1:])  # the exact command
    assert again.code == 0, again.stderr
    code, doc, table = _status(env)
    assert doc["run"]["state"] == "idle" and doc["run"]["resume"] is None
    assert code == 0 and "run idle" in table
    assert not env.finish()


def test_a_write_that_rolls_pods_is_recorded_done_before_its_rollout_wait(
        fresh: Callable[..., Env]) -> None:
    """A write's "done" rides on the run's next state save, but a write that rolls pods has it
    saved before its rollout wait (minutes, on a big fleet): `status` says the run waits for
    the rollout, not for the write. Simulated time stands still, so no pod of the rollout
    starts and the wait cannot end first."""
    env = fresh(time_scale=SLOW)
    with env.sim.clock.held():
        proc = crash.start(env.kubeconfig, *APPLY, "--rolling")
        try:
            # within 20 s: the lock's first renewal (30 s in) would write it anyway
            crash.until(lambda: any(r["status"] == "done" for p in _phases(env)
                                    if p["number"] == 1 for r in p.get("steps") or []), proc,
                        timeout=20)
            _, doc, table = _status(env)
            ds = env.sim.store.get(kinds.DAEMONSET, NS, "nvidia-dcgm-dra")
        finally:
            stopped, err = _stop(proc)
    assert stopped == 143, err
    status = ds["status"]  # rolling still (a count of 0 is left out, as the API does)
    assert status.get("updatedNumberScheduled", 0) < status["desiredNumberScheduled"], status
    assert (doc["run"]["waitsFor"] or "").startswith(
        "the rollout of DaemonSet/nvidia-dcgm-dra:"), doc["run"]
    assert "waits for: the rollout of DaemonSet/nvidia-dcgm-dra" in table


def _migrated_for_a_change(fresh: Callable[..., Env],
                           tmp_path: Path) -> tuple[Env, tuple[str, ...]]:
    """A migrated ClusterPolicy cluster, and the `change-stack` to the GPUCluster for it."""
    env = fresh("clusterpolicy", monitor=False, operator_reconcile_seconds=RESYNC_SECONDS)
    assert crash.run(env.kubeconfig, *APPLY).code == 0
    return env, ("change-stack", "--to", "gpucluster", "-f",
                 str(manifest(tmp_path, "gpucluster")), "--delete-cr", "gpu-cluster-policy",
                 "--yes", "--settle", "0s")


def test_a_stack_change_running_then_stopped_is_the_run_and_only_change_stack_goes_on(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """While `change-stack` waits in its own steps (no phase in progress yet), `status` names
    the change as the run and what it waits for; stopped, the change is the interrupted run,
    `apply` refuses with nothing written (it would plan phases for a stack half changed), and
    the `resume:` command, without the manifest (the change recorded its CR), finishes it."""
    env, args = _migrated_for_a_change(fresh, tmp_path)
    with env.sim.clock.held():  # the new stack's pods cannot start: it waits for them
        proc = crash.start(env.kubeconfig, *args)
        try:
            crash.until(lambda: _step_status(env, "retarget/Service/nvidia-dcgm-exporter")
                        == "intent", proc)
            _, running, table = _status(env)
        finally:
            stopped, err = _stop(proc)
        assert stopped == 143, err
        code, interrupted, after_table = _status(env)
        mark = env.mark()
        refused = cli.run(env.kubeconfig, "apply", "--phase", "3", "--yes")
        assert (refused.code, env.writes(mark)) == (2, []), refused.stderr
    run = running["run"]
    assert (run["state"], run["operation"], run["target"]) == ("running", "change-stack", None)
    assert run["waitsFor"] == "Service/nvidia-dcgm-exporter made the alias of the GPUCluster's " \
        "Service", run
    assert (run["lastEvent"]["event"], run["lastEvent"]["to"]) == (
        "stack-change-start", "gpucluster"), run
    assert "run running — change-stack" in table
    assert "stack-change-start to=gpucluster" in table
    run = interrupted["run"]
    assert code == 1 and (run["state"], run["operation"]) == ("interrupted", "change-stack"), run
    resume = run["resume"]
    assert resume.startswith("dcgm-migrate change-stack --to gpucluster --delete-cr "
                             "gpu-cluster-policy -n gpu-operator --kubeconfig "), resume
    assert f"resume: {resume}" in after_table
    assert "has not finished, and apply would plan the phases" in refused.stderr
    assert resume in refused.stderr and "change-stack --rollback" in refused.stderr
    again = crash.run(env.kubeconfig, *shlex.split(resume)[1:], "--yes", "--settle", "0s")
    assert again.code == 0, again.output[-2000:]
    starts = [e for e in crash.state_document(env.sim)["history"]
              if e["event"] == "stack-change-start"]
    assert [e.get("resumed") for e in starts] == [None, True], starts
    code, done, _ = _status(env)
    assert (code, done["run"]["state"], done["run"]["operation"]) == (0, "idle", None), done


def test_a_stopped_undo_of_a_stack_change_resumes_as_an_undo(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """`change-stack --rollback` stopped while the GPUCluster it deleted is still going: the
    undo is the run `status` reports, `resume:` is the undo again (not the change), `apply`
    refuses, and so does the change forward (its record still says done what the undo
    undid); the resume finishes the undo and the cluster is idle on the ClusterPolicy."""
    env, args = _migrated_for_a_change(fresh, tmp_path)
    changed = crash.run(env.kubeconfig, *args)
    assert changed.code == 0, changed.output[-2000:]
    with env.sim.clock.held():  # the GPUCluster's pods cannot terminate: it is not gone
        proc = crash.start(env.kubeconfig, "change-stack", "--rollback", "--yes")
        try:
            crash.until(lambda: "rollback" in (crash.live_document(env.sim).get("stackChange")
                                               or {}), proc)
            _, running, _ = _status(env)
        finally:
            stopped, err = _stop(proc)
        assert stopped == 143, err
        code, interrupted, _ = _status(env)
        refused = cli.run(env.kubeconfig, "apply", "--phase", "3", "--yes")
        mark = env.mark()  # going forward again would skip the steps the undo undid
        forward = cli.run(env.kubeconfig, "change-stack", "--to", "gpucluster", "-f",
                          str(manifest(tmp_path, "gpucluster")), "--yes", "--settle", "0s")
        assert (forward.code, env.writes(mark)) == (2, []), forward.stderr
        assert "finish the undo first: `dcgm-migrate change-stack --rollback -n " \
            "gpu-operator" in forward.stderr
    assert (running["run"]["operation"], running["run"]["waitsFor"]) == (
        "change-stack", "the undo of the change to the gpucluster stack"), running["run"]
    run = interrupted["run"]
    assert code == 1 and (run["state"], run["operation"]) == ("interrupted", "change-stack"), run
    assert run["resume"].startswith("dcgm-migrate change-stack --rollback -n gpu-operator "), run
    assert refused.code == 2 and run["resume"] in refused.stderr, refused.stderr
    again = crash.run(env.kubeconfig, *shlex.split(run["resume"])[1:], "--yes")
    assert again.code == 0, again.output[-2000:]
    assert crash.state_document(env.sim)["stackChange"]["status"] == "rolled-back"
    code, done, _ = _status(env)
    assert (done["run"]["state"], done["run"]["operation"]) == ("idle", None), done["run"]


def test_status_during_a_rollback_shows_the_rollbacks_steps(fresh: Callable[..., Env]) -> None:
    env = fresh(time_scale=SLOW)
    assert crash.run(env.kubeconfig, *APPLY, "--timeout", "5m").code == 0
    # in place, phase 1's rollback is over within a second: the sim holds the answer to its
    # first pod patch, so both status reads see the same moment, whatever the machine's load
    faults = env.sim.server.faults
    faults.update(hang_nth_write=1, hang_write_of="patch pods")
    proc = crash.start(env.kubeconfig, *ROLLBACK)
    try:
        assert faults.wait_held(60), "the rollback's first pod patch was never sent"
        assert _phases(env)[0]["status"] == "in-progress"
        _, doc, table = _status(env)
        run = doc["run"]
        assert run["state"] == "rolling-back", run
        assert (run["operation"], run["target"], run["phase"]) == ("rollback", 1, 1)
        assert [p["phase"] for p in run["rollback"]] == [1]  # 3 and 2 are rolled back
        steps = run["rollback"][0]["steps"]
        # phase 1's rollback in place: hold, labels off the template, off the pods, restore
        types = {s["type"] for s in steps}
        assert "set-labels" in types and types <= {
            "hold-strategy", "set-labels", "relabel-pods", "restore-strategy"}, steps
        # the rollback removes the common labels: after is null (absent)
        assert all(c["after"] is None for s in steps if s["type"] == "set-labels"
                   for c in s["changes"])
        assert doc["phases"][0]["changes"] == []  # not the forward diff
        assert "run rolling back — rollback --phase 1, at phase 1" in table
        assert "rollback of phase 1 — label (in-progress)" in table
    finally:
        proc.send_signal(signal.SIGTERM)  # the write in flight ends first: let its answer go
        faults.release_held()
        stopped, _, err = crash.finish(proc)
    assert stopped == 143, err
    _, doc, table = _status(env)
    assert doc["run"]["state"] == "interrupted"
    assert doc["run"]["resume"] == (
        f"dcgm-migrate rollback --phase 1 -n {NS} --kubeconfig {env.kubeconfig}")
    assert doc["run"]["rollback"] and doc["phases"][0]["changes"] == []
    again = crash.run(env.kubeconfig, *shlex.split(doc["run"]["resume"])[1:], "--settle", "0s")
    assert again.code == 0, again.stderr
    assert not env.finish()


def _statuses(env: Env) -> list[str]:
    return [p["status"] for p in _phases(env)]


def _history(env: Env) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = crash.live_document(env.sim)["history"]
    return history


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "kill-9"])
def test_a_rollback_stopped_between_two_phases_reads_as_interrupted_until_resumed(
        fresh: Callable[..., Env], signum: signal.Signals) -> None:
    """Phase 3 rolled back, phases 2 and 1 still applied, and the run stopped in the settle
    time before phase 2: no phase is in progress, yet the rollback is not done."""
    env = fresh(time_scale=SLOW)
    assert crash.run(env.kubeconfig, *APPLY, "--timeout", "5m").code == 0
    rollback = ("rollback", "--phase", "1", "--yes", "--settle", "60s", "-o", "json")
    proc = crash.start(env.kubeconfig, *rollback)
    try:
        crash.until(lambda: _statuses(env) == ["completed", "completed", "rolled-back"], proc)
    finally:
        proc.send_signal(signum)
        code, _, err = crash.finish(proc)
    assert code == (143 if signum == signal.SIGTERM else -9), err

    resume = f"dcgm-migrate rollback --phase 1 -n {NS} --kubeconfig {env.kubeconfig}"
    for _ in range(2):  # status and verify alike, as often as asked
        code, doc, table = _status(env)
        run = doc["run"]
        assert code == 1 and doc["ok"] is False, run
        assert (run["state"], run["operation"], run["target"], run["phase"]) == (
            "interrupted", "rollback", 1, 2), run
        assert run["resume"] == resume
        assert [p["phase"] for p in run["rollback"]] == [2, 1]  # what is left to undo
        assert "run interrupted — rollback --phase 1, at phase 2" in table
        assert f"resume: {resume}" in table
        assert f"status NOT OK — a run was interrupted; resume: `{resume}`" in table
        verify = cli.run(env.kubeconfig, "verify")
        assert verify.code == 1, verify.stdout
    events = [(e["event"], e.get("phase"), e.get("target")) for e in _history(env)]
    assert ("rollback-start", 3, 1) in events and ("rolled-back", 3, None) in events
    if signum == signal.SIGTERM:
        assert run["lock"] is None  # released on the way out
        assert _history(env)[-1]["event"] == "interrupted"
        assert _history(env)[-1]["signal"] == "SIGTERM"
        assert "interrupted signal=SIGTERM" in table
    else:  # the lock stays, but its holder is provably gone: no run is said to be running
        lock = run["lock"]
        assert lock["live"] and lock["holder"].endswith(f" pid {proc.pid}")
        assert lock["gone"] == (f"its process (pid {proc.pid} on {socket.gethostname()}) "
                                "no longer runs"), lock
        assert "run interrupted — rollback --phase 1, at phase 2, and its lock's holder " \
               "is gone" in table
        assert f"holder gone ({lock['gone']}): the next run takes it over at once" in table

    again = crash.run(env.kubeconfig, *shlex.split(resume)[1:], "--settle", "0s")
    assert again.code == 0, again.stderr
    if signum == signal.SIGKILL:  # at once, not two minutes later, and it says whose and why
        assert (f"took over the lock of {lock['holder']} at once: {lock['gone']}, so its run "
                "is gone") in again.stderr, again.stderr
    assert _statuses(env) == ["rolled-back"] * 3
    _, doc, table = _status(env)
    assert doc["run"]["state"] == "idle" and doc["run"]["resume"] is None
    # Unmigrated again: the verdict (no stable name yet) is all status still says.
    assert "run idle" in table and "a run was interrupted" not in table, table
    assert not env.finish()
