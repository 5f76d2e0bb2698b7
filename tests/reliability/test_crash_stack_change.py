"""Crash anywhere for `change-stack` on the released operator, to the GPUCluster and back
(docs/runbook.md, "Changing stack"): SIGKILLed right after every one of its K writes in turn
(its own steps, its state records and the new stack's phases it runs), then run again, it ends
where an uninterrupted run ends: the same Services and DaemonSets, the same phase records, the
change completed; and the stable names never vanished nor changed ClusterIP, kill or not.

Built as tests/reliability/test_crash_anywhere.py: a fresh cluster per k, the CLI a real
process, the kill exact, the killed run's lock met expired; K split into `SHARDS` tests. Each
cluster goes there with its k-th write killed, then, proven where the uninterrupted change
ends, back with its k-th write killed: one cluster set up per k serves both directions.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim.controllers.operator import RESYNC_SECONDS
from migrator.model import kinds
from tests.helpers import cli, crash
from tests.helpers.stablenames import watching
from tests.helpers.stackprep import manifest
from tests.reliability.conftest import APPLY, NS, Env

SHARDS = 4
STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")
FOLDER = Path(tempfile.mkdtemp(prefix="dcgm-migrate-stack-change-"))  # this worker's own
atexit.register(shutil.rmtree, FOLDER, ignore_errors=True)
MANIFEST, BACK = FOLDER / "gpucluster.yaml", FOLDER / "clusterpolicy.yaml"
ARGS = ("change-stack", "--to", "gpucluster", "-f", str(MANIFEST), "--delete-cr",
        "gpu-cluster-policy", "--yes", "--settle", "0s")
BACK_ARGS = ("change-stack", "--to", "clusterpolicy", "-f", str(BACK), "--delete-cr",
             "gpu-cluster", "--yes", "--settle", "0s")


@dataclass
class Reference:
    writes: int
    objects: dict[str, Any]
    state: dict[str, Any]


def _ready_for_change(fresh: Callable[..., Env], back: bool = False) -> Env:
    """A migrated ClusterPolicy cluster, its nodes labelled for the GPUCluster's DCGM; `back`:
    changed to the GPUCluster already (uninterrupted), for the reference change back."""
    manifest(FOLDER, "gpucluster")
    manifest(FOLDER, "clusterpolicy")
    env = fresh("clusterpolicy", monitor=False, operator_reconcile_seconds=RESYNC_SECONDS)
    res = cli.run(env.kubeconfig, *APPLY)
    assert res.code == 0, res.stderr
    if back:
        done = crash.run(env.kubeconfig, *ARGS)
        assert done.code == 0, done.output[-2000:]
    return env


def _reference(fresh: Callable[..., Env], factory: pytest.TempPathFactory,
               back: bool) -> Reference:
    """The uninterrupted change (`back`: the change back after one), once per session."""
    def make() -> dict[str, Any]:
        env = _ready_for_change(fresh, back)
        mark = env.mark()
        done = crash.run(env.kubeconfig, *(BACK_ARGS if back else ARGS))
        assert done.code == 0, done.output[-2000:]
        made = {"writes": len(env.writes(mark)), "objects": crash.comparable(env.sim),
                "state": crash.state_summary(env.sim)}
        env.sim.stop()
        return made

    return Reference(**crash.shared(factory, f"change-stack-{'back' if back else 'there'}",
                                    make))


def _killed_and_resumed(env: Env, ref: Reference, args: tuple[str, ...], k: int) -> list[str]:
    """Kill `args` right after its k-th write, let its lock expire, run it again: what differs
    from the uninterrupted run's end (`ref`), and whether a stable name vanished or changed
    ClusterIP meanwhile. Empty: it resumed cleanly."""
    ips = {n: env.sim.store.get(kinds.SERVICE, NS, n)["spec"]["clusterIP"] for n in STABLE}
    with watching(env.sim, NS, STABLE) as seen:
        ended: list[str] = []
        if not crash.kill_after_write(env.sim, k, *args, ended=ended):
            return [f"the run ended before its write {k}: " + "; ".join(ended)]
        env.let_the_lock_expire()
        again = crash.run(env.kubeconfig, *args)
    problems = [] if again.code == 0 else [f"rerun exited {again.code}: "
                                           f"{again.output.strip()[-400:]}"]
    problems += crash.diff(ref.objects, crash.comparable(env.sim))
    problems += crash.diff(ref.state, crash.state_summary(env.sim))
    if seen.unexplained_absence():  # but for the old operator's hand-back (stablenames.py)
        problems.append(f"a stable name vanished: {seen.absent_seconds}")
    if {n: sorted(v) for n, v in seen.cluster_ips.items()} != {n: [ip] for n, ip in ips.items()}:
        problems.append(f"a ClusterIP changed: {seen.cluster_ips}")
    status = crash.state_document(env.sim).get("stackChange", {}).get("status")
    if status != "completed":
        problems.append(f"stackChange {status}")
    return problems[:5]


@pytest.mark.slow(seconds=200)
@pytest.mark.timeout(600)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_change_stack_there_and_back_killed_after_any_write_resumes_to_the_same_end_state(
        fresh: Callable[..., Env], capsys: pytest.CaptureFixture[str],
        tmp_path_factory: pytest.TempPathFactory, shard: int) -> None:
    """Per kill point k, one cluster: the change to the GPUCluster killed after its k-th write
    and resumed must end as the uninterrupted change ends; the same cluster, so proven equal
    to where the uninterrupted change leaves one, then changes back with its k-th write killed
    and resumed (a resumed change followed by another: the chain a fleet meets)."""
    there = _reference(fresh, tmp_path_factory, False)
    back = _reference(fresh, tmp_path_factory, True)
    assert there.writes > 10 and back.writes > 10, (there.writes, back.writes)
    assert there.state["stack"] == "gpucluster" and back.state["stack"] == "clusterpolicy"
    failures: dict[str, list[str]] = {"there": [], "back": []}
    points = range(shard + 1, max(there.writes, back.writes) + 1, SHARDS)
    for k in points:
        env = _ready_for_change(fresh)
        if k <= there.writes:
            problems = _killed_and_resumed(env, there, ARGS, k)
        else:  # only to go back from: uninterrupted
            done = crash.run(env.kubeconfig, *ARGS)
            problems = [] if done.code == 0 else [f"exit {done.code}: {done.output[-400:]}"]
        if problems:
            failures["there"].append(f"k={k}: " + "; ".join(problems))
        elif k <= back.writes:
            problems = _killed_and_resumed(env, back, BACK_ARGS, k)
            if problems:
                failures["back"].append(f"k={k}: " + "; ".join(problems))
        env.sim.stop()
    crash.report_chain(capsys, shard, SHARDS, points,
                       [(ARGS, there.writes, failures["there"]),
                        (BACK_ARGS, back.writes, failures["back"])])
