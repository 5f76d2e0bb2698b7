"""The guard (docs/runbook.md, "The guard") end to end, with the operator imitation ON and the
disruption monitor running: after phase 3, a routine GPUCluster CR edit makes the operator re-render
the DaemonSets without the common labels and the pods roll. Without the guard the aliases drain to
zero (tests/e2e/test_drift.py has to declare that an expected outage); with the guard running they
stay within the rollout's own budget, move back to the app label, and move forward again once the
label is back and rolled out. Also: leader election between two guards, `guard --once` under the
least-privilege Role of docs/guard.yaml, SIGTERM releases the Lease."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from dcgm_sim.cluster import kubeconfig_document
from dcgm_sim.store import Event
from migrator.cli.app import app
from migrator.engine.clock import Clock
from migrator.engine.guard import Guard, GuardSettings
from migrator.engine.guardwrites import Outcome
from migrator.kube.client import Kube
from migrator.model import kinds
from migrator.model.guarding import HELD_ANNOTATION, Correction
from migrator.model.stacks import load_catalog
from tests.conftest import edit_object, new_operand_versions
from tests.e2e.conftest import E2E, NS
from tests.helpers.clock import SeenClock
from tests.helpers.readiness import ReadyEndpoints

REPO = Path(__file__).resolve().parents[2]
ALIASES = {"nvidia-dcgm": ("nvidia-dcgm-dra", "nvidia.com/gpu-operator.dcgm"),
           "nvidia-dcgm-exporter": ("nvidia-dcgm-exporter-dra",
                                    "nvidia.com/gpu-operator.dcgm-exporter")}
# The Role's rules only a cluster running both stacks needs (tests/e2e/test_coexistence.py
# proves each of them used under the Role; the single-stack guard above uses every other rule).
COEXISTENCE_RULES = {("watch", "endpointslices", None), ("create", "endpointslices", None),
                     ("update", "endpointslices", None), ("delete", "endpointslices", None),
                     ("create", "services", None)}
# The Event series patch: only a repeated Event uses it (tests/sim/test_events.py proves it used
# under the Role; the CR edit above records each hold once).
EVENT_SERIES_RULES = {("patch", "events", None)}
# OpenShift's restricted-endpoints admission asks for it on every slice write with pod
# addresses; nothing else does (tests/sim/test_openshift.py proves it used there).
OPENSHIFT_RULES = {("create", "endpointslices/restricted", None)}
GUARD_TOKEN = "dcgm-migrate-guard-sa-token-7a1e"  # a test credential, for the sim only
GUARD_USER = "system:serviceaccount:gpu-operator:dcgm-migrate-guard"


@dataclass
class Running:
    guard: Guard
    stop: threading.Event
    thread: threading.Thread
    log: list[str] = field(default_factory=list)

    def leading(self) -> bool:
        """It holds the Lease and has finished a pass (what `verify` reads of a running guard)."""
        return self.guard.passes >= 1 and self.guard.lease.is_leader


@contextmanager
def running_guard(env: E2E, identity: str = "guard-a", *, lease_seconds: int = 15,
                  kube: Kube | None = None, clock: Clock | None = None) -> Iterator[Running]:
    """A guard loop in a thread against the sim (as the Deployment's leader would run)."""
    kube = kube or Kube.connect(env.sim.kubeconfig)
    log: list[str] = []
    settings = GuardSettings(identity=identity, lease_seconds=lease_seconds,
                             retry_seconds=0.2, min_pass_seconds=0.05)
    guard = Guard(kube, NS, load_catalog(), settings, log=log.append, clock=clock)
    stop = threading.Event()
    thread = threading.Thread(target=guard.run, args=(stop,), daemon=True, name=identity)
    thread.start()
    try:
        yield Running(guard, stop, thread, log)
    finally:
        stop.set()
        thread.join(10)
        kube.close()


def _rolled_without_label(env: E2E) -> bool:
    for ds_name, key in ALIASES.values():
        ds = env.ds(ds_name)
        st = ds.get("status") or {}
        pods = env.pods(ds_name)
        if key in ds["spec"]["template"]["metadata"]["labels"] or len(pods) != 3 or any(
                key in p["metadata"]["labels"] for p in pods) or st.get(
                "updatedNumberScheduled") != 3 or st.get("numberAvailable") != 3:
            return False
    return True


def _logged(log: list[str], prefix: str, timeout: float = 10.0) -> bool:
    """A line starting with `prefix` is in `log` now or appears within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not any(line.startswith(prefix) for line in log):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _selector(env: E2E, alias: str) -> dict[str, str]:
    return dict(env.service(alias)["spec"]["selector"])


def _moved_forward(env: E2E, alias: str, key: str) -> bool:
    """The alias selects by the common label again and carries no hold mark."""
    return _selector(env, alias) == {key: "true"} and \
        HELD_ANNOTATION not in env.service(alias)["metadata"]["annotations"]


def _pod_ready(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or [])


def _timeline(events: list[Event], alias: str, ds_name: str, key: str) -> dict[str, int]:
    """resourceVersions of what matters in the race, from the store's event log: the template
    losing the label, the guard's hold, each old pod's deletion, the first new pod Ready."""
    out: dict[str, int] = {}
    deleted: set[str] = set()
    for ev in events:
        obj, rv = ev.object, ev.resource_version
        meta = obj["metadata"]
        if ev.resource.key == kinds.DAEMONSET.key and meta["name"] == ds_name:
            if key not in obj["spec"]["template"]["metadata"].get("labels", {}):
                out.setdefault("template-lost-label", rv)
        elif ev.resource.key == kinds.SERVICE.key and meta["name"] == alias:
            if obj["spec"].get("selector") == {"app": ds_name}:
                out.setdefault("guard-hold", rv)
        elif ev.resource.key == kinds.POD.key and meta.get("labels", {}).get("app") == ds_name:
            old = key in meta.get("labels", {})
            if old and (meta.get("deletionTimestamp") or ev.type == "DELETED") and \
                    meta["name"] not in deleted:
                deleted.add(meta["name"])
                out.setdefault(f"old-pod-deleted-{len(deleted)}", rv)
            if not old and _pod_ready(obj):
                out.setdefault("first-new-pod-ready", rv)
    return out


def test_a_cr_edit_after_phase_3_loses_no_alias_endpoint_with_the_guard_running(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0, time_scale=0.05)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    for alias, (_ds, key) in ALIASES.items():
        assert _selector(env, alias) == {key: "true"}
    kube = Kube.connect(_guard_kubeconfig(env, tmp_path))  # the Role of docs/guard.yaml only
    with running_guard(env, kube=kube) as g:
        env.sim.wait_for(g.leading, 10)
        # Each alias's and source's ready endpoints from here on, replayed below from the
        # event log (every EndpointSlice change, not a sample).
        ready = ReadyEndpoints((*ALIASES, *(d for d, _ in ALIASES.values())))
        with env.sim.store.lock:
            since = env.sim.store.resource_version
            ready.seed(env.sim.store, NS)
        with env.monitor.rolling():  # the operator's rollout: its maxUnavailable, no more
            new_operand_versions(env.sim.store)
            env.sim.wait_for(lambda: _rolled_without_label(env), 60)
        for alias, (ds_name, _key) in ALIASES.items():
            assert _selector(env, alias) == {"app": ds_name}
            assert "lost" in env.service(alias)["metadata"]["annotations"][HELD_ANNOTATION]
        assert env.monitor.violations == [], env.monitor.violations[:5]
        events = env.sim.store.events_since(since)
        assert events is not None
        for ev in events:
            ready.apply(ev)
        for alias, (ds_name, key) in ALIASES.items():
            t = _timeline(events, alias, ds_name, key)
            # The hold lands before the rollout takes a second old pod: from then on the alias
            # selects the new pods too, so it only ever misses what the rollout itself takes.
            assert t["template-lost-label"] < t["guard-hold"] < t["old-pod-deleted-2"], t
            print(f"race {alias}: {sorted(t.items(), key=lambda kv: kv[1])}")
            # Exact, from every EndpointSlice change: the alias never had fewer ready endpoints
            # than 3 - maxUnavailable (1), the floor its source Service has in the same rollout.
            low, low_source = ready.lowest_ready[alias], ready.lowest_ready[ds_name]
            print(f"lowest ready: {alias} {low}/3, {ds_name} {low_source}/3")
            assert low >= 2 and low_source >= 2, (low, low_source)

        # Held is not drift: phase 3 stays green; phase 1 is red (the labels really are gone).
        verify = env.cli("verify", "-o", "json")
        phases = {p["number"]: p for p in verify.json()["phases"]}
        assert all(g["ok"] for g in phases[3]["gates"]), phases[3]["gates"]
        assert any("held" in g["detail"] for g in phases[3]["gates"])
        assert not all(g["ok"] for g in phases[1]["gates"])

        # The label comes back (apply re-runs the drifted phase 1) and rolls out: the guard
        # moves the aliases forward again and clears its mark.
        healed = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
        assert healed.code == 0, healed.stdout + healed.stderr
        for alias, (_ds, key) in ALIASES.items():
            env.sim.wait_for(partial(_moved_forward, env, alias, key), 30)
        # The guard logs a correction right after its write lands, so the line can trail the
        # selector the test just saw by a moment: poll for it (bounded), do not race it.
        assert _logged(g.log, "release Service/nvidia-dcgm-exporter"), g.log
    assert env.cli("verify").code == 0
    lease = env.sim.store.get(kinds.LEASE, NS, "dcgm-migrate-guard")
    assert lease["spec"]["holderIdentity"] == ""  # released on the way out
    # Least privilege: nothing refused, and every rule of the Role was needed on the way.
    mine = [e for e in env.sim.server.log.entries() if e.user == GUARD_USER]
    assert mine and not [e for e in mine if e.code == 403]
    used = {(e.verb, e.resource, e.name if e.verb in ("get", "patch", "update") else None)
            for e in mine}
    # `get` of an alias is the conflict path only (a failed `test`): the next test covers it.
    conflict_path = {("get", "services", a) for a in ALIASES}
    granted = (set(_granted(REPO / "docs" / "guard.yaml")) - COEXISTENCE_RULES
               - EVENT_SERIES_RULES - OPENSHIFT_RULES)
    assert used | conflict_path >= granted, sorted(granted - used - conflict_path)


def test_a_correction_on_a_service_changed_since_it_was_decided_is_not_written(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    """The selector the guard saw is still there, but the Service changed after the guard
    read it (as when an operator release adopts a stable name: its labels first, its selector
    on a later write): the correction is re-decided on the next pass, never written over it."""
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    kube = Kube.connect(_guard_kubeconfig(env, tmp_path))
    guard = Guard(kube, NS, load_catalog(), GuardSettings())
    key = ALIASES["nvidia-dcgm-exporter"][1]
    seen = env.sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm-exporter")
    hold = Correction("hold", "nvidia-dcgm-exporter", "r", {key: "true"},
                      {"app": "nvidia-dcgm-exporter-dra"},
                      resource_version=seen["metadata"]["resourceVersion"])
    edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter",
                lambda svc: svc["metadata"].setdefault("labels", {}).update(
                    {"example.com/adopted-by": "a-release"}))
    mark = env.mark()
    done, skipped = guard.writers.apply([hold])
    assert done == [] and [s.outcome for s in skipped] == [Outcome.CONFLICT]
    assert "changed meanwhile" in str(skipped[0]) and skipped[0].status == 422
    assert _selector(env, "nvidia-dcgm-exporter") == {key: "true"}  # untouched
    assert [e for e in env.writes(mark) if e.user == GUARD_USER] == []  # nothing landed
    assert [(e.verb, e.code) for e in env.sim.server.log.entries()
            if e.seq > mark and e.user == GUARD_USER and e.verb == "patch"] == [("patch", 422)]


def test_a_correction_whose_selector_changed_meanwhile_is_not_written(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    kube = Kube.connect(_guard_kubeconfig(env, tmp_path))
    guard = Guard(kube, NS, load_catalog(), GuardSettings())
    key = ALIASES["nvidia-dcgm-exporter"][1]
    stale = Correction("hold", "nvidia-dcgm-exporter", "r", {"app": "what-the-guard-saw"},
                       {"app": "nvidia-dcgm-exporter-dra"})
    done, skipped = guard.writers.apply([stale])
    assert done == [] and [s.outcome for s in skipped] == [Outcome.CONFLICT]
    assert "changed meanwhile" in str(skipped[0])
    assert _selector(env, "nvidia-dcgm-exporter") == {key: "true"}  # untouched
    landed = Correction("hold", "nvidia-dcgm-exporter", "r", {"app": "x"}, {key: "true"})
    assert guard.writers.apply([landed])[0] == [landed]  # already true: an earlier attempt landed
    mine = [e for e in env.sim.server.log.entries() if e.user == GUARD_USER]
    assert ("get", "services", "nvidia-dcgm-exporter", 200) in {
        (e.verb, e.resource, e.name, e.code) for e in mine}
    assert not [e for e in mine if e.code == 403]
    kube.close()


def _granted(path: Path) -> Iterator[tuple[str, str, str | None]]:
    """(verb, resource, name) of every rule of the guard's Role."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc["kind"] == "Role":
            for rule in doc["rules"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            yield verb, resource, name


def test_two_guards_one_leads_and_the_other_takes_over_after_the_lease_expires(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with running_guard(env, "guard-a", lease_seconds=1) as a:
        env.sim.wait_for(lambda: a.guard.lease.is_leader, 10)
        b_clock = SeenClock()
        with running_guard(env, "guard-b", lease_seconds=1, clock=b_clock) as b:
            # Several of b's retry periods, as b's loop lived them, having seen a lead.
            env.sim.wait_for(lambda: b.guard.lease.holder == "guard-a", 10)
            assert b_clock.lived_through(3 * 0.2)
            assert not b.guard.lease.is_leader and b.guard.passes == 0
            # a dies without releasing (a crash, not SIGTERM): b waits the lease out.
            # ignored below: patched for this one test
            a.guard.lease.release = lambda: False  # type: ignore[method-assign]
            a.stop.set()
            a.thread.join(10)
            env.sim.wait_for(lambda: b.guard.lease.is_leader, 10)
            spec = env.sim.store.get(kinds.LEASE, NS, "dcgm-migrate-guard")["spec"]
            assert spec["holderIdentity"] == "guard-b" and spec["leaseTransitions"] == 1
            with env.monitor.rolling():
                new_operand_versions(env.sim.store)
                env.sim.wait_for(lambda: _rolled_without_label(env), 60)
            assert _selector(env, "nvidia-dcgm-exporter") == {"app": "nvidia-dcgm-exporter-dra"}
            assert not any(line.startswith("hold") for line in a.log)
            assert any(line.startswith("hold Service/nvidia-dcgm-exporter") for line in b.log)
    assert env.monitor.violations == []


def _guard_kubeconfig(env: E2E, tmp_path: Path) -> str:
    policy = env.sim.server.access.add_token(GUARD_TOKEN, (REPO / "docs" / "guard.yaml")
                                             .read_text())
    assert policy.user == GUARD_USER
    path = tmp_path / "kubeconfig-guard"
    path.write_text(yaml.safe_dump(kubeconfig_document(env.sim.url, NS, GUARD_TOKEN)))
    return str(path)


def test_guard_once_resyncs_alias_config_under_the_guard_role_only(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    kubeconfig = _guard_kubeconfig(env, tmp_path)
    # a hand edit: not the source's config
    edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter",
                lambda alias: alias["spec"].update(sessionAffinity="ClientIP"))
    res = env.cli("guard", "--once", "-o", "json", "--kubeconfig", kubeconfig)
    assert res.code == 0, res.stdout + res.stderr
    doc = res.json()
    [sync] = doc["corrections"]
    assert (sync["action"], sync["service"], sync["fields"]) == (
        "sync", "nvidia-dcgm-exporter", ["sessionAffinity"])
    assert env.service("nvidia-dcgm-exporter")["spec"]["sessionAffinity"] == "None"
    assert {a["name"]: a["switched"] for a in doc["aliases"]} == {
        "nvidia-dcgm": True, "nvidia-dcgm-exporter": True}
    assert doc["verdict"]["ok"], doc["verdict"]  # judged after the sync, under the guard Role
    again = env.cli("guard", "--once", "-o", "json", "--kubeconfig", kubeconfig)
    assert again.json()["corrections"] == []  # idempotent
    denied = [e for e in env.sim.server.log.entries() if e.code == 403]
    assert denied == [], [(e.method, e.path) for e in denied]


def test_sigterm_stops_the_guard_cleanly_and_releases_the_lease(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    proc = subprocess.Popen(
        [sys.executable, "-m", "migrator", "guard", "--kubeconfig", env.sim.kubeconfig,
         "--identity", "guard-pod-0"], cwd=REPO, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        env.sim.wait_for(lambda: (env.sim.store.find(kinds.LEASE, NS, "dcgm-migrate-guard")
                                  or {}).get("spec", {}).get("holderIdentity") == "guard-pod-0",
                         60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "released Lease/dcgm-migrate-guard" in err
    spec = env.sim.store.get(kinds.LEASE, NS, "dcgm-migrate-guard")["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    json.dumps(spec)  # a plain document


@pytest.mark.parametrize("held", [True, False])
def test_the_guard_never_moves_an_alias_forward_that_phase_3_did_not_switch(
        e2e_factory: Callable[..., E2E], held: bool) -> None:
    env = e2e_factory("gpucluster")
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    if held:  # a stale mark (e.g. left behind by a rollback of phase 3)
        edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter",
                    lambda alias: alias["metadata"]["annotations"].update(
                        {HELD_ANNOTATION: "stale"}))
    doc = env.cli("guard", "--once", "-o", "json").json()
    assert doc["corrections"] == []
    assert _selector(env, "nvidia-dcgm-exporter") == {"app": "nvidia-dcgm-exporter-dra"}


def test_the_guard_deployment_runs_a_valid_command_under_its_own_account() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all((REPO / "docs" / "guard.yaml").read_text())
            if d}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"] == \
        docs["RoleBinding"]["subjects"][0]["name"]
    assert docs["Deployment"]["spec"]["replicas"] >= 2  # a standby for the Lease
    container = pod["containers"][0]
    name, *rest = container["args"]
    command = typer.main.get_group(app).commands[name]
    ctx = command.make_context(name, list(rest))  # raises on an unknown option or bad value
    assert name == "guard" and ctx.params["namespace"] == NS
    assert ctx.params["lease_name"] in {r.get("resourceNames", [None])[0]
                                        for r in docs["Role"]["rules"]
                                        if "leases" in r["resources"]}
    assert "ClusterRole" not in docs and "ClusterRoleBinding" not in docs  # namespaced only
