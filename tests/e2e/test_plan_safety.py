"""Plan safety end to end, with the sim's operator imitation on and the disruption monitor
running: a stray pod carrying a common label stops phase 3 unless allowed (and apply shows the
plan's warnings), a LoadBalancer source's class, source ranges and annotations reach its alias,
the ServiceMonitor docs/monitoring.md recommends keeps `verify` green while a certain duplicate
on any Service turns it red, a phase whose plan has a failed gate writes nothing, and a CR that
sets a reserved label to "false" is named in a warning that comes true on the next re-render."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from migrator.model import kinds
from tests.conftest import edit_cr, edit_object
from tests.e2e.conftest import E2E, NS

DCGM = "nvidia.com/gpu-operator.dcgm"
EXPORTER = "nvidia.com/gpu-operator.dcgm-exporter"
DOCS = Path(__file__).resolve().parents[2] / "docs"
LB_INTERNAL = "service.beta.kubernetes.io/aws-load-balancer-internal"


def _stray_pod(env: E2E, name: str, labels: dict[str, str]) -> None:
    """A pod no DaemonSet owns (a debug copy someone started by hand) on a GPU node."""
    env.sim.store.create(kinds.POD, {
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"nodeName": "gpu-node-0001",
                 "containers": [{"name": "c", "image": "nvcr.io/nvidia/cloud-native/dcgm:x"}]}})
    env.sim.wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True" for c in (
        env.sim.store.get(kinds.POD, NS, name).get("status") or {}).get("conditions") or []), 30)


def _service_writes(env: E2E, since: int) -> list[Any]:
    return [w for w in env.writes(since=since) if w.resource != "configmaps"]


def _gpucluster(env: E2E) -> dict[str, Any]:
    return copy.deepcopy(env.sim.store.list(kinds.GPU_CLUSTER)[0][0])


def _rolled_out(env: E2E, name: str, key: str, value: str) -> bool:
    ds = env.ds(name)
    st = ds.get("status") or {}
    desired = st.get("desiredNumberScheduled")
    pods = env.pods(name)
    return (st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
            and st.get("updatedNumberScheduled") == desired == st.get("numberAvailable")
            == len(pods) and all(p["metadata"]["labels"].get(key) == value for p in pods))


# ---- pods outside the DaemonSets -----------------------------------------------------------

def test_stray_pod_stops_phase3_until_allowed_and_apply_shows_the_warning(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "2", "--yes", "--settle", "0s").code == 0
    _stray_pod(env, "dcgm-debug", {DCGM: "true", "run": "debug"})

    mark = env.mark()
    refused = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert refused.code == 1, refused.stdout + refused.stderr
    assert "warning: Service/nvidia-dcgm: the common selector would also pick up pods " \
           "outside the DaemonSets: dcgm-debug" in refused.stderr
    assert "no-foreign-pods/nvidia-dcgm" in refused.stderr
    assert "--allow-foreign-pods" in refused.stderr
    assert _service_writes(env, mark) == []  # the refusal came before any write
    assert env.service("nvidia-dcgm")["spec"]["selector"] == {"app": "nvidia-dcgm-dra"}
    assert env.phase_status(3) == "failed"

    allowed = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s",
                      "--allow-foreign-pods", "-o", "json")
    assert allowed.code == 0, allowed.stderr
    assert "warning: Service/nvidia-dcgm: the common selector would also pick up" \
        in allowed.stderr
    assert any("dcgm-debug" in w for w in allowed.json()["warnings"])
    phase3 = next(p for p in env.state()["phases"] if p["number"] == 3)
    recorded = {r["step"]["service"]: r["step"]["allow_foreign"] for r in phase3["steps"]}
    assert recorded == {"nvidia-dcgm": True, "nvidia-dcgm-exporter": True}
    slices, _ = env.sim.store.list(kinds.ENDPOINTSLICE, NS)
    assert "dcgm-debug" in {ep["targetRef"]["name"] for sl in slices
                            if sl["metadata"]["labels"]["kubernetes.io/service-name"]
                            == "nvidia-dcgm" for ep in sl.get("endpoints") or []}
    verified = env.cli("verify", "-o", "json")
    assert verified.code == 0, verified.stdout  # allowed, and recorded as allowed


def test_a_stray_pod_joining_after_the_switch_turns_verify_red(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    assert env.cli("verify").code == 0
    _stray_pod(env, "exporter-debug", {EXPORTER: "true"})
    bad = env.cli("verify", "-o", "json")
    assert bad.code == 1, bad.stdout
    failed = [g for p in bad.json()["phases"] if p["status"] == "completed"
              for g in p["gates"] if not g["ok"]]
    assert [g["name"] for g in failed] == ["no-foreign-pods/nvidia-dcgm-exporter"]
    assert "exporter-debug" in failed[0]["detail"]


# ---- a LoadBalancer source ------------------------------------------------------------------

def test_loadbalancer_alias_keeps_class_source_ranges_and_internal_annotation(
        e2e_factory: Callable[..., E2E]) -> None:
    """The CR renders only the Service type (upstream DCGMExporterServiceConfig has type and
    internalTrafficPolicy); the rest comes from outside the operator (a cloud admission policy),
    here set by hand between two reconciles (a long period; a CR edit reconciles at once)."""
    env = e2e_factory("gpucluster", operator_reconcile_seconds=3600.0)
    edit_cr(env.sim.store, kinds.GPU_CLUSTER, lambda cr: cr["spec"]["dcgmExporter"].setdefault(
        "service", {}).__setitem__("type", "LoadBalancer"))
    env.sim.wait_for(lambda: env.service("nvidia-dcgm-exporter-dra")["spec"]["type"]
                     == "LoadBalancer", 30)
    def load_balanced(src: dict[str, Any]) -> None:
        src["spec"].update(loadBalancerClass="service.k8s.aws/nlb",
                           loadBalancerSourceRanges=["10.0.0.0/8"],
                           externalTrafficPolicy="Local", healthCheckNodePort=32100)
        src["metadata"]["annotations"][LB_INTERNAL] = "true"

    edit_object(env.sim.store, kinds.SERVICE, NS, "nvidia-dcgm-exporter-dra", load_balanced)

    res = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert res.code == 0, res.stdout + res.stderr
    source, alias = env.service("nvidia-dcgm-exporter-dra"), env.service("nvidia-dcgm-exporter")
    assert source["spec"]["loadBalancerClass"] == "service.k8s.aws/nlb"  # not reconciled yet
    spec = alias["spec"]
    assert spec["type"] == "LoadBalancer"
    assert spec["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert spec["loadBalancerSourceRanges"] == ["10.0.0.0/8"]
    assert spec["externalTrafficPolicy"] == "Local"
    assert spec["selector"] == {EXPORTER: "true"}
    # API-assigned fields are the alias's own, never the source's
    assert spec["clusterIP"] != source["spec"]["clusterIP"]
    assert spec["healthCheckNodePort"] not in (None, 32100)
    assert spec["ports"][0]["nodePort"] != source["spec"]["ports"][0]["nodePort"]
    ann = alias["metadata"]["annotations"]
    assert ann[LB_INTERNAL] == "true"
    assert "prometheus.io/scrape" not in ann  # the source keeps the one annotation path
    verified = env.cli("verify", "-o", "json")
    assert verified.code == 0, verified.stdout
    assert verified.json()["scrapeDuplicates"] == 0


# ---- monitoring truth and no writes on a failed plan gate ------------------------------------

def _recommended_servicemonitor() -> dict[str, Any]:
    """The one ServiceMonitor YAML block docs/monitoring.md recommends, parsed from the doc."""
    text = (DOCS / "monitoring.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    monitors = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "ServiceMonitor"]
    assert len(monitors) == 1, "docs/monitoring.md should recommend exactly one ServiceMonitor"
    return monitors[0]


def test_the_recommended_servicemonitor_keeps_verify_green(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    env.sim.store.create(kinds.SERVICE_MONITOR, _recommended_servicemonitor())
    ok = env.cli("verify", "-o", "json")
    assert ok.code == 0, ok.stdout
    doc = ok.json()
    assert doc["scrapeDuplicates"] == 0
    assert any(w.startswith("possible duplicate scraping: 3 exporter pods") and
               "servicemonitor/gpu-operator/dcgm-exporter → Service/nvidia-dcgm-exporter" in w
               for w in doc["warnings"]), doc["warnings"]


def test_verify_counts_a_duplicate_that_does_not_go_through_the_aliases(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    env.sim.store.create(kinds.SERVICE, {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "team-gpu-metrics", "namespace": NS,
                     "annotations": {"prometheus.io/scrape": "true"}},
        "spec": {"selector": {"app": "nvidia-dcgm-exporter-dra"}, "clusterIP": "10.96.9.9",
                 "ports": [{"name": "m", "port": 9400, "protocol": "TCP"}]}})
    bad = env.cli("verify", "-o", "json")
    assert bad.code == 1, bad.stdout
    doc = bad.json()
    assert (doc["scrapeDuplicates"], doc["toolDuplicates"]) == (3, 0)
    assert any(w.startswith("duplicate scraping now: 3 exporter pods") and
               "team-gpu-metrics" in w for w in doc["warnings"])


def test_phase2_with_a_failed_duplicate_gate_writes_nothing(
        e2e_factory: Callable[..., E2E]) -> None:
    """The recommended ServiceMonitor created too early (before phase 2) would give every
    exporter pod a second path through the alias: phase 2 refuses before its first write —
    not after creating `nvidia-dcgm`, which needs no such gate."""
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    assert env.cli("apply", "--phase", "1", "--yes").code == 0
    env.sim.store.create(kinds.SERVICE_MONITOR, _recommended_servicemonitor())
    mark = env.mark()
    res = env.cli("apply", "--phase", "2", "--yes")
    assert res.code == 1, res.stdout + res.stderr
    assert "no-duplicate-scrape" in res.stderr and "nothing was written" in res.stderr
    assert _service_writes(env, mark) == []
    assert env.svc("nvidia-dcgm") is None and env.svc("nvidia-dcgm-exporter") is None
    assert env.phase_status(2) == "failed"


# ---- a reserved label set to "false" in the CR -------------------------------------------------

def test_cr_false_for_a_reserved_label_is_overridden_with_a_warning_that_comes_true(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("gpucluster", operator_reconcile_seconds=2.0)
    name = _gpucluster(env)["metadata"]["name"]
    field = f"GPUCluster/{name} spec.daemonsets.labels['{EXPORTER}']"
    with env.monitor.rolling():  # the operator's own rollout of the user's label
        edit_cr(env.sim.store, kinds.GPU_CLUSTER, lambda cr: cr["spec"].setdefault(
            "daemonsets", {}).__setitem__("labels", {EXPORTER: "false"}))
        env.sim.wait_for(lambda: _rolled_out(env, "nvidia-dcgm-exporter-dra", EXPORTER,
                                             "false"), 30)
    plan = env.cli("plan", "-o", "json").json()
    assert any(w.startswith(f"{field} sets {EXPORTER}='false'") for w in plan["warnings"]), \
        plan["warnings"]

    res = env.cli("apply", "--phase", "1", "--yes")
    assert res.code == 0, res.stdout + res.stderr
    # a successful table run prints each warning once, in its report on stdout
    assert f"! {field} sets {EXPORTER}='false'" in res.stdout
    assert "operator's next re-render" in res.stdout
    assert _rolled_out(env, "nvidia-dcgm-exporter-dra", EXPORTER, "true")  # reserved wins
    verified = env.cli("verify", "-o", "json")  # red only for the aliases phase 2 creates
    assert {c["name"] for c in verified.json()["verdict"]["checks"] if not c["ok"]} == {
        "stable-name/nvidia-dcgm", "stable-name/nvidia-dcgm-exporter"}, verified.stdout
    status = env.cli("status", "-o", "json").json()
    assert any(w.startswith(field) for w in status["warnings"])  # still true while it holds

    with env.monitor.rolling():  # what the warning said: any CR edit brings "false" back
        edit_cr(env.sim.store, kinds.GPU_CLUSTER, lambda cr: cr["spec"]["dcgmExporter"]
                .__setitem__("version", "4.5.2-4.8.1-distroless"))
        env.sim.wait_for(lambda: _rolled_out(env, "nvidia-dcgm-exporter-dra", EXPORTER,
                                             "false"), 30)
    bad = env.cli("verify", "-o", "json")
    assert bad.code == 1, bad.stdout
    assert [g["name"] for p in bad.json()["phases"] if p["status"] == "completed"
            for g in p["gates"] if not g["ok"]] == ["labels-hold/nvidia-dcgm-exporter-dra"]
