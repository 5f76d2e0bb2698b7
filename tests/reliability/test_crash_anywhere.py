"""Crash anywhere (docs/design.md, "State and resume"): `apply --phase 3` and `rollback --phase 1`,
each SIGKILLed right after every one of its K writes in turn, then run again, end exactly where an
uninterrupted run ends. Both take phase 1's in-place path (hold on `OnDelete`, relabel the
template, patch every pod, restore the strategy), so every k also proves that no DaemonSet is
left on `OnDelete` and that no pod was replaced.

Each k gets a fresh simulated cluster watched by the disruption monitor, which goes through
both: the apply killed at its k-th write and rerun, then (proven where the uninterrupted apply
ends) the rollback killed at its k-th write and rerun. The CLI is a real
process (a child of the worker's fork server, tests/helpers/forkserver.py: a fresh interpreter's
start without its import CPU); the kill is exact (the sim holds the answer of write k until the
process is dead).
The killed run's lock stays held until it expires (tests/reliability/test_concurrency.py): each
rerun meets it expired, as after waiting out its TTL.

The K crash points are split into `SHARDS` tests (k = shard+1, shard+1+SHARDS, ...), so
pytest-xdist runs them side by side; together they cover every k from 1 to K of each command.
The uninterrupted reference runs are made once per worker process and command, each on its own
fresh cluster, and every shard checks them (more than 5 writes, their end states).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from migrator.model import kinds
from migrator.model.objects import HELD_STRATEGY
from tests.helpers import cli, crash
from tests.reliability.conftest import APPLY, NS, ROLLBACK, Env

Prepare = Callable[[Env], None]
SHARDS = 4


@dataclass
class Reference:
    writes: int
    objects: dict[str, Any]
    state: dict[str, Any]
    allowed: set[str]


def _nothing(env: Env) -> None:
    return None


def _migrated(env: Env) -> None:
    """The cluster after a full migration (run in process: only the rollback is under test)."""
    res = cli.run(env.kubeconfig, *APPLY)
    assert res.code == 0, res.stderr


def _reference(fresh: Callable[..., Env], prepare: Prepare, args: tuple[str, ...]) -> Reference:
    env = fresh()
    plan = cli.run(env.kubeconfig, "plan", "-o", "json")
    assert plan.code == 0, plan.stderr
    prepare(env)
    mark, before = env.mark(), _pod_uids(env)
    done = crash.run(env.kubeconfig, *args)
    assert done.code == 0, done.stderr
    assert len(before) == 4 and _in_place_problems(env, before) == []  # 2 nodes x 2 DaemonSets
    relabelled = [w for w in env.writes(mark) if w.resource == "pods"]
    assert len(relabelled) == len(before), relabelled  # one patch per pod, in place
    ref = Reference(len(env.writes(mark)), crash.comparable(env.sim), crash.state_summary(env.sim),
                    crash.allow_list(plan.json()))
    assert crash.outside(env.writes(), ref.allowed) == []
    assert not env.finish()
    env.sim.stop()
    return ref


def _pod_uids(env: Env) -> dict[str, str]:
    """Every pod of the DCGM and exporter DaemonSets, name -> uid."""
    return {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in env.sim.store.list(kinds.POD, NS)[0]
            if any(r.get("kind") == "DaemonSet"
                   for r in p["metadata"].get("ownerReferences") or [])}


def _in_place_problems(env: Env, before: dict[str, str]) -> list[str]:
    """Phase 1 in place, whatever instant it was killed at: no DaemonSet left held on
    `OnDelete` (nor carrying the hold's record), and no pod replaced."""
    problems = []
    for ds in env.sim.store.list(kinds.DAEMONSET, NS)[0]:
        name = ds["metadata"]["name"]
        if ds["spec"]["updateStrategy"]["type"] != "RollingUpdate":
            problems.append(f"DaemonSet/{name} left on {ds['spec']['updateStrategy']['type']}")
        if HELD_STRATEGY in (ds["metadata"].get("annotations") or {}):
            problems.append(f"DaemonSet/{name} still carries {HELD_STRATEGY}")
    after = _pod_uids(env)
    if after != before:
        problems.append(f"pods replaced: {sorted(set(before.items()) - set(after.items()))}")
    return problems


def _resume_problems(env: Env, ref: Reference, args: tuple[str, ...],
                     before: dict[str, str]) -> list[str]:
    again = crash.run(env.kubeconfig, *args)
    if again.code != 0:
        return [f"rerun exited {again.code}: {again.stderr.strip()[-400:]}"]
    problems = _in_place_problems(env, before)
    problems += crash.diff(ref.objects, crash.comparable(env.sim))
    problems += [f"wrote {w}, outside the plan" for w in crash.outside(env.writes(), ref.allowed)]
    try:
        problems += crash.diff(ref.state, crash.state_summary(env.sim))
    except AssertionError as exc:
        problems.append(f"state ConfigMap: {exc}")
    return problems


def _referenced(fresh: Callable[..., Env], factory: pytest.TempPathFactory, prepare: Prepare,
                args: tuple[str, ...], label: str) -> Reference:
    """`_reference`, made once per session (`crash.shared`)."""
    def make() -> dict[str, Any]:
        ref = _reference(fresh, prepare, args)
        return {**asdict(ref), "allowed": sorted(ref.allowed)}

    made = crash.shared(factory, f"crash-anywhere-{args[0]}", make)
    ref = Reference(**{**made, "allowed": set(made["allowed"])})
    assert ref.writes > 5, f"{label}: only {ref.writes} writes; the harness counted nothing real"
    return ref


def _killed_and_resumed(env: Env, ref: Reference, args: tuple[str, ...], k: int) -> list[str]:
    """`args` SIGKILLed right after its k-th write, its lock met expired, run again: what
    differs from where the uninterrupted run ends (empty: it resumed cleanly)."""
    before = _pod_uids(env)
    ended: list[str] = []
    if not crash.kill_after_write(env.sim, k, *args, ended=ended):
        return [f"the run ended before its write {k} (not deterministic): " + "; ".join(ended)]
    env.let_the_lock_expire()
    return _resume_problems(env, ref, args, before)


@pytest.mark.slow(seconds=110)
@pytest.mark.timeout(400)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_apply_then_rollback_killed_after_any_write_resume_to_the_same_end_states(
        fresh: Callable[..., Env], capsys: pytest.CaptureFixture[str],
        tmp_path_factory: pytest.TempPathFactory, shard: int) -> None:
    """Per kill point k, one cluster: `apply --phase 3` killed after its k-th write and rerun
    ends where the uninterrupted apply ends; the same cluster, so proven migrated, then takes
    `rollback --phase 1` killed after its k-th write and rerun, which must end where the
    uninterrupted rollback ends: the cluster as it was before any migration."""
    def make_pristine() -> dict[str, Any]:
        pristine = fresh(monitor=False)
        made = crash.comparable(pristine.sim)
        pristine.sim.stop()
        return made

    pristine = crash.shared(tmp_path_factory, "crash-anywhere-pristine", make_pristine)
    apply = _referenced(fresh, tmp_path_factory, _nothing, APPLY, "apply")
    rollback = _referenced(fresh, tmp_path_factory, _migrated, ROLLBACK, "rollback")
    assert [p["status"] for p in apply.state["phases"].values()] == ["completed"] * 3
    assert [p["status"] for p in rollback.state["phases"].values()] == ["rolled-back"] * 3
    assert crash.diff(pristine, rollback.objects) == [], "rollback did not restore the cluster"
    failures: dict[str, list[str]] = {"apply": [], "rollback": []}
    points = range(shard + 1, max(apply.writes, rollback.writes) + 1, SHARDS)
    for k in points:
        env = fresh()
        stage, problems = "apply", []
        if k <= apply.writes:
            problems = _killed_and_resumed(env, apply, APPLY, k)
        else:  # only to roll back from: uninterrupted
            _migrated(env)
        if not problems and k <= rollback.writes:
            stage, problems = "rollback", _killed_and_resumed(env, rollback, ROLLBACK, k)
        problems += env.finish()  # the disruption monitor, over both runs
        env.sim.stop()
        if problems:
            failures[stage].append(f"k={k}: " + "; ".join(problems[:5]))
    crash.report_chain(capsys, shard, SHARDS, points,
                       [(APPLY, apply.writes, failures["apply"]),
                        (ROLLBACK, rollback.writes, failures["rollback"])])


def test_killed_right_after_the_last_daemonset_patch_the_rerun_waits_for_its_rollout(
        fresh: Callable[..., Env]) -> None:
    """The rerun's plan has no step left for a DaemonSet already patched; it must still wait
    for that rollout (and record the step done) before calling phase 1 completed."""
    args = ("apply", "--phase", "1", "--yes", "-o", "json")
    probe = fresh(monitor=False)
    assert crash.run(probe.kubeconfig, *args).code == 0
    patches = [i for i, w in enumerate(probe.writes(), 1)
               if w.verb == "patch" and w.resource == "daemonsets"]
    probe.sim.stop()
    slow = fresh(time_scale=0.25)  # each new pod takes 0.5 s to become Ready
    assert crash.kill_after_write(slow.sim, patches[-1], *args)
    assert slow.let_the_lock_expire() is not None  # killed mid-run: it still held the lock
    again = crash.run(slow.kubeconfig, *args)
    assert again.code == 0, again.stderr
    for name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"):
        ds = slow.sim.store.get(kinds.DAEMONSET, "gpu-operator", name)
        status, desired = ds["status"], ds["status"]["desiredNumberScheduled"]
        assert status["observedGeneration"] >= ds["metadata"]["generation"], name
        assert status["updatedNumberScheduled"] == status["numberAvailable"] == desired > 0, \
            f"{name}: phase 1 called completed mid-rollout: {status}"
    phase1 = crash.state_summary(slow.sim)["phases"]["1"]
    assert phase1["status"] == "completed" and phase1["wroteLabels"] is True
    assert {status for _, status in phase1["steps"]} == {"done"}, phase1["steps"]
