"""Concurrency (docs/design.md, "State and resume"): several `apply` processes started together —
exactly one migrates, the others exit 4 naming the holder and write nothing; an expired lock is
taken over; a live lock of another host is respected until `unlock` forces it."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from migrator.engine.state import lock as locking
from migrator.engine.state.configmap import CHECKSUM_KEY, EMPTY_SHA, EMPTY_TEXT, STATE_KEY
from migrator.model import kinds
from tests.helpers import crash
from tests.reliability.conftest import APPLY, NS, EndState, Env

STATE_CM = "dcgm-migrate-state"
OTHER = "oncall@bastion-2 pid 4242"  # a run on another host: never judged dead by its pid


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


def _locked_configmap(env: Env, holder: str, acquired: datetime, ttl: float) -> None:
    """A state ConfigMap with only a lock in it (no state yet), as `acquire_lock` leaves it."""
    lock = locking.new_lock(holder, acquired, ttl, None)
    env.sim.store.create(kinds.CONFIGMAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": STATE_CM, "namespace": NS,
                     "labels": {"app.kubernetes.io/managed-by": "dcgm-migrate"},
                     "annotations": locking.annotations_for(lock)},
        "data": {STATE_KEY: EMPTY_TEXT, CHECKSUM_KEY: EMPTY_SHA},
    })


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


def test_a_killed_run_on_this_host_is_taken_over_at_once(fresh: Callable[..., Env]) -> None:
    """No waiting for the TTL when the holder is a dead process of this very host."""
    env = fresh()
    sleeper = subprocess.Popen(["sleep", "0"])
    sleeper.wait()
    dead = locking.default_holder().rsplit(" pid ", 1)[0] + f" pid {sleeper.pid}"
    _locked_configmap(env, dead, datetime.now(UTC), 3600.0)
    done = crash.run(env.kubeconfig, "apply", "--phase", "1", "--yes", "-o", "json")
    assert done.code == 0, done.stderr
    assert f"took over the expired lock of {dead}" in done.stderr
    assert not env.finish()
