"""Operator and stack transitions end to end, with the operator imitation on and the disruption
monitor running: a ClusterPolicy → GPUCluster stack change (naively, and by the runbook's
procedure, whose stable-name gap is measured), an operator taking the aliases over before a
rollback, an operator reverting an `--include-operator-owned` switch, zero desired pods, and
honest exit codes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim.controllers.garbage import GarbageCollector
from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from dcgm_sim.controllers.rendering import DEPLOY_LABELS, MODE_DRA, MODE_LABEL
from dcgm_sim.seed import seeded_cr
from migrator.model import kinds
from tests.conftest import edit_cr, edit_object
from tests.e2e.conftest import E2E, NS
from tests.helpers.readiness import ReadyEndpoints

DCGM = "nvidia.com/gpu-operator.dcgm"
EXPORTER = "nvidia.com/gpu-operator.dcgm-exporter"
STABLE = ("nvidia-dcgm", "nvidia-dcgm-exporter")
# The GPUCluster's Services, which go with it: its finalizer drains their pods first, so they
# stand without endpoints a moment before they go (the change removes them on purpose).
DRA = ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")
RECONCILE = 30.0  # simulated seconds between the operator imitation's resyncs


def _nodes(env: E2E, *, add: tuple[str, ...] = (), remove: tuple[str, ...] = (),
           off: tuple[str, ...] = ()) -> None:
    """Relabel every GPU node, as an admin (or the operator's node labeller) would; `off`: set
    to "false", which the released operator's node labeller keeps (a removed one it adds back
    at its next pass)."""
    def relabel(node: dict[str, Any]) -> None:
        labels = node["metadata"]["labels"]
        for key in remove:
            labels.pop(key, None)
        labels.update({k: "true" for k in add})
        labels.update({k: "false" for k in off})
        if add:
            labels[MODE_LABEL] = MODE_DRA

    for node in env.sim.store.list(kinds.NODE)[0]:
        edit_object(env.sim.store, kinds.NODE, None, node["metadata"]["name"], relabel)


def _ready(env: E2E, service: str) -> int:
    items, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    return sum(1 for sl in items
               if sl["metadata"]["labels"].get("kubernetes.io/service-name") == service
               for ep in sl.get("endpoints") or [] if (ep.get("conditions") or {}).get("ready"))


def _rolled_out(env: E2E, name: str) -> bool:
    ds = env.sim.store.find(kinds.DAEMONSET, NS, name)
    if ds is None:
        return False
    st = ds.get("status") or {}  # zero counters are omitted, as upstream's omitempty
    want = st.get("desiredNumberScheduled", 0)
    return bool(st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled", 0) == want == st.get("numberAvailable", 0))


def _add_gpucluster(env: E2E, nodes: int) -> None:
    """Install the DRA stack beside the ClusterPolicy and wait until it serves every node."""
    _nodes(env, add=DEPLOY_LABELS["gpucluster"])
    env.sim.store.create(kinds.GPU_CLUSTER, seeded_cr("gpucluster"))
    env.sim.wait_for(lambda: all(_rolled_out(env, d) for d in DRA)
                     and all(_ready(env, s) == nodes for s in DRA), 30)


def _delete_clusterpolicy(env: E2E) -> None:
    cp = env.sim.store.list(kinds.CLUSTER_POLICY)[0][0]
    env.sim.store.delete(kinds.CLUSTER_POLICY, None, cp["metadata"]["name"])


def _failed(doc: dict[str, Any]) -> dict[str, str]:
    return {g["name"]: g["detail"] for p in doc["phases"] for g in p["gates"] if not g["ok"]}


def _step_statuses(env: E2E, phase: int) -> dict[str, str]:
    rec = next(p for p in env.state()["phases"] if p["number"] == phase)
    return {f"{r['step']['type']}/{r['step'].get('daemonset') or r['step'].get('service')}":
            r["status"] for r in rec["steps"]}


# ---- ClusterPolicy → GPUCluster ------------------------------------------------------------

def test_stack_change_is_detected_and_apply_replans_for_the_new_stack(
        e2e_factory: Callable[..., E2E]) -> None:
    """A stack change done naively: relabel the nodes for -dra, create a GPUCluster, delete the
    ClusterPolicy. status/verify say the stack changed and the stable names are missing;
    apply re-plans for the GPUCluster stack and creates and switches the aliases."""
    env = e2e_factory("clusterpolicy", operator_release=FUTURE, nodes=3,
                      operator_reconcile_seconds=RECONCILE)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with env.monitor.replacing(*STABLE):
        _nodes(env, add=DEPLOY_LABELS["gpucluster"], remove=DEPLOY_LABELS["clusterpolicy"])
        env.sim.store.create(kinds.GPU_CLUSTER, seeded_cr("gpucluster"))
        _delete_clusterpolicy(env)
        env.sim.wait_for(lambda: all(env.svc(n) is None for n in STABLE) and all(
            _rolled_out(env, d) for d in DRA), 30)

        status = env.cli("status", "-o", "json")
        assert status.code == 1, status.stdout
        doc = status.json()
        assert doc["stack"] == "gpucluster"
        assert any("stack changed from clusterpolicy" in w for w in doc["warnings"])
        assert doc["stackChange"] == {"recorded": "clusterpolicy", "live": "gpucluster"}
        failed = _failed(doc)
        assert "does not exist" in failed["stable-name/nvidia-dcgm"], failed
        assert "does not exist" in failed["stable-name/nvidia-dcgm-exporter"], failed
        assert env.cli("verify").code == 1

        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
        assert res.code == 0, res.stderr
        assert "stack changed" in res.stderr
        assert [p["status"] for p in res.json()["phases"]] == ["completed"] * 3
    for alias, source, key in (("nvidia-dcgm", "nvidia-dcgm-dra", DCGM),
                               ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra", EXPORTER)):
        svc = env.svc(alias)
        assert svc is not None
        assert svc["metadata"]["annotations"]["dcgm-migrate/alias-of"] == source
        assert svc["spec"]["selector"] == {key: "true"}

        def three_ready(a: str = alias) -> bool:
            return _ready(env, a) == 3

        env.sim.wait_for(three_ready, 10)
    # the old stack's recorded steps no longer count: retired, not eternal failures
    assert _step_statuses(env, 1)["set-labels/nvidia-dcgm"] == "gone"
    assert _step_statuses(env, 1)["set-labels/nvidia-dcgm-dra"] == "done"
    ok = env.cli("verify", "-o", "json")
    assert ok.code == 0, _failed(ok.json())


def test_stack_change_procedure_keeps_the_stable_names_gap_within_one_reconcile(
        e2e_factory: Callable[..., E2E]) -> None:
    """docs/runbook.md 'Changing stack': install the GPUCluster beside the ClusterPolicy, label
    its DaemonSets (apply --phase 1), then delete the ClusterPolicy and run apply at once: it
    waits for garbage collection to free the names and creates the aliases. The monitor
    measures how long each stable name had no ready endpoint.

    The gap is the tool's reaction (a watch event, a plan, a create) in real time, and the
    sim's clock is real time scaled: no clock can take the machine's load out of it. So this
    sim runs slow (one reconcile period is 3 real seconds, not 0.6), which leaves the tool's
    reaction room under a loaded CI machine, and what the tool did during each gap is checked
    by what it wrote, which no load changes: nothing but the alias it creates (and the state
    records around that write)."""
    env = e2e_factory("clusterpolicy", operator_release=FUTURE, nodes=3,
                      operator_reconcile_seconds=RECONCILE,
                      time_scale=0.1)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    _add_gpucluster(env, 3)
    both = env.cli("apply", "--phase", "1", "--yes", "-o", "json")
    assert both.code == 0, both.stderr
    assert both.json()["stack"] == "both"
    assert DCGM in env.ds("nvidia-dcgm-dra")["spec"]["template"]["metadata"]["labels"]
    assert all(DCGM in p["metadata"]["labels"] for p in env.pods("nvidia-dcgm-dra"))

    with env.monitor.replacing(*STABLE), _gaps_in_sim_time(env, STABLE) as gaps:
        _delete_clusterpolicy(env)
        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
        assert res.code == 0, res.stderr
        env.sim.wait_for(lambda: all(_ready(env, n) == 3 for n in STABLE), 10)
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {DCGM: "true"}
    assert env.service("nvidia-dcgm-exporter")["spec"]["selector"] == {EXPORTER: "true"}
    assert env.cli("verify").code == 0
    longest = {n: max(gaps.seconds.get(n, [0.0])) for n in STABLE}
    print(f"stable-name gaps: { {n: round(g, 1) for n, g in longest.items()} } s simulated "
          f"(from the store's commits); one reconcile period = {RECONCILE} s simulated")
    assert all(g <= RECONCILE for g in longest.values()), (longest, RECONCILE)
    # While a name was down the tool wrote only what brings it back: the alias, and the state
    # records before and after that write.
    during = gaps.writes(env)
    allowed = ("POST /api/v1/namespaces/gpu-operator/services",
               "PUT /api/v1/namespaces/gpu-operator/configmaps/dcgm-migrate-state")
    assert all(w in allowed for w in during), during


@dataclass
class Gaps:
    """Per Service, each interval it was down (simulated seconds), and where each interval
    began and ended in the sim's request log."""

    seconds: dict[str, list[float]] = field(default_factory=dict)
    windows: list[tuple[int, int]] = field(default_factory=list)

    def writes(self, env: E2E) -> list[str]:
        """Every write request sent while a name was down: `METHOD path`."""
        return [f"{w.method} {w.path}" for start, end in self.windows
                for w in env.writes(since=start) if w.seq <= end]


@contextmanager
def _gaps_in_sim_time(env: E2E, names: tuple[str, ...]) -> Iterator[Gaps]:
    """Each interval in which one of these Services is absent or has no ready endpoint, in
    simulated seconds, from the sim's own records: every store commit (a Service or one of
    its EndpointSlices) stamped with the SimClock as it is committed, so a busy test machine
    neither misses a short gap nor stretches one the way a sampling thread would."""
    store, clock = env.sim.store, env.sim.clock
    found = Gaps()
    gaps = found.seconds
    ready = ReadyEndpoints(names)
    since: dict[str, float] = {}
    opened: dict[str, int] = {}  # the request log's position when each open gap began

    def changed(name: str) -> None:
        at = clock.now()
        if not ready.exists(name) or ready.ready(name) == 0:
            if name not in since:
                since[name] = at
                opened[name] = env.mark()
        elif name in since:
            gaps.setdefault(name, []).append(at - since.pop(name))
            found.windows.append((opened.pop(name), env.mark()))

    try:
        # the state now and every commit after it, nothing in between
        with ready.follow(store, NS, on_change=changed):
            yield found
    finally:
        with store.lock:
            end = clock.now()
            for n in names:
                if n in since:  # a gap still open at the end counts until then
                    gaps.setdefault(n, []).append(end - since.pop(n))
                    found.windows.append((opened.pop(n), env.mark()))


def _until(env: E2E, predicate: Callable[[], bool], sim_seconds: float) -> None:
    """Poll until `predicate` holds, failing after `sim_seconds` of the sim's own clock."""
    deadline = env.sim.clock.now() + sim_seconds
    while not predicate():
        assert env.sim.clock.now() < deadline, f"not within {sim_seconds} s simulated"
        time.sleep(0.01)


def _collector_back(env: E2E, run: threading.Thread, seconds: float) -> None:
    """The garbage collector running again while `run` (the tool) finishes."""
    collector = GarbageCollector(env.sim.store, env.sim.clock)
    collector.start()
    try:
        run.join(seconds)
    finally:
        collector.stop()


def _both_labelled_without_a_collector(e2e_factory: Callable[..., E2E]) -> E2E:
    """A migrated ClusterPolicy cluster with the GPUCluster beside it (phase 1 labelled both
    stacks), its garbage collector stopped: what a slow collector leaves, on demand."""
    env = e2e_factory("clusterpolicy", operator_release=FUTURE, nodes=3,
                      operator_reconcile_seconds=RECONCILE)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    _add_gpucluster(env, 3)
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    lagging = env.sim.controllers.get("garbage-collector")
    assert lagging is not None
    lagging.stop()
    return env


def test_stack_change_apply_waits_for_a_lagging_garbage_collector(
        e2e_factory: Callable[..., E2E]) -> None:
    """On a big cluster garbage collection takes a while: apply, run right after the
    ClusterPolicy is deleted, finds its Services still holding the stable names, says it waits
    for them, and creates the aliases as soon as they are gone (no exit 1, no adoption)."""
    env = _both_labelled_without_a_collector(e2e_factory)
    done: dict[str, Any] = {}
    with env.monitor.replacing(*STABLE):
        _delete_clusterpolicy(env)
        run = threading.Thread(target=lambda: done.update(res=env.cli(
            "apply", "--phase", "3", "--yes", "--settle", "0s", "--timeout", "60s")))
        run.start()
        env.sim.wait_for(lambda: env.phase_status(2) == "in-progress", 30)
        # The collector comes back only once the tool has found the name taken and waits on
        # Service events (the waiter's one-item list for a version): a run that reads the
        # namespace later than this would otherwise find the name already free.
        _until(env, lambda: any(r.verb == "list" and r.resource == "services"
                                and "limit=1&" in r.query + "&"
                                for r in env.sim.server.log.entries()),
               50 * RECONCILE)
        owner = env.service("nvidia-dcgm")["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "ClusterPolicy"
        _collector_back(env, run, 60)
    res = done["res"]
    assert res.code == 0, res.stderr
    assert "waiting: alias-name-free/nvidia-dcgm" in res.stderr
    assert "garbage collection removes it" in res.stderr
    for name in STABLE:
        assert env.service(name)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == \
            "dcgm-migrate"
    assert env.sim.store.find(kinds.DAEMONSET, NS, "nvidia-dcgm") is None
    assert env.cli("verify").code == 0


def test_the_switch_waits_for_the_old_stacks_pods_garbage_collection_is_removing(
        e2e_factory: Callable[..., E2E]) -> None:
    """Garbage collection took the old Services first, its DaemonSets and their pods (which
    carry the common labels phase 1 gave them) not yet: phase 3 neither refuses them as
    foreign pods nor switches while they remain; it says it waits, and switches once the
    collector has removed them."""
    env = _both_labelled_without_a_collector(e2e_factory)
    done: dict[str, Any] = {}
    with env.monitor.replacing(*STABLE):
        _delete_clusterpolicy(env)
        for name in STABLE:  # the collector's first deletions
            env.sim.store.delete(kinds.SERVICE, NS, name)
        run = threading.Thread(target=lambda: done.update(res=env.cli(
            "apply", "--phase", "3", "--yes", "--settle", "0s", "--timeout", "120s")))
        run.start()
        env.sim.wait_for(lambda: env.phase_status(3) == "in-progress", 30)
        time.sleep(env.sim.clock.to_real(20))  # 20 simulated seconds of waiting
        assert run.is_alive(), done["res"].stderr  # not refused: waiting
        assert env.service("nvidia-dcgm")["spec"]["selector"] == {"app": "nvidia-dcgm-dra"}
        assert env.sim.store.find(kinds.DAEMONSET, NS, "nvidia-dcgm") is not None
        _collector_back(env, run, 120)
    res = done["res"]
    assert res.code == 0, res.stderr
    assert "waiting: no-foreign-pods/nvidia-dcgm" in res.stderr
    assert "garbage collection is removing" in res.stderr
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {DCGM: "true"}
    assert env.sim.store.find(kinds.DAEMONSET, NS, "nvidia-dcgm") is None
    assert env.cli("verify").code == 0


def test_stack_change_back_to_clusterpolicy_retires_the_replaced_aliases(
        e2e_factory: Callable[..., E2E]) -> None:
    """The reverse move (GPUCluster → ClusterPolicy): the ClusterPolicy's operator takes the
    stable names over and the GPUCluster's objects are garbage-collected. apply re-plans for
    the legacy stack; the aliases' records are retired (`replaced`), not eternal failures."""
    env = e2e_factory("gpucluster", operator_release=FUTURE, nodes=3,
                      operator_reconcile_seconds=RECONCILE)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with env.monitor.replacing(*STABLE, *DRA):
        _nodes(env, add=DEPLOY_LABELS["clusterpolicy"])
        env.sim.store.create(kinds.CLUSTER_POLICY, seeded_cr("clusterpolicy"))
        env.sim.wait_for(lambda: all(_rolled_out(env, d) for d in STABLE)
                         and all(_ready(env, n) == 3 for n in STABLE), 30)
        gc = env.sim.store.list(kinds.GPU_CLUSTER)[0][0]
        env.sim.store.delete(kinds.GPU_CLUSTER, None, gc["metadata"]["name"])
        env.sim.wait_for(lambda: env.sim.store.find(
            kinds.DAEMONSET, NS, "nvidia-dcgm-dra") is None, 30)
        status = env.cli("status", "-o", "json")
        assert status.code == 1
        assert status.json()["stackChange"] == {"recorded": "gpucluster",
                                                 "live": "clusterpolicy"}
        table = env.cli("status")
        assert table.code == 1
        assert "the completed phases were planned for another GPU Operator stack" in table.stdout \
            + table.stderr, table.stdout
        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    assert res.json()["stack"] == "clusterpolicy"
    assert _step_statuses(env, 1)["set-labels/nvidia-dcgm-dra"] == "gone"
    assert _step_statuses(env, 1)["set-labels/nvidia-dcgm"] == "done"
    assert _step_statuses(env, 2)["create-alias/nvidia-dcgm"] == "replaced"
    assert _step_statuses(env, 3)["set-selector/nvidia-dcgm"] == "replaced"
    assert any("the name is ClusterPolicy/" in w for w in res.json()["warnings"])
    for name in STABLE:
        assert env.service(name)["metadata"]["ownerReferences"][0]["kind"] == "ClusterPolicy"
    verify = env.cli("verify", "-o", "json")
    assert verify.code == 0, _failed(verify.json())


# ---- operator takeover, then rollback -------------------------------------------------------

def test_rollback_skips_aliases_an_operator_took_over(e2e_factory: Callable[..., E2E]) -> None:
    """A ClusterPolicy created beside a migrated GPUCluster: its operator replaces the aliases
    with its own Services. Rollback leaves those alone with a warning and undoes the rest."""
    env = e2e_factory("gpucluster", operator_release=FUTURE, nodes=3,
                      operator_reconcile_seconds=RECONCILE)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    with env.monitor.replacing(*STABLE):  # the operator's takeover is not the tool's doing
        env.sim.store.create(kinds.CLUSTER_POLICY, seeded_cr("clusterpolicy"))
        env.sim.wait_for(lambda: all(
            (env.svc(n) or {}).get("metadata", {}).get("ownerReferences", [{}])[0].get("kind")
            == "ClusterPolicy" for n in STABLE), 30)
        res = env.cli("rollback", "--phase", "1", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    doc = res.json()
    assert [p["status"] for p in doc["phases"]] == ["rolled-back"] * 3
    for name in STABLE:
        assert any(f"Service/{name} is no longer the tool's alias" in w and "skipped" in w
                   for w in doc["warnings"]), doc["warnings"]
        assert f"Service/{name} is no longer the tool's alias" in res.stderr
        assert env.service(name)["metadata"]["ownerReferences"][0]["kind"] == "ClusterPolicy"
    ds = env.ds("nvidia-dcgm-dra")
    assert DCGM not in ds["metadata"]["labels"]
    assert DCGM not in ds["spec"]["template"]["metadata"]["labels"]


# ---- an operator reverts an --include-operator-owned switch -----------------------------------

def test_operator_reverted_switch_is_reconciled_by_apply_without_the_flag(
        e2e_factory: Callable[..., E2E]) -> None:
    """The switch of an operator-owned Service is reverted by the operator: verify says so
    (exit 1); apply without the flag records it as reverted by the operator (warning, exit 0),
    after which verify is green; apply with the flag switches it again."""
    env = e2e_factory("clusterpolicy", nodes=3, operator_reconcile_seconds=150.0)
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    env.clusterpolicy_settled()  # so it reverts at its resync, after the run
    first = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                    "--include-operator-owned")
    assert first.code == 0, first.stderr
    env.sim.wait_for(lambda: env.service("nvidia-dcgm")["spec"]["selector"] == {
        "app": "nvidia-dcgm"}, 30)
    assert env.cli("verify").code == 1

    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    assert any("reverted the selector switch" in w for w in res.json()["warnings"])
    statuses = _step_statuses(env, 3)
    assert statuses["set-selector/nvidia-dcgm"] == "reverted"
    verify = env.cli("verify", "-o", "json")
    assert verify.code == 0, _failed(verify.json())

    before = env.sim.store.resource_version
    again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                    "--include-operator-owned", "-o", "json")
    assert again.code == 0, again.stderr
    # The operator resyncs every 3 s here and may revert the switch again before the next
    # read, so the proof is the store's own record of what was committed during the run.
    assert {DCGM: "true"} in _selectors_committed(env, "nvidia-dcgm", since=before)
    assert _step_statuses(env, 3)["set-selector/nvidia-dcgm"] == "done"


def _selectors_committed(env: E2E, service: str, since: int) -> list[dict[str, str]]:
    """The selectors the store committed for `service` after resourceVersion `since`."""
    events = env.sim.store.events_since(since)
    assert events is not None, "the event log no longer reaches back to the run's start"
    return [e.object["spec"].get("selector") for e in events
            if e.resource.key == kinds.SERVICE.key and e.type != "DELETED"
            and e.object["metadata"]["name"] == service]


# ---- zero desired pods ------------------------------------------------------------------------

def test_zero_desired_pods_is_a_steady_state_for_verify(e2e_factory: Callable[..., E2E]) -> None:
    """Every node labelled DCGM off: its DaemonSet desires 0 pods and its Services are empty.
    The migration completes and verify passes, saying why the Service is empty."""
    env = e2e_factory("gpucluster", nodes=3, operator_reconcile_seconds=RECONCILE)
    with env.monitor.expected_outage():  # the admin takes DCGM off every node on purpose
        _nodes(env, off=("nvidia.com/gpu.deploy.dcgm-dra",))
        env.sim.wait_for(lambda: not env.pods("nvidia-dcgm-dra")
                         and _ready(env, "nvidia-dcgm-dra") == 0
                         and _rolled_out(env, "nvidia-dcgm-dra"), 30)
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert res.code == 0, res.stderr
    verify = env.cli("verify", "-o", "json")
    assert verify.code == 0, _failed(verify.json())
    gates = {g["name"]: g for p in verify.json()["phases"] for g in p["gates"]}
    assert "0 desired pods" in gates["selector-holds/nvidia-dcgm"]["detail"]
    assert "0 desired pods" in gates["stable-name/nvidia-dcgm"]["detail"]
    assert gates["selector-holds/nvidia-dcgm-exporter"]["detail"] == "3 ready endpoints"


# ---- honest exit codes ------------------------------------------------------------------------

def test_phase1_without_writes_waits_for_the_operators_rollout(
        e2e_factory: Callable[..., E2E]) -> None:
    """An operator that renders the common labels itself: phase 1 has nothing to write, but
    it is recorded completed only once the operator's rollout of those labels is done."""
    env = e2e_factory("gpucluster", nodes=3, operator_reconcile_seconds=RECONCILE,
                      pod_start_seconds=20.0)
    def renders_common_labels(cr: dict[str, Any]) -> None:
        cr["metadata"].setdefault("annotations", {})[
            "sim.dcgm-migrate/renders-common-labels"] = "true"

    with env.monitor.rolling():  # the operator's own rollout
        edit_cr(env.sim.store, kinds.GPU_CLUSTER, renders_common_labels)
        env.sim.wait_for(lambda: DCGM in env.ds("nvidia-dcgm-dra")["spec"]["template"][
            "metadata"]["labels"], 30)
        assert not _rolled_out(env, "nvidia-dcgm-dra")
        mark = env.mark()
        res = env.cli("apply", "--phase", "1", "--yes", "-o", "json")
    assert res.code == 0, res.stderr
    assert res.json()["result"]["writes"] == 0
    assert not [w for w in env.writes(mark) if "daemonsets" in w.path]
    assert all(_rolled_out(env, d) for d in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra"))
    assert all(DCGM in p["metadata"]["labels"] for p in env.pods("nvidia-dcgm-dra"))
    assert "rollout  DaemonSet/nvidia-dcgm-dra" in res.stderr


def test_apply_exits_1_when_its_final_report_shows_a_failed_gate(
        e2e_factory: Callable[..., E2E]) -> None:
    """An operator that reconciles every 10 ms (real) reverts the operator-owned Services the
    run switches (--include-operator-owned) before the run ends: every wait passed (the same
    pods stay selected), but the final report shows ✗ selector-holds, so the exit code is 1."""
    env = e2e_factory("clusterpolicy", nodes=3, operator_reconcile_seconds=0.5)
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                  "--include-operator-owned", "-o", "json")
    doc = res.json()
    assert [p["status"] for p in doc["phases"]] == ["completed"] * 3
    failed = _failed(doc)
    assert any("reconciled it back" in d for d in failed.values()), failed
    assert res.code == 1 and doc["ok"] is False, res.stderr
