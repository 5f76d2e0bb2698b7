"""Concurrency (docs/design.md, "State and resume"): several `apply` processes started together —
exactly one migrates, the others exit 4 naming the holder and write nothing; an expired lock is
taken over; a live lock of another host is respected until `unlock` releases it; a run killed
on this host, or a Job's pod that no longer exists, is provably gone: its lock is taken over at
once by the next run, which says whose and why (docs/runbook.md, "Lock held / unlock");
`change-stack` holds one lock from its first write to its last, its phases included."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.store import Event
from migrator.engine.state import lock as locking
from migrator.model import kinds
from tests.helpers import crash
from tests.helpers.stackprep import manifest
from tests.reliability.conftest import APPLY, NS, EndState, Env

STATE_CM = "dcgm-migrate-state"
OTHER = "oncall@bastion-2 pid 4242"  # a run on another host


@pytest.mark.parametrize("runs", [2, 4])
def test_runs_started_together_exactly_one_proceeds(
        fresh: Callable[..., Env], migrated: EndState, runs: int) -> None:
    env = fresh()
    # The winner's first state save (write 2: write 1 took the lock) is held until every other
    # run has given up, so all of them meet a live lock whatever the scheduling.
    env.sim.server.faults.update(hang_nth_write=2)
    procs = [crash.start(env.kubeconfig, *APPLY) for _ in range(runs)]
    outputs: dict[int, tuple[str, str]] = {}
    try:
        assert env.sim.server.faults.wait_held(60), "nobody took the lock"
        deadline = time.monotonic() + 60
        while sum(p.poll() is not None for p in procs) < runs - 1:
            assert time.monotonic() < deadline, "the losers did not give up"
            time.sleep(0.02)
        env.sim.server.faults.release_held()
        for p in procs:
            outputs[p.pid] = p.communicate(timeout=120)
    finally:
        env.sim.server.faults.release_held()
        for p in procs:
            if p.poll() is None:
                p.kill()
    codes = sorted(p.returncode for p in procs)
    assert codes == [0] + [4] * (runs - 1), [(c, outputs[p.pid][1][-300:])
                                             for p, c in zip(procs, codes, strict=True)]
    winner = next(p for p in procs if p.returncode == 0)
    for p in procs:
        if p is winner:
            continue
        out, err = outputs[p.pid]
        assert "Traceback" not in err
        assert json.loads(out)["error"]["exitCode"] == 4  # -o json: one error document
        assert re.search(rf"holds the lock .*: \S+@\S+ pid {winner.pid}, until ", err), err
        assert "fix:" in err and "dcgm-migrate unlock" in err
    # The losers wrote nothing: the writes are exactly an uninterrupted run's.
    assert len(env.writes()) == migrated.writes
    assert crash.diff(migrated.objects, crash.comparable(env.sim)) == []
    assert not env.finish()


def _locked_configmap(env: Env, holder: str, acquired: datetime, ttl: float,
                      process: locking.Process | None = None) -> None:
    """A state ConfigMap with only a lock in it (no state yet), as `acquire_lock` leaves it."""
    lock = locking.new_lock(holder, acquired, ttl, None, process=process)
    crash.create_locked_state(env.sim.store, NS, lock)


def _foreign_lock(env: Env, *, expired: bool) -> None:
    """Held by a run on another host, since ten minutes; expired or good for an hour more."""
    since = datetime.now(UTC) - timedelta(minutes=10)
    _locked_configmap(env, OTHER, since, 60.0 if expired else 4200.0)


def test_an_expired_lock_is_taken_over(fresh: Callable[..., Env], migrated: EndState) -> None:
    env = fresh()
    _foreign_lock(env, expired=True)
    done = crash.run(env.kubeconfig, *APPLY)
    assert done.code == 0, done.stderr
    assert f"took over the expired lock of {OTHER}" in done.stderr
    assert crash.diff(migrated.objects, crash.comparable(env.sim)) == []
    crash.state_document(env.sim)  # intact, and the lock released
    assert not env.finish()


def test_a_live_lock_is_respected_until_unlock(fresh: Callable[..., Env]) -> None:
    env = fresh()
    _foreign_lock(env, expired=False)
    mark = env.mark()
    held = crash.run(env.kubeconfig, *APPLY)
    assert held.code == 4, held.output
    assert f"holds the lock on {NS}/{STATE_CM}: {OTHER}, until " in held.stderr
    assert env.writes(mark) == []
    released = crash.run(env.kubeconfig, "unlock")
    assert released.code == 0, released.output
    assert released.stdout.strip() == f"released the lock of {OTHER}"
    assert [(w.verb, w.resource, w.name) for w in env.writes(mark)] == [
        ("update", "configmaps", STATE_CM)]
    again = crash.run(env.kubeconfig, "unlock")
    assert (again.code, again.stdout.strip()) == (0, "no lock was held")
    assert not env.finish()


@pytest.mark.usefixtures("fresh_interpreters")  # kill -9 and /proc: real process starts
def test_a_run_killed_on_this_host_is_taken_over_at_once(fresh: Callable[..., Env]) -> None:
    """kill -9 leaves the lock with two minutes of lease, but its process no longer runs on
    this host (/proc, its pid and start time): `status` says so instead of `running`, and the
    next run takes the lock over at once, saying whose and why."""
    env = fresh()
    args = ("apply", "--phase", "1", "--yes", "-o", "json")
    assert crash.kill_after_write(env.sim, 2, *args)  # write 1 took the lock, 2 saved the state
    guard = time.monotonic() + 30  # the held write is logged once its answer is let go
    while len(env.writes()) < 2:
        assert time.monotonic() < guard, env.writes()
        time.sleep(0.01)
    cm = env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM)
    info = locking.read(cm["metadata"]["annotations"])
    assert info is not None and info.expires is not None and info.process is not None
    assert info.expires > datetime.now(UTC)  # its lease still runs
    host = locking.default_holder().rsplit(" pid ", 1)[0]
    assert info.holder == f"{host} pid {info.process.pid}"
    assert info.process.started is not None  # /proc/<pid>/stat field 22: a reused pid is not it

    status = crash.run(env.kubeconfig, "status", "-o", "json")
    run = json.loads(status.stdout)["run"]
    assert run["state"] == "interrupted" and run["lock"]["gone"], run  # never `running`
    assert status.code == 1

    mark = env.mark()
    done = crash.run(env.kubeconfig, *args)
    assert done.code == 0, done.stderr
    assert (f"took over the lock of {info.holder} at once: its process (pid "
            f"{info.process.pid} on {info.process.host}) no longer runs, so its run is gone "
            f"(its lease ran until {locking.format_time(info.expires)})") in done.stderr
    assert env.writes(mark), "the rerun did nothing"
    crash.state_document(env.sim)  # intact, and the lock released
    assert not env.finish()


@pytest.mark.usefixtures("fresh_interpreters")
def test_unlock_releases_a_killed_runs_lock_without_force(fresh: Callable[..., Env]) -> None:
    env = fresh()
    args = ("apply", "--phase", "1", "--yes", "-o", "json")
    assert crash.kill_after_write(env.sim, 2, *args)
    info = locking.read(env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM)["metadata"][
        "annotations"])
    assert info is not None and info.process is not None
    done = crash.run(env.kubeconfig, "unlock", "-o", "json")
    assert done.code == 0, done.stderr
    gone = f"its process (pid {info.process.pid} on {info.process.host}) no longer runs"
    assert json.loads(done.stdout) == {"namespace": NS, "released": info.holder,
                                       "forced": False, "holderGone": gone}
    assert not env.finish()


JOB_POD = "dcgm-migrate-apply-x7k2q"


def _job_lock(env: Env) -> str:
    """A live lock, renewed just now, of a Job's pod on another node."""
    holder = f"root@{JOB_POD} pid 1 (pod {NS}/{JOB_POD})"
    process = locking.Process(JOB_POD, 1, 4711, "node-7-boot", "pid:[4026532999]",
                              f"{NS}/{JOB_POD}")
    _locked_configmap(env, holder, datetime.now(UTC), 120.0, process)
    return holder


def test_a_lock_of_a_job_pod_that_no_longer_exists_is_taken_over_at_once(
        fresh: Callable[..., Env], migrated: EndState) -> None:
    env = fresh()
    holder = _job_lock(env)
    done = crash.run(env.kubeconfig, *APPLY)
    assert done.code == 0, done.stderr
    assert (f"took over the lock of {holder} at once: its pod {NS}/{JOB_POD} no longer "
            "exists, so its run is gone") in done.stderr
    assert crash.diff(migrated.objects, crash.comparable(env.sim)) == []
    assert not env.finish()


def test_a_lock_of_a_job_pod_that_runs_is_refused(fresh: Callable[..., Env]) -> None:
    env = fresh(monitor=False)
    holder = _job_lock(env)
    env.sim.store.create(kinds.POD, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": JOB_POD, "namespace": NS, "labels": {"job-name": "dcgm-migrate"}},
        "spec": {"containers": [{"name": "dcgm-migrate", "image": "dcgm-migrate:0.1.0"}]},
        "status": {"phase": "Running"}})
    mark = env.mark()
    held = crash.run(env.kubeconfig, *APPLY)
    assert held.code == 4, held.output
    assert f"holds the lock on {NS}/{STATE_CM}: {holder}, until " in held.stderr
    assert (f"`dcgm-migrate status -n {NS} --kubeconfig {env.kubeconfig}` shows its "
            "progress") in held.stderr
    assert env.writes(mark) == []


def test_change_stack_holds_one_lock_from_its_first_write_to_its_last(
        fresh: Callable[..., Env], tmp_path: Path) -> None:
    """The change's own steps, the new stack's phases and the change's close run under one
    lock: at no commit between the first and the last is the lock free (another run could
    start there), and it is taken once."""
    env = fresh("clusterpolicy", monitor=False, operator_reconcile_seconds=RESYNC_SECONDS)
    assert crash.run(env.kubeconfig, *APPLY).code == 0
    holders: list[str | None] = []

    def seen(event: Event) -> None:
        meta = event.object["metadata"]
        if event.resource.plural == "configmaps" and meta["name"] == STATE_CM:
            holders.append((meta.get("annotations") or {}).get(locking.HOLDER))

    env.sim.store.subscribe(seen)
    done = crash.run(env.kubeconfig, "change-stack", "--to", "gpucluster", "-f",
                     str(manifest(tmp_path, "gpucluster")), "--delete-cr", "gpu-cluster-policy",
                     "--yes", "--settle", "0s")
    env.sim.store.unsubscribe(seen)
    assert done.code == 0, done.output[-2000:]
    assert len(holders) > 10 and holders[0] is not None and holders[-1] is None, holders
    assert None not in holders[:-1], holders  # released once, at the end
    assert len(set(holders[:-1])) == 1, holders  # one holder: taken once
