"""The tool against the sim's object lifecycle (docs/architecture.md, "The simulated cluster":
DRA, adoption, finalizers): a DRA claim that cannot be allocated (the pod stays Pending and
phase 1 names the node and why), a DaemonSet re-created after an orphaning delete (its pods
adopted, not doubled), and Terminating objects (an alias held by a finalizer on rollback and
re-apply, a state ConfigMap being deleted). The operator imitation
runs and the disruption monitor samples every Service throughout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dcgm_sim import dra, writes
from dcgm_sim.controllers import pods as P
from migrator.model import kinds
from tests.conftest import edit_object
from tests.e2e.conftest import E2E, NS

DCGM = "nvidia-dcgm-dra"
ALIAS = "nvidia-dcgm"
EXPORTER_ALIAS = "nvidia-dcgm-exporter"
STATE = "dcgm-migrate-state"
HOLD = "example.com/hold"


def _annotate_node(env: E2E, node: str, key: str, value: str | None) -> None:
    def annotate(obj: dict[str, Any]) -> None:
        annotations = obj["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value

    edit_object(env.sim.store, kinds.NODE, None, node, annotate)


def _add_finalizer(env: E2E, kind: kinds.Kind, name: str) -> None:
    writes.patch(env.sim.store, kind, writes.MERGE_PATCH,
                 {"metadata": {"finalizers": [HOLD]}}, namespace=NS, name=name)


def _drop_finalizers(env: E2E, kind: kinds.Kind, name: str) -> None:
    writes.patch(env.sim.store, kind, writes.MERGE_PATCH, {"metadata": {"finalizers": None}},
                 namespace=NS, name=name)


def _ready_endpoints(env: E2E, service: str) -> int:
    slices, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    return sum(1 for sl in slices
               if sl["metadata"]["labels"].get("kubernetes.io/service-name") == service
               for ep in sl.get("endpoints") or []
               if (ep.get("conditions") or {}).get("ready") is not False)


def test_unallocatable_claim_stops_phase1_naming_node_and_reason(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    bad = "gpu-node-0002"
    _annotate_node(env, bad, dra.UNALLOCATABLE_ANNOTATION, "true")
    res = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "3s")
    assert res.code == 1, (res.stdout, res.stderr)
    assert f"{bad} (Pending: claim not allocated)" in res.stderr
    phase1 = next(p for p in env.state()["phases"] if p["number"] == 1)
    assert phase1["status"] == "failed" and f"{bad} (Pending: claim not allocated)" in \
        phase1["error"]
    pending = [p for p in env.pods(DCGM) if p["spec"]["nodeName"] == bad]
    assert [p["status"]["phase"] for p in pending] == ["Pending"]
    # The driver comes back: the claim is allocated, the pod starts, the same command resumes.
    _annotate_node(env, bad, dra.UNALLOCATABLE_ANNOTATION, None)
    again = env.cli("apply", "--phase", "1", "--rolling", "--yes", "--timeout", "30s")
    assert again.code == 0, again.stderr
    assert env.phase_status(1) == "completed"
    assert all(P.is_pod_ready(p) for p in env.pods(DCGM))


def test_daemonset_recreated_after_orphan_delete_adopts_pods(
        e2e_factory: Callable[..., E2E]) -> None:
    """Someone deletes the DaemonSet with --cascade=orphan mid-migration; the operator
    re-creates it (without the tool's label), which adopts the running pods and rolls them to
    its template, one node at a time: never a second pod beside one, never more endpoints."""
    env = e2e_factory("gpucluster", operator_reconcile_seconds=1.0)
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    old_uid = env.ds(DCGM)["metadata"]["uid"]
    created: list[str] = []

    def count(ev: Any) -> None:
        if ev.resource.key == kinds.POD.key and ev.type == "ADDED" and P.labels_of(
                ev.object).get("app") == DCGM:
            created.append(ev.object["metadata"]["name"])
    env.sim.store.subscribe(count)

    def rolled_by_new_owner() -> bool:
        ds = env.sim.store.find(kinds.DAEMONSET, NS, DCGM)
        if ds is None or ds["metadata"]["uid"] == old_uid:
            return False
        uid = ds["metadata"]["uid"]
        pods = [p for p in env.sim.store.list(kinds.POD, NS)[0]
                if P.labels_of(p).get("app") == DCGM]
        return len(pods) == 3 and all(
            (P.controller_ref(p) or {}).get("uid") == uid and P.is_pod_ready(p)
            and P.labels_of(p).get("pod-template-generation") == "1" for p in pods)
    try:
        with env.monitor.rolling():  # the operator's re-render rolls the pods: budget 1
            writes.delete(env.sim.store, kinds.DAEMONSET, namespace=NS, name=DCGM,
                          options=writes.DeleteOptions(propagation="Orphan"))
            env.sim.wait_for(rolled_by_new_owner, timeout=30)
            env.sim.wait_for(lambda: _ready_endpoints(env, DCGM) == 3, timeout=30)
    finally:
        env.sim.store.unsubscribe(count)
    assert len(created) == 3, f"one new pod per node, not {created}"
    # The operator's DaemonSet lacks the tool's label: phase 1 drifted and is re-applied.
    res = env.cli("apply", "--phase", "1", "--yes", "--timeout", "30s")
    assert res.code == 0, res.stderr
    assert len(env.pods(DCGM)) == 3
    env.monitor.stop()
    _, most = env.monitor.lowest[DCGM]
    assert most == 3, f"Service/{DCGM} had {most} endpoints at some point (doubled pods)"


def test_alias_held_by_a_finalizer_on_rollback_and_reapply(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "2", "--yes").code == 0
    _add_finalizer(env, kinds.SERVICE, ALIAS)
    env.monitor.forget(ALIAS)
    res = env.cli("rollback", "--phase", "2", "--yes", "-o", "json")
    assert res.code == 0, res.stderr
    assert f"Service/{ALIAS}: deletion accepted but not done" in res.stderr
    assert HOLD in res.stderr
    assert env.svc(EXPORTER_ALIAS) is None  # no finalizer: deleted at once
    env.monitor.forget(EXPORTER_ALIAS)  # gone on purpose: a new alias starts its own baseline
    live = env.svc(ALIAS)
    assert live is not None and live["metadata"]["deletionTimestamp"]
    assert env.phase_status(2) == "rolled-back"
    phase2 = next(p for p in res.json()["phases"] if p["number"] == 2)
    assert any("is being deleted" in n and HOLD in n for n in phase2["notes"])
    # Re-running the rollback recognises its own Terminating alias: nothing to write.
    mark = env.mark()
    again = env.cli("rollback", "--phase", "2", "--yes")
    assert again.code == 0, again.stderr
    assert not [w for w in env.writes(since=mark) if "/services/" in w.path]
    # Applying again is refused with the reason and the way out, without a Service write.
    mark = env.mark()
    refused = env.cli("apply", "--phase", "2", "--yes")
    assert refused.code == 1, (refused.stdout, refused.stderr)
    assert f"Service/{ALIAS} is being deleted" in refused.stderr
    assert "finalizers" in refused.stderr
    assert not [w for w in env.writes(since=mark) if "/services/" in w.path]
    # The finalizer goes, the alias with it; the same command now succeeds.
    _drop_finalizers(env, kinds.SERVICE, ALIAS)
    assert env.svc(ALIAS) is None
    env.monitor.forget(ALIAS)  # gone on purpose: the new alias starts its own baseline
    done = env.cli("apply", "--phase", "2", "--yes")
    assert done.code == 0, done.stderr
    fresh = env.svc(ALIAS)
    assert fresh is not None and not fresh["metadata"].get("deletionTimestamp")


def test_terminating_state_configmap_is_refused(e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    _add_finalizer(env, kinds.CONFIGMAP, STATE)
    writes.delete(env.sim.store, kinds.CONFIGMAP, namespace=NS, name=STATE)
    mark = env.mark()
    res = env.cli("apply", "--phase", "2", "--yes")
    assert res.code == 4, (res.stdout, res.stderr)
    assert f"{STATE} holding the migration state is being deleted" in res.stderr
    assert HOLD in res.stderr
    assert env.writes(since=mark) == [], "nothing may be written"
    # Reading it is still fine: status shows the recorded state (and exits 1 only because the
    # live verdict misses the aliases phase 2 has not created yet).
    status = env.cli("status", "-o", "json")
    assert status.code == 1, status.stderr
    assert status.json()["phases"][0]["status"] == "completed"
    assert {c["name"] for c in status.json()["verdict"]["checks"] if not c["ok"]} == {
        "stable-name/nvidia-dcgm", "stable-name/nvidia-dcgm-exporter"}
    _drop_finalizers(env, kinds.CONFIGMAP, STATE)
    assert env.sim.store.find(kinds.CONFIGMAP, NS, STATE) is None
