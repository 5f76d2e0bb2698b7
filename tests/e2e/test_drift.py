"""Drift (docs/design.md, "Gates") with the sim's operator imitation on: completed phases are
re-verified, the drift-risk scenario (an operator re-render drops hand-written labels) is caught by
`verify` with exit 1, and `apply` heals it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from migrator.model import kinds
from migrator.model.gates import rollout_complete
from tests.conftest import new_operand_versions
from tests.e2e.conftest import E2E, NS

DCGM = "nvidia.com/gpu-operator.dcgm"


def _rolled_out(ds: dict[str, Any]) -> bool:
    st = ds.get("status") or {}
    return bool(st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
                and st.get("updatedNumberScheduled") == st.get("desiredNumberScheduled")
                == st.get("numberAvailable"))


def test_operator_rerender_is_caught_by_verify_and_healed_by_apply(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    plan = env.cli("plan", "-o", "json")
    assert any(w.startswith("Drift risk") for w in plan.json()["warnings"])
    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert res.code == 0, res.stderr
    assert "Drift risk" in res.stdout
    ok = env.cli("verify", "-o", "json")
    assert ok.code == 0, ok.stdout + ok.stderr

    with env.monitor.expected_outage():
        new_operand_versions(env.sim.store)
        env.sim.wait_for(lambda: DCGM not in env.ds("nvidia-dcgm-dra")["metadata"]["labels"], 30)
        env.sim.wait_for(lambda: all(DCGM not in p["metadata"]["labels"]
                                     for p in env.pods("nvidia-dcgm-dra")), 30)
        # ... and the operator's rollout has finished: phase 1 refuses to start a rollout on a
        # DaemonSet that is still rolling (its last new pod may not be Ready yet).
        env.sim.wait_for(lambda: all(rollout_complete(env.ds(n)).ok for n in (
            "nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")), 30)
        bad = env.cli("verify", "-o", "json")
        assert bad.code == 1, bad.stdout
        details = " ".join(g["detail"] for p in bad.json()["phases"] for g in p["gates"]
                           if not g["ok"])
        assert "re-rendered" in details and "GPUCluster" in details, details

        # runbook: wait for the operator's rollout before re-running (phase 1 refuses to write
        # while a DaemonSet is not rolled out: its plan's rollout-complete gate fails)
        env.sim.wait_for(lambda: all(_rolled_out(env.ds(n)) for n in (
            "nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")), 30)
        rolled = {p["metadata"]["uid"] for n in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")
                  for p in env.pods(n)}
        healed = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
        assert healed.code == 0, healed.stderr
        # The heal relabels the operator's new pods in place: none restarted again.
        assert {p["metadata"]["uid"] for n in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")
                for p in env.pods(n)} == rolled
    assert env.cli("verify").code == 0
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {DCGM: "true"}
    items, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    ready = [ep for sl in items
             if sl["metadata"]["labels"]["kubernetes.io/service-name"] == "nvidia-dcgm"
             for ep in sl.get("endpoints") or [] if ep["conditions"].get("ready")]
    assert len(ready) == 3


def test_operator_reverts_a_switched_operator_owned_service(
        e2e_factory: Callable[..., E2E]) -> None:
    # the revert comes after apply's final report (a revert within the run makes its final
    # report show ✗ and the exit code 1: test_transitions): phase 1's rollouts over, the
    # operator settled, it reconciles next at its informers' resync, 150 s here. Simulated
    # time stands while the run goes, so however loaded the machine, the run is over first
    # (a run that outlived 150 simulated seconds, 3 real ones, met the revert).
    env = e2e_factory("clusterpolicy", operator_reconcile_seconds=150.0)
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    env.clusterpolicy_settled()
    with env.sim.clock.held():
        res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                      "--include-operator-owned", "-o", "json")
    assert res.code == 0, res.stderr
    assert any("will revert" in w for w in res.json()["warnings"])
    env.sim.wait_for(
        lambda: env.service("nvidia-dcgm")["spec"]["selector"] == {"app": "nvidia-dcgm"}, 30)
    status = env.cli("status", "-o", "json")
    assert status.code == 1
    gates = [g for p in status.json()["phases"] for g in p["gates"] if not g["ok"]]
    assert any("ClusterPolicy" in g["detail"] and "reconciled it back" in g["detail"]
               for g in gates), gates
