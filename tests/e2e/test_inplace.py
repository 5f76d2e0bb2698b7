"""Phase 1 in place (docs/runbook.md, phase 1): every DCGM and exporter pod relabelled with the
new template's labels and `controller-revision-hash` — none restarted, the DaemonSet's status
counting them all updated, no Service's ready endpoints below its baseline at any sample — and
the rolling path where it must be taken (`--rolling`, pods on an older revision, an operator
re-render during the run)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from migrator.model import kinds
from migrator.model.gates import rollout_complete
from migrator.model.objects import HELD_STRATEGY
from tests.conftest import edit_object, new_operand_versions, pods_ready_on
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_drift import DCGM
from tests.e2e.test_phase1 import _daemonsets
from tests.helpers import crash
from tests.helpers.kubeproxy import RoutedEndpoints
from tests.sim.conftest import Raw

HASH = "controller-revision-hash"
RENDER_HASH = "nvidia.com/last-applied-hash"


def _all_daemonsets(stack: str) -> dict[str, str]:
    """Every DCGM and exporter DaemonSet of the stack → its common label key (mixed: both)."""
    if stack in ("mixed", "both"):
        return {**_daemonsets("gpucluster"), **_daemonsets("clusterpolicy")}
    return _daemonsets(stack)


def _uids(env: E2E) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"]
            for ds in _all_daemonsets(env.sim.stack) for p in env.pods(ds)}


def _current_hash(env: E2E, ds: dict[str, Any]) -> str:
    """The controller's current revision of this DaemonSet: the highest it owns."""
    revs = [r for r, in [(r,) for r in env.sim.store.list(kinds.CONTROLLER_REVISION, NS)[0]]
            if any(ref["uid"] == ds["metadata"]["uid"]
                   for ref in r["metadata"].get("ownerReferences") or [])]
    return str(max(revs, key=lambda r: r["revision"])["metadata"]["labels"][HASH])


def _assert_whole(env: E2E, labelled: bool) -> None:
    """Every pod on the current revision, with (or without) the common label; the DaemonSet
    back on its own RollingUpdate, not held."""
    for name, key in _all_daemonsets(env.sim.stack).items():
        ds = env.ds(name)
        assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate"
        assert HELD_STRATEGY not in (ds["metadata"].get("annotations") or {})
        status = ds["status"]
        assert status["observedGeneration"] == ds["metadata"]["generation"], name
        assert status["updatedNumberScheduled"] == status["desiredNumberScheduled"] == len(
            env.pods(name)) > 0, (name, status)
        want = _current_hash(env, ds)
        for pod in env.pods(name):
            labels = pod["metadata"]["labels"]
            assert labels[HASH] == want, pod["metadata"]["name"]
            assert (labels.get(key) == "true") is labelled, pod["metadata"]["name"]


def _services(env: E2E) -> set[str]:
    return {s["metadata"]["name"] for s in env.sim.store.list(kinds.SERVICE, NS)[0]}


def _no_dip(env: E2E, services: set[str]) -> None:
    """Zero tolerance: no sample of a Service that existed before the run (an alias the run
    creates starts at zero) below its baseline, phase 1 included."""
    env.monitor.stop()
    assert services <= set(env.monitor.lowest), "the monitor sampled not every Service"
    dips = {s: low for s, low in env.monitor.lowest.items()
            if s in services and low[0] < low[1]}
    assert not dips, f"ready endpoints dipped (lowest, baseline): {dips}"


@pytest.mark.parametrize("stack", ["gpucluster", "clusterpolicy", "mixed"])
def test_apply_phase3_in_place_restarts_no_pod_and_dips_no_endpoint(
        e2e_factory: Callable[..., E2E], stack: str) -> None:
    """Every pod keeps its uid, the DaemonSets' status counts them all updated, and no Service
    lost a ready endpoint (the disruption monitor's samples) nor a routed one (kube-proxy's
    view of every commit, tests/helpers/kubeproxy.py). Mixed: both stacks' DaemonSets, under
    the release that lets both CRs exist."""
    env = e2e_factory(stack, nodes=4 if stack == "mixed" else 3,
                      **({"operator_release": FUTURE} if stack == "mixed" else {}))
    plan = env.cli("plan", "-o", "json")
    assert plan.code == 0, plan.stderr
    notes = " ".join(plan.json()["phases"][0]["notes"])
    daemonsets = _all_daemonsets(stack)
    for name in daemonsets:
        assert f"DaemonSet/{name}: in place: 0 of {len(env.pods(name))} pods restarted" \
            in notes, notes
    before, services = _uids(env), _services(env)
    routed = RoutedEndpoints(sorted(services), NS)
    mark = env.mark()
    with routed.follow(env.sim.store):
        start = dict(routed.lowest_routed)  # as seeded: before the run
        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
        assert res.code == 0, res.stdout + res.stderr
    assert _uids(env) == before, "a pod was replaced"
    _assert_whole(env, labelled=True)
    writes = env.writes(since=mark)
    assert not [w for w in writes if w.resource == "pods" and w.verb == "delete"]
    assert len([w for w in writes if w.resource == "pods"]) == len(before)  # a patch per pod
    _no_dip(env, services)
    assert all(start.values()) and set(start) == services, start
    assert {s: routed.lowest_routed[s] for s in services} == start, routed
    if stack == "mixed":
        return  # its verdict wants the guard's shared slices (test_guard_verdict), not phase 1
    ok = env.cli("verify")
    assert ok.code == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("command", [("apply", "--phase", "1"), ("rollback", "--phase", "1")])
def test_a_lagging_pod_informer_sees_every_relabel_before_the_strategy_is_restored(
        e2e_factory: Callable[..., E2E], command: tuple[str, ...]) -> None:
    """The DaemonSet controller's pod informer runs 20 simulated seconds behind its DaemonSet
    informer, as on a loaded kube-controller-manager: the run restores RollingUpdate only once
    the controller counts the relabelled pods as updated, so it takes none for old and rolls
    none. Restored at once, the controller rolls a pod per maxUnavailable."""
    env = e2e_factory("clusterpolicy")
    if command[0] == "rollback":
        assert env.cli("apply", "--phase", "1", "--yes").code == 0
    env.sim.controllers.daemonsets.pod_events_lag = 20.0
    before, services = _uids(env), _services(env)
    res = env.cli(*command, "--yes", "--settle", "0s")
    assert res.code == 0, res.stdout + res.stderr
    env.sim.controllers.daemonsets.pod_events_lag = 0.0
    assert env.sim.wait_idle(), "the controllers did not settle"
    assert _uids(env) == before, "a pod was replaced"
    _assert_whole(env, labelled=command[0] == "apply")
    _no_dip(env, services)


def test_a_controller_that_never_counts_the_relabels_stops_the_run_held_and_a_rerun_resumes(
        e2e_factory: Callable[..., E2E]) -> None:
    """The DaemonSet controller's pod informer stalls: it never sees the relabels, so restoring
    RollingUpdate would have it restart every pod. The run waits `--timeout`, stops with exit
    1 naming `counted-updated` and the fix, the DaemonSet still held on OnDelete; once the
    controller catches up, the same command resumes, restores the strategy and restarts no
    pod."""
    env = e2e_factory("clusterpolicy")
    before, services = _uids(env), _services(env)
    env.sim.controllers.daemonsets.pod_events_lag = 1e6
    stopped = env.cli("apply", "--phase", "1", "--yes", "--timeout", "20s")
    said = stopped.stdout + stopped.stderr
    assert stopped.code == 1, said
    assert "has not counted the relabelled pods as updated within 20s" in said, said
    assert "check the kube-controller-manager, then rerun" in said, said
    assert HELD_STRATEGY in env.ds("nvidia-dcgm")["metadata"].get("annotations", {})
    env.sim.controllers.daemonsets.pod_events_lag = 0.0
    resumed = env.cli("apply", "--phase", "1", "--yes", "--settle", "0s")
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert env.sim.wait_idle(), "the controllers did not settle"
    assert _uids(env) == before, "a pod was replaced"
    _assert_whole(env, labelled=True)
    _no_dip(env, services)


@pytest.mark.parametrize("command", [("apply", "--phase", "1"), ("rollback", "--phase", "1")])
def test_a_controller_manager_behind_the_api_server_still_relabels_in_place(
        e2e_factory: Callable[..., E2E], command: tuple[str, ...]) -> None:
    """A v1.34 API server beside kube-controller-manager v1.33, as a control-plane upgrade
    passes through: the controller's ControllerRevisions carry the template's
    `creationTimestamp: null`, which the API server's DaemonSet omits, so no revision equals
    the template. The run still finds the controller's revision of the relabelled template,
    relabels every pod in place and restores the strategy; comparing whole templates, it
    would wait out `--timeout` with the DaemonSet held on OnDelete."""
    env = e2e_factory("clusterpolicy", api_server="v1.34")
    raw = Raw(env.sim.url)  # plain HTTP: the client's models hide a null from an absent field
    served = raw("GET", f"/apis/apps/v1/namespaces/{NS}/daemonsets/nvidia-dcgm")[1]
    revision = raw("GET", f"/apis/apps/v1/namespaces/{NS}/controllerrevisions")[1]
    assert "creationTimestamp" not in served["spec"]["template"]["metadata"]
    assert all(r["data"]["spec"]["template"]["metadata"]["creationTimestamp"] is None
               for r in revision["items"]), "the revisions lost the controller's own JSON"
    if command[0] == "rollback":
        assert env.cli("apply", "--phase", "1", "--yes").code == 0
    before, services = _uids(env), _services(env)
    res = env.cli(*command, "--yes", "--settle", "0s", "--timeout", "60s")
    assert res.code == 0, res.stdout + res.stderr
    assert env.sim.wait_idle(), "the controllers did not settle"
    assert _uids(env) == before, "a pod was replaced"
    _assert_whole(env, labelled=command[0] == "apply")
    _no_dip(env, services)


@pytest.mark.parametrize("deny_by", ["webhook", "policy"])
def test_a_pod_whose_relabel_admission_refuses_is_left_to_roll_and_said(
        e2e_factory: Callable[..., E2E], deny_by: str) -> None:
    """An admission webhook (403) or a ValidatingAdmissionPolicy (422) refuses one pod's
    relabel: the run relabels the others in place, restores the strategy, and leaves that pod
    to the rollout, saying why; the rollout replaces it alone. Before, a webhook's 403 stopped
    the run with the DaemonSet held on OnDelete and the pods half relabelled."""
    env = e2e_factory("clusterpolicy")
    denied = sorted(p["metadata"]["name"] for p in env.pods("nvidia-dcgm"))[0]
    env.sim.server.faults.update(deny_writes=[f"pods/{denied}"], deny_by=deny_by,
                                 deny_message="pod labels are frozen")
    before = _uids(env)
    res = env.cli("apply", "--phase", "1", "--yes")
    assert res.code == 0, res.stdout + res.stderr
    said = res.stdout + res.stderr
    assert f"{denied} (its relabel refused: " in said and "pod labels are frozen" in said, said
    env.sim.server.faults.reset()
    assert env.sim.wait_idle(), "the controllers did not settle"
    after = _uids(env)
    assert denied not in after, "the refused pod was not rolled"
    assert {k: v for k, v in before.items() if k != denied}.items() <= after.items(), \
        "another pod was replaced"
    _assert_whole(env, labelled=True)
    assert not any(HELD_STRATEGY in (env.ds(name)["metadata"].get("annotations") or {})
                   for name in _daemonsets(env.sim.stack)), "a DaemonSet was left held"


def test_rollback_phase1_in_place(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("clusterpolicy")
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    before, services = _uids(env), _services(env)
    res = env.cli("rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert res.code == 0, res.stdout + res.stderr
    assert _uids(env) == before, "a pod was replaced"
    _assert_whole(env, labelled=False)
    _no_dip(env, services)


def test_rolling_option_rolls_every_pod(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster")
    plan = env.cli("plan", "--rolling", "-o", "json")
    assert "rolling (--rolling): 3 pods restarted" in " ".join(plan.json()["phases"][0]["notes"])
    before = _uids(env)
    res = env.cli("apply", "--phase", "1", "--rolling", "--yes")
    assert res.code == 0, res.stdout + res.stderr
    assert not set(_uids(env)) & set(before), "--rolling must replace every pod"
    _assert_whole(env, labelled=True)


def test_pending_template_change_takes_the_rolling_path(e2e_factory: Callable[..., E2E]) -> None:
    """A DaemonSet whose pods are not all on its current revision (a template change still
    rolling out, held up by a node whose pods never turn Ready) is not relabelled in place."""
    env = e2e_factory("gpucluster", operator_reconcile_seconds=None)
    pods_ready_on(env.sim.store, "gpu-node-0003", False)
    with env.monitor.expected_outage():  # gpu-node-0003's pod never Ready: not the tool's
        edit_object(env.sim.store, kinds.DAEMONSET, NS, "nvidia-dcgm-dra",
                    lambda ds: ds["spec"]["template"]["metadata"].setdefault(
                        "annotations", {}).update(pending="change"))
        env.sim.wait_for(lambda: len({p["metadata"]["labels"][HASH]
                                      for p in env.pods("nvidia-dcgm-dra")}) == 2, 30)
        plan = env.cli("plan", "-o", "json")
        notes = " ".join(plan.json()["phases"][0]["notes"])
        assert "DaemonSet/nvidia-dcgm-dra: rolling (pods on an older revision" in notes, notes
        assert "DaemonSet/nvidia-dcgm-exporter-dra: in place" in notes, notes
        # apply takes that path: its rollout gate refuses while the rollout is unfinished,
        # never holding the DaemonSet on OnDelete nor patching one of its pods.
        mark = env.mark()
        res = env.cli("apply", "--phase", "1", "--yes", "--timeout", "5s")
        assert res.code != 0 and "nvidia-dcgm-dra" in res.stderr, res.stdout + res.stderr
        touched = {(w.resource, w.name) for w in env.writes(since=mark)}
        assert ("daemonsets", "nvidia-dcgm-dra") not in touched, touched
        assert not [n for r, n in touched if r == "pods" and n.startswith("nvidia-dcgm-dra-")]
        assert env.ds("nvidia-dcgm-dra")["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def _labels_write(env: E2E, daemonset: str) -> int:
    """k of `hang_nth_write` for phase 1's template relabel of `daemonset` in place (its
    second patch, after the hold), counted on a probe cluster of the same make."""
    mark = env.mark()
    assert env.cli("apply", "--phase", "1", "--yes", "--settle", "0s").code == 0
    writes = [w for w in env.writes(since=mark) if w.code < 400]
    patches = [i for i, w in enumerate(writes, 1)
               if w.resource == "daemonsets" and w.name == daemonset]
    assert len(patches) == 3, patches  # hold, relabel, restore
    return patches[1]


def test_operator_rerender_during_the_run_takes_the_rolling_path(
        e2e_factory: Callable[..., E2E]) -> None:
    """The operator re-renders the DaemonSet (a whole-object Update: its template without the
    common label, RollingUpdate, the tool's hold annotation gone) right after the tool relabelled
    its template: the tool patches none of its pods and never puts the hold back, the
    operator's rollout replaces them; a rerun then labels the re-rendered template in place."""
    name = "nvidia-dcgm-dra"
    k = _labels_write(e2e_factory("gpucluster", operator_reconcile_seconds=2.0), name)
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    before, rendered = _uids(env), env.ds(name)["metadata"]["annotations"][RENDER_HASH]
    mark = env.mark()
    env.sim.server.faults.update(hang_nth_write=k)
    proc = crash.start(env.sim.kubeconfig, "apply", "--phase", "1", "--yes", "--settle", "0s")
    try:
        assert env.sim.server.faults.wait_held(60), "the relabel write never came"
        assert DCGM in env.ds(name)["spec"]["template"]["metadata"]["labels"]
        with env.monitor.expected_outage():  # the operator's own rollout, not the tool's
            new_operand_versions(env.sim.store)
            env.sim.wait_for(lambda: env.ds(name)["metadata"]["annotations"][RENDER_HASH]
                             != rendered, 30)
            env.sim.server.faults.release_held()
            code, out, err = crash.finish(proc, 120)
            env.sim.wait_for(lambda: all(rollout_complete(env.ds(n)).ok for n in (
                name, "nvidia-dcgm-exporter-dra")), 60)
    finally:
        env.sim.server.faults.release_held()
        crash.finish(proc, 10)
    patched = {w.name for w in env.writes(since=mark) if w.resource == "pods"}
    assert not {p for p in patched if p.startswith(name + "-")}, (patched, out, err)
    assert "the operator re-rendered it" in out + err, out + err
    ds = env.ds(name)
    assert ds["spec"]["updateStrategy"]["type"] == "RollingUpdate", ds["spec"]
    assert HELD_STRATEGY not in ds["metadata"]["annotations"]
    assert not {p["metadata"]["uid"] for p in env.pods(name)} & set(before.values())
    # The next run labels the operator's template, in place: its pods stay.
    rolled = _uids(env)
    again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert again.code == 0, again.stdout + again.stderr
    assert _uids(env) == rolled, "a pod was replaced"
    _assert_whole(env, labelled=True)
    assert env.cli("verify").code == 0, (code, out, err)


def _strategy_findings(env: E2E, command: str) -> list[dict[str, Any]]:
    res = env.cli(command, "-o", "json")
    return [c for c in res.json()["verdict"]["checks"] if c["name"].startswith("update-strategy/")]


def test_a_daemonset_held_on_ondelete_is_red_until_restored(
        e2e_factory: Callable[..., E2E]) -> None:
    """A run killed right after it held a DaemonSet on OnDelete: `verify` and `status` are red
    on that DaemonSet with the fix (resume or roll back), whatever the state says; a rollback
    of phase 1 restores its strategy, in place (no pod replaced), and the finding goes."""
    probe = e2e_factory("clusterpolicy", operator_reconcile_seconds=None)
    mark = probe.mark()
    assert probe.cli("apply", "--phase", "1", "--yes", "--settle", "0s").code == 0
    writes = [w for w in probe.writes(since=mark) if w.code < 400]
    k = next(i for i, w in enumerate(writes, 1) if w.resource == "daemonsets")
    env = e2e_factory("clusterpolicy", operator_reconcile_seconds=None)
    before = _uids(env)
    assert crash.kill_after_write(env.sim, k, "apply", "--phase", "3", "--yes")
    held = [n for n in _daemonsets(env.sim.stack)
            if HELD_STRATEGY in (env.ds(n)["metadata"].get("annotations") or {})]
    assert len(held) == 1 and env.ds(held[0])["spec"]["updateStrategy"]["type"] == "OnDelete"
    assert env.cli("unlock").code == 0  # the killed run's lock
    for command in ("verify", "status"):
        found = _strategy_findings(env, command)
        assert [(c["name"], c["ok"]) for c in found] == [(f"update-strategy/{held[0]}", False)]
        assert "held on OnDelete by dcgm-migrate" in found[0]["detail"], found
        assert "rollback --phase 1" in found[0]["fix"] and "apply" in found[0]["fix"], found
    # Without the state (lost), the live annotation alone still says it.
    state = copy.deepcopy(env.sim.store.get(kinds.CONFIGMAP, NS, "dcgm-migrate-state"))
    env.sim.store.delete(kinds.CONFIGMAP, NS, "dcgm-migrate-state")
    assert [c["ok"] for c in _strategy_findings(env, "verify")] == [False]
    del state["metadata"]["resourceVersion"], state["metadata"]["uid"]
    env.sim.store.create(kinds.CONFIGMAP, state)
    res = env.cli("rollback", "--phase", "1", "--yes", "--settle", "0s")
    assert res.code == 0, res.stdout + res.stderr
    assert _uids(env) == before, "a pod was replaced"
    _assert_whole(env, labelled=False)
    assert _strategy_findings(env, "verify") == []
