"""Run the real `dcgm-migrate` as a subprocess against an in-process SimCluster, SIGKILL it right
after its k-th write, and compare end states: the crash-anywhere harness (docs/design.md,
"State and resume").

The kill is exact: the sim's `hang_nth_write` fault hook applies the k-th successful write to
the store and holds its answer, so the process is killed with that write done and unanswered
(the worst moment: the cluster changed, the tool never learned it did). Every other instant
between two writes leaves the cluster in the same state as one of these.
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim.cluster import SimCluster
from dcgm_sim.store import TEMPLATE_GENERATION_ANNOTATION
from migrator.engine.state.configmap import CHECKSUM_KEY, EMPTY_SHA, EMPTY_TEXT, STATE_KEY
from migrator.engine.state.lock import Lock, annotations_for
from migrator.model import kinds
from migrator.model.steps import from_record
from tests.helpers import forkserver

REPO = Path(__file__).resolve().parents[2]
PYCACHE = str(Path(tempfile.gettempdir()) / "dcgm-migrate-test-pycache")
NS = "gpu-operator"
STATE_CM = "dcgm-migrate-state"
WRITE_META = ("resourceVersion", "generation", "managedFields")  # every write changes them
SERVER_META = ("uid", "creationTimestamp", *WRITE_META)  # and these differ between clusters
SERVICE_ASSIGNED = ("clusterIP", "clusterIPs", "healthCheckNodePort")
HASH_ANNOTATION = "nvidia.com/last-applied-hash"
LOCK_KEYS = ("dcgm-migrate/lock-holder", "dcgm-migrate/lock-expires",
             "dcgm-migrate/lock-acquired")


# Not passed on: a stray kubeconfig, bytecode turned off, and pytest's note of the test
# running (it changes with every test, and `import wsgiref.handlers`, which the guard's
# metrics server brings in, reads the whole environment: a fork server's child could then
# never stand for a fresh process, tests/helpers/forkserver.py).
NOT_INHERITED = ("KUBECONFIG", "PYTHONDONTWRITEBYTECODE", "PYTEST_CURRENT_TEST")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI subprocess: the repo importable, no stray kubeconfig, and
    bytecode cached outside the repo (recompiling every module costs each run ~0.25 s)."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.setdefault("PYTHONPYCACHEPREFIX", PYCACHE)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"]
                                     if env.get("PYTHONPATH") else "")
    env.update(extra or {})
    return env


def argv(kubeconfig: str | None, *args: str) -> list[str]:
    out = [sys.executable, "-m", "migrator", *args]
    if kubeconfig and "--kubeconfig" not in args:
        out += ["--kubeconfig", kubeconfig]
    return out


def start(kubeconfig: str | None, *args: str, env: dict[str, str] | None = None,
          cwd: Path = REPO) -> subprocess.Popen[str]:
    """Start the CLI (stdin /dev/null, stdout and stderr piped): a child of this worker's fork
    server, which stands for a fresh `python -m migrator` without its start-up CPU
    (tests/helpers/forkserver.py; `DCGM_TEST_FORKSERVER=0`: a plain subprocess)."""
    return forkserver.popen(argv(kubeconfig, *args), cwd, cli_env(env), cli_env())


@dataclass
class Proc:
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def finish(proc: subprocess.Popen[str], timeout: float = 60.0) -> tuple[int, str, str]:
    """Wait for a started run to end (killed if it outlives `timeout`): code, stdout, stderr."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def until(what: Callable[[], bool], proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Poll `what` while the run is alive; fail if the run ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not what():
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def run(kubeconfig: str | None, *args: str, env: dict[str, str] | None = None,
        timeout: float = 120.0, cwd: Path = REPO) -> Proc:
    """Run the CLI to completion (a subprocess, as a user would; see `start`)."""
    began = time.monotonic()
    code, out, err = forkserver.run(argv(kubeconfig, *args), cwd, cli_env(env), cli_env(),
                                    timeout)
    return Proc(code, out, err, time.monotonic() - began)


def kill_after_write(sim: SimCluster, k: int, *args: str, timeout: float = 60.0,
                     ended: list[str] | None = None) -> bool:
    """Start the command, SIGKILL it right after its k-th write (counted from now).

    False when the process finished before making k writes (it was not killed); then its exit
    code and the end of its stderr are appended to `ended`, when given."""
    sim.server.faults.update(hang_nth_write=k)
    proc = start(sim.kubeconfig, *args)
    try:
        deadline = time.monotonic() + timeout
        while not sim.server.faults.wait_held(0.02):
            if proc.poll() is not None:
                if ended is not None:
                    _, err = proc.communicate()
                    ended.append(f"exit {proc.returncode}: {err.strip()[-600:]}")
                return False
            if time.monotonic() > deadline:
                raise TimeoutError(f"write {k} did not come within {timeout}s")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return True
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.communicate()
        sim.server.faults.release_held()


# ---- what "the same end state" means ---------------------------------------------------------

def comparable(sim: SimCluster, namespace: str = NS, *,
               same_cluster: bool = False) -> dict[str, Any]:
    """DaemonSets and Services field by field, without server-assigned fields or status: the
    one notion of "the same objects" for every test.

    Across two fresh clusters (the default) identities differ: uids, creation times, cluster
    IPs and node ports are dropped, and an ownerReference's uid is checked to point at the live
    owner, then replaced by that verdict. Within `same_cluster` (before and after a run) only
    what every write changes goes (resourceVersion, generation, managedFields, status), so an
    object deleted and re-created, or re-pointed to another owner, still shows."""
    out: dict[str, Any] = {}
    for kind in (kinds.DAEMONSET, kinds.SERVICE):
        items, _ = sim.store.list(kind, namespace)
        for obj in items:
            o = copy.deepcopy(obj)
            meta = o["metadata"]
            for f in WRITE_META if same_cluster else SERVER_META:
                meta.pop(f, None)
            # A DaemonSet's template generation: the server counts template writes in it.
            (meta.get("annotations") or {}).pop(TEMPLATE_GENERATION_ANNOTATION, None)
            o.pop("status", None)
            if same_cluster:
                out[f"{kind.kind}/{meta['name']}"] = o
                continue
            # The operator's render hash covers the CR's uid, so it differs between two fresh
            # clusters; the tool never writes annotations on DaemonSets.
            (meta.get("annotations") or {}).pop(HASH_ANNOTATION, None)
            for ref in meta.get("ownerReferences") or []:
                owner = _owner(sim, ref)
                ref["uid"] = ("matches live owner" if owner is not None
                              and owner["metadata"]["uid"] == ref.get("uid") else "DANGLING")
            spec = o.get("spec") or {}
            if kind is kinds.SERVICE:
                for f in SERVICE_ASSIGNED:
                    spec.pop(f, None)
                for port in spec.get("ports") or []:
                    port.pop("nodePort", None)
            out[f"{kind.kind}/{meta['name']}"] = o
    return out


def _owner(sim: SimCluster, ref: dict[str, Any]) -> dict[str, Any] | None:
    kind = kinds.BY_KIND.get(str(ref.get("kind")))
    if kind is None:
        return None
    return sim.store.find(kind, NS if kind.namespaced else None, str(ref.get("name")))


def diff(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Human-readable differences between two `comparable` (or any nested JSON) values."""
    out: list[str] = []

    def walk(path: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(f"{path}.{key}" if path else key, a.get(key, "<absent>"),
                     b.get(key, "<absent>"))
        elif a != b:
            out.append(f"{path}: expected {a!r}, got {b!r}")

    walk("", expected, actual)
    return out


def sha256(text: str) -> str:
    """The checksum the state ConfigMap keeps beside `state.json`."""
    return hashlib.sha256(text.encode()).hexdigest()


def create_locked_state(store: Any, namespace: str, lock: Lock) -> None:
    """An empty state ConfigMap holding `lock`, as another run's would: a lock a test plants."""
    store.create(kinds.CONFIGMAP, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dcgm-migrate-state", "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": "dcgm-migrate"},
                     "annotations": annotations_for(lock)},
        "data": {STATE_KEY: EMPTY_TEXT, CHECKSUM_KEY: EMPTY_SHA},
    })


def state_document(sim: SimCluster, namespace: str = NS) -> dict[str, Any]:
    """The state ConfigMap's document, after checking it is the tool's, intact and unlocked."""
    cm = sim.store.get(kinds.CONFIGMAP, namespace, STATE_CM)
    labels = cm["metadata"].get("labels") or {}
    assert labels.get("app.kubernetes.io/managed-by") == "dcgm-migrate", labels
    text = cm["data"]["state.json"]
    assert cm["data"]["state.sha256"] == sha256(text), "state checksum does not match"
    held = {k: v for k, v in (cm["metadata"].get("annotations") or {}).items()
            if k in LOCK_KEYS}
    assert not held, f"the lock is still held after the run: {held}"
    doc: dict[str, Any] = json.loads(text)
    return doc


def live_document(sim: SimCluster, namespace: str = NS) -> dict[str, Any]:
    """The state ConfigMap's document as it stands, while a run may hold the lock (`{}`: no
    state yet); `state_document` is the check after a run."""
    cm = sim.store.find(kinds.CONFIGMAP, namespace, STATE_CM)
    doc: dict[str, Any] = json.loads(((cm or {}).get("data") or {}).get("state.json") or "{}")
    return doc


def state_summary(sim: SimCluster, namespace: str = NS) -> dict[str, Any]:
    """What must match between an interrupted-and-resumed run and an uninterrupted one: each
    phase's status, its step records (id and status) and its baselines."""
    doc = state_document(sim, namespace)
    return {
        "stack": doc["stack"],
        "phases": {str(p["number"]): {
            "status": p["status"],
            "steps": [[from_record(r["step"]).id, r["status"]] for r in p["steps"]],
            "undo": [[from_record(r["step"]).id, r["status"]] for r in p["undo"]],
            "baselines": p["baselines"],
            "wroteLabels": p["wroteLabels"],
            "error": p["error"],
        } for p in doc["phases"]},
    }


# ---- what was written ------------------------------------------------------------------------

def written(writes: list[Any]) -> list[str]:
    """`Kind/name` of each write in the request log (`Kind (create)`: a create, unnamed)."""
    out = []
    for w in writes:
        kind = kinds.BY_KEY[f"{w.resource}.{w.group}" if w.group else w.resource].kind
        out.append(f"{kind}/{w.name}" if w.name else f"{kind} (create)")
    return out


def allow_list(plan: dict[str, Any]) -> set[str]:
    """What a run of this plan may write: every object its phases change, the state ConfigMap,
    and creates of Services (the aliases) and of the state ConfigMap."""
    objects = {c["object"] for p in plan["phases"] for c in p["changes"]}
    # a DaemonSet's pods relabelled in place (field "pods"): its own pods, generated names
    pods = {"Pod/" + c["object"].partition("/")[2] + "-*" for p in plan["phases"]
            for c in p["changes"] if c["field"] == "pods"}
    return objects | pods | {f"ConfigMap/{STATE_CM}", "Service (create)", "ConfigMap (create)"}


def outside(writes: list[Any], allowed: set[str]) -> list[str]:
    return [w for w in written(writes) if w not in allowed and not any(
        a.endswith("-*") and w.startswith(a[:-1]) and "-" not in w[len(a) - 1:]
        for a in allowed)]


def report_chain(capsys: pytest.CaptureFixture[str], shard: int, shards: int,
                 points: Sequence[int],
                 legs: Sequence[tuple[tuple[str, ...], int, list[str]]]) -> None:
    """A crash-anywhere shard's end: per leg (its command, its K writes, its failures) the
    tally printed past the capture, then every failure at once."""
    with capsys.disabled():
        for args, writes, failed in legs:
            run = [k for k in points if k <= writes]
            print(f"\ncrash-anywhere `{' '.join(args[:3])}`: K={writes} writes, shard "
                  f"{shard + 1}/{shards}: resumed cleanly {len(run) - len(failed)}/{len(run)}")
    failures = [f for _, _, failed in legs for f in failed]
    assert not failures, "\n".join(failures)


def shared(factory: pytest.TempPathFactory, name: str,
           make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A reference made once per test session and read by every pytest-xdist worker (its JSON
    under the session's temporary root; the first worker to ask makes it, the others wait on
    the file lock): the uninterrupted run each crash-anywhere shard compares with."""
    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' basetemps are folders of the session's
    path = root / f"{name}.json"
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():  # written whole, then renamed: never read half-written
            written = path.with_suffix(".tmp")
            written.write_text(json.dumps(make()))
            written.replace(path)
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded
