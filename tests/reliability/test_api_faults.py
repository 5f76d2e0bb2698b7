"""API faults (docs/design.md, "State and resume" and "Command line"): a flaky, slow API server
(20 % of requests 500/503/429, added latency), a 409 on a state write, a write whose answer is
lost, and an unreachable server. The migration completes with the fault-free end state, or stops
with exit 3 and one clear sentence."""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dcgm_sim.cluster import SimCluster, write_kubeconfig
from dcgm_sim.requestlog import RequestRecord
from dcgm_sim.server import ADMIN_TOKEN
from migrator import commands
from migrator.commands import RunRequest, Session
from migrator.engine.loop import RunSettings
from migrator.engine.reports import RunReport
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds
from tests.helpers import crash
from tests.reliability.conftest import APPLY, NS, EndState, Env

STATE_CM = "dcgm-migrate-state"


def test_full_migration_survives_20_percent_errors_and_latency(
        fresh: Callable[..., Env], migrated: EndState) -> None:
    env = fresh()
    # Retry-After: 0 keeps the test fast; honouring a real Retry-After is tests/kube's business.
    env.sim.server.faults.update(error_rate=0.2, error_codes=[500, 503, 429],
                                 retry_after_seconds=0, latency_ms=5, seed=11)
    done = crash.run(env.kubeconfig, *APPLY)
    assert done.code == 0, done.stderr[-2000:]
    codes = Counter(r.code for r in env.sim.server.log.entries())
    injected = codes[500] + codes[503] + codes[429]
    total = sum(codes.values())
    assert min(codes[500], codes[503], codes[429]) > 0, codes
    assert injected / total > 0.1, f"only {injected}/{total} requests failed: {codes}"
    assert crash.diff(migrated.objects, crash.comparable(env.sim)) == []
    assert crash.diff(migrated.state, crash.state_summary(env.sim)) == []
    assert not env.finish()


def _edit_state_configmap(sim: SimCluster, change: Callable[[dict[str, object]], None]) -> None:
    cm = copy.deepcopy(sim.store.get(kinds.CONFIGMAP, NS, STATE_CM))
    change(cm)
    sim.store.update(kinds.CONFIGMAP, cm)


def _edit_state_during_run(env: Env, change: Callable[[dict[str, Any]], None],
                           ) -> tuple[int, str, int]:
    """Run apply, hold the answer of its second write (write 1 takes the lock, 2 saves state),
    change the state ConfigMap meanwhile, then let the run go on. Returns its exit code, its
    stderr and the request-log mark taken just before the change."""
    env.sim.server.faults.update(hang_nth_write=2)
    proc = crash.start(env.kubeconfig, *APPLY)
    try:
        assert env.sim.server.faults.wait_held(60), "no second write"
        mark = env.mark()
        _edit_state_configmap(env.sim, change)
        env.sim.server.faults.release_held()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        env.sim.server.faults.release_held()
    return proc.returncode, err, mark


def test_a_409_on_a_state_write_is_handled_by_re_reading(fresh: Callable[..., Env]) -> None:
    env = fresh()
    # Someone labels the ConfigMap by hand while the run is between two state writes.
    code, err, _ = _edit_state_during_run(env, lambda cm: cm["metadata"]["labels"].update(
        {"team": "gpu-infra"}))
    assert code == 0, err[-2000:]
    conflicts = env.sim.server.log.find(verb="update", resource="configmaps", code=409)
    assert conflicts, "the state write never met a 409: the test proves nothing"
    cm = env.sim.store.get(kinds.CONFIGMAP, NS, STATE_CM)
    assert cm["metadata"]["labels"]["team"] == "gpu-infra"  # the other writer's change kept
    phases = crash.state_summary(env.sim)["phases"]
    assert [p["status"] for p in phases.values()] == ["completed"] * 3
    assert not env.finish()


def test_a_state_document_changed_by_another_run_stops_with_exit_4(
        fresh: Callable[..., Env]) -> None:
    env = fresh()

    def replace_document(cm: dict[str, object]) -> None:
        data = cm["data"]
        assert isinstance(data, dict)
        doc = json.loads(data["state.json"])
        doc["stack"] = "clusterpolicy"  # another run's document, with a valid checksum
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        data["state.json"], data["state.sha256"] = text, crash.sha256(text)

    code, err, mark = _edit_state_during_run(env, replace_document)
    assert code == 4, err
    assert "changed by another run" in err and "Traceback" not in err
    cluster_writes = [w for w in env.writes(mark) if w.resource != "configmaps"]
    assert cluster_writes == [], "the run went on writing after losing its state"
    assert not env.finish()


# ---- a write whose answer is lost --------------------------------------------------------------

def _lost_answer_cases(writes: list[RequestRecord]) -> Iterator[tuple[str, int]]:
    """(kind, n): the first write of each kind in a reference run — lock, state save, label
    patch, pod relabel, alias create, selector patch — and the last one (the lock release), as
    the n-th write of its kind: the sim's hook holds that one (`hang_write_of`) wherever the
    concurrent pod patches put it among the others."""
    seen: set[str] = set()
    for w in writes:
        key = f"{w.verb} {w.resource}"
        if key not in seen:
            seen.add(key)
            yield key, 1
    last = f"{writes[-1].verb} {writes[-1].resource}"
    yield last, sum(f"{w.verb} {w.resource}" == last for w in writes)


HOLD_SECONDS = 0.5  # how long the answer is held: well past the client's 0.2 s read timeout


def _started(r: RequestRecord) -> float:
    """When the server received the request (records are stamped when answered)."""
    return r.time - r.duration_ms / 1000


def _held_write(sim: SimCluster) -> RequestRecord:
    """The write whose answer was held (the request log marks it). Its record is made by the
    server thread once the answer is released, which can be after the run ended: wait for it
    (a guard, not a timing)."""
    guard = time.monotonic() + 30
    while True:
        held = [r for r in sim.server.log.writes() if r.held_answer]
        if held or time.monotonic() > guard:
            assert len(held) == 1, [(r.method, r.path, r.duration_ms) for r in held]
            return held[0]
        time.sleep(0.01)


def _retries_of(sim: SimCluster, held: RequestRecord) -> list[RequestRecord]:
    """The same method and path, sent while the held answer was still on its way."""
    return [r for r in sim.server.log.entries() if r.seq != held.seq
            and (r.method, r.path) == (held.method, held.path)
            and _started(held) < _started(r) < held.time]


def _apply_in_process(sim: SimCluster) -> RunReport:
    kube = Kube.for_server(sim.url, ADMIN_TOKEN,
                           retry=RetryPolicy(read_timeout=0.2, sleep=lambda s: None))
    try:
        return commands.apply(Session(kube, NS), RunRequest(
            phase=3, settings=RunSettings(timeout=60.0, settle=0.0)))
    finally:
        kube.close()


def test_a_write_whose_answer_is_lost_is_retried_without_a_false_failure(
        fresh: Callable[..., Env], migrated: EndState) -> None:
    """The sim applies the write and holds its answer past the client's read timeout, so the
    client retries a write that already landed (a timeout or dropped connection in real life).
    The request log must show that retry, sent while the first answer was still held."""
    probe = fresh(monitor=False)
    _apply_in_process(probe.sim)
    cases = list(_lost_answer_cases(probe.writes()))
    probe.sim.stop()
    assert {c for c, _ in cases} >= {"create configmaps", "update configmaps", "patch daemonsets",
                                     "patch pods", "create services", "patch services"}
    failures = []
    for what, k in cases:
        env = fresh()
        env.sim.server.faults.update(hang_nth_write=k, hang_write_of=what)

        def release_late(sim: SimCluster = env.sim) -> None:
            if sim.server.faults.wait_held(60):
                time.sleep(HOLD_SECONDS)
                sim.server.faults.release_held()

        releaser = threading.Thread(target=release_late, daemon=True)
        releaser.start()
        try:
            report = _apply_in_process(env.sim)
            if not report.ok or report.result.notes:  # e.g. a relabelled pod said left to roll
                failures.append(f"{what} #{k}: ok={report.ok}, {report.result.notes}")
        except Exception as exc:
            failures.append(f"{what} #{k}: {type(exc).__name__}: {exc}")
        finally:
            releaser.join(5)
            env.sim.server.faults.release_held()
        held = _held_write(env.sim)
        if not _retries_of(env.sim, held):  # the client never gave up: nothing was tested
            failures.append(f"{what} #{k}: {held.method} {held.path} was never retried")
        problems = crash.diff(migrated.objects, crash.comparable(env.sim)) + env.finish()
        if problems:
            failures.append(f"{what} #{k}: {problems[:3]}")
        env.sim.stop()
    assert not failures, "\n".join(failures)


# ---- no API server at all ----------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_api_server_is_exit_3_within_the_retry_budget(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", url)
    done = crash.run(str(kubeconfig), "apply", "--phase", "1", "--yes")
    assert done.code == 3, done.output
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"error: Cannot reach the Kubernetes API server at {url}: "
                               "Connection refused"), lines[0]
    assert lines[1].startswith("fix: "), lines[1]
    waited = re.search(r"gave up after (\d+) attempts over ([\d.]+) s", lines[0])
    assert waited, lines[0]
    assert int(waited.group(1)) > 1 and float(waited.group(2)) <= RetryPolicy().max_wait_seconds
    assert float(waited.group(2)) <= done.seconds  # real time, as the user lived it
    assert "run the same command again" in lines[1], lines[1]

