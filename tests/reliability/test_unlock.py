"""`unlock` never releases a live run's lock by accident: while the holder keeps renewing it
(not expired, renewed within the last minute) it is refused with exit 4, naming the holder,
since when, its last renewal and expiry, and the way out; `--force` releases it. A lock nobody
renews any more is released without `--force` (docs/runbook.md, "Lock held / unlock")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from migrator.engine.state import lock as locking
from migrator.model import kinds
from tests.helpers import cli, crash
from tests.reliability.conftest import APPLY, NS, Env

STATE_CM = "dcgm-migrate-state"


def _lock(env: Env) -> locking.LockInfo | None:
    cm = env.sim.store.find(kinds.CONFIGMAP, NS, STATE_CM)
    return locking.read((cm or {}).get("metadata", {}).get("annotations"))


def test_unlock_is_refused_while_the_run_renews_and_forced_with_force(
        fresh: Callable[..., Env]) -> None:
    env = fresh(time_scale=0.25)  # each new pod takes 0.5 s to become Ready: a slow apply
    proc = crash.start(env.kubeconfig, *APPLY)
    try:
        deadline = time.monotonic() + 60
        while _lock(env) is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        held = _lock(env)
        assert held is not None and held.holder.endswith(f" pid {proc.pid}")

        refused = cli.run(env.kubeconfig, "unlock")
        assert refused.code == 4, refused.stdout + refused.stderr
        assert (f"A live dcgm-migrate run holds the lock on {NS}/{STATE_CM}: {held.holder}, "
                f"acquired {held.acquired}, last renewed ") in refused.stderr
        assert "s ago), until " in refused.stderr
        assert (f"only if you are sure it is dead, `dcgm-migrate unlock --force -n {NS} "
                f"--kubeconfig {env.kubeconfig}`" in refused.stderr)
        as_json = cli.run(env.kubeconfig, "unlock", "-o", "json")
        assert as_json.code == 4 and as_json.json()["error"]["exitCode"] == 4
        still = _lock(env)
        assert still is not None and still.holder == held.holder  # untouched
        assert proc.poll() is None  # the run goes on

        forced = cli.run(env.kubeconfig, "unlock", "--force", "-o", "json")
        assert forced.code == 0, forced.stderr
        assert forced.json() == {"namespace": NS, "released": held.holder, "forced": True,
                                 "holderGone": None}
        after = _lock(env)
        assert after is None or after.holder != held.holder
    finally:
        code, _, err = crash.finish(proc)
    # The run found its lock gone at its next state write or renewal and stopped (exit 4).
    assert code == 4, err
    again = crash.run(env.kubeconfig, *APPLY)
    assert again.code == 0, again.stderr
    assert not env.finish()


def test_a_lock_nobody_renews_is_released_without_force(fresh: Callable[..., Env]) -> None:
    """Not expired yet, but not renewed for two minutes: its holder is gone."""
    env = fresh(monitor=False)
    now = datetime.now(UTC)
    lock = locking.Lock("oncall@bastion-2 pid 4242", now - timedelta(minutes=10),
                        now + timedelta(minutes=5), 3600.0, renewed=now - timedelta(minutes=2))
    crash.create_locked_state(env.sim.store, NS, lock)
    done = cli.run(env.kubeconfig, "unlock")
    assert done.code == 0, done.stderr
    assert done.stdout.strip() == f"released the lock of {lock.holder}"
    assert _lock(env) is None
    assert json.loads(cli.run(env.kubeconfig, "unlock", "-o", "json").stdout) == {
        "namespace": NS, "released": None, "forced": False, "holderGone": None}
