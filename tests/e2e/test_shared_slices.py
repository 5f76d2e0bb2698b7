"""The guard's shared EndpointSlices as consumers meet them (docs/runbook.md, "Clusters running
both stacks"), judged by what each node's kube-proxy routes the stable names to
(tests/helpers/kubeproxy.py), not by reading back what the tool wrote: a stopped guard's slices
are caught by `verify` before they blackhole a node and repaired by the next guard's first
pass; deleting the guard with its manifest leaves no slice behind; IPv6-only and dual-stack
clusters reach every node in every family their Services serve."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from dcgm_sim.controllers.rendering import MODE_DRA, MODE_LABEL
from migrator.kube.client import Kube
from migrator.model import kinds, objects
from tests.conftest import edit_object
from tests.e2e.conftest import E2E, NS
from tests.e2e.test_guard import _guard_kubeconfig, running_guard
from tests.helpers.kubectl import kubectl_for
from tests.helpers.kubeproxy import IPV4, IPV6, ApiView, routes_by_port

RECONCILE = 2.0  # simulated seconds between the operator imitations' resyncs
REPO = Path(__file__).resolve().parents[2]
KINDS_OF = {"nvidia-dcgm": ("nvidia-dcgm", "nvidia-dcgm-dra"),
            "nvidia-dcgm-exporter": ("nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra")}
LOCAL = {"nvidia-dcgm"}


def _live_ready(env: E2E, daemonsets: tuple[str, ...]) -> dict[str, str]:
    """Pod → node, for the live Ready pods of these DaemonSets."""
    out = {}
    for pod in env.sim.store.list(kinds.POD, NS)[0]:
        owner = (pod["metadata"].get("ownerReferences") or [{}])[0].get("name")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (pod.get("status") or {}).get("conditions") or [])
        if owner in daemonsets and ready and not pod["metadata"].get("deletionTimestamp"):
            out[pod["metadata"]["name"]] = pod["spec"]["nodeName"]
    return out


def _routing_faults(env: E2E, family: str = IPV4) -> list[str]:
    """What a consumer of each stable name would miss or hit in vain, node by node, from what
    kube-proxy of `family` routes its first port to: a node running a Ready pod of the name's
    kind that is not reached (its own pod, for a Local name), and any pod that may be routed to
    and is not a live Ready pod of that kind (on the sending node, for a Local name)."""
    with ApiView(env.sim.kubeconfig) as api:
        services, slices, nodes = api.services(NS), api.slices(NS), api.nodes()
    faults = []
    for name, daemonsets in KINDS_OF.items():
        live = _live_ready(env, daemonsets)
        for node in nodes:
            ports = routes_by_port(services.get(name), slices, node, family=family)
            routing = next(iter(ports.values()), None)
            pods = routing.pods if routing else frozenset()
            possible = routing.possible_pods if routing else frozenset()
            wanted = ({p for p, n in live.items() if n == node} if name in LOCAL
                      else set(live))
            if wanted and not (pods & wanted if name in LOCAL else wanted <= pods):
                faults.append(f"{name} from {node}: misses {sorted(wanted - pods)}")
            dead = {p for p in possible if p not in live
                    or (name in LOCAL and live[p] != node)}
            if dead:
                faults.append(f"{name} from {node}: routes to {sorted(dead)}")
    return faults


def _unfaulted(env: E2E, family: str) -> bool:
    return not _routing_faults(env, family)


def _verify(env: E2E) -> tuple[int, dict[str, str]]:
    """`verify`'s exit code and its failed checks (name → detail; fix)."""
    res = env.cli("verify", "-o", "json")
    doc = res.json()
    return res.code, {c["name"]: f"{c['detail']}; fix: {c['fix']}"
                      for c in doc["verdict"]["checks"] if not c["ok"]}


def _shared(env: E2E) -> list[dict[str, Any]]:
    return [sl for sl in env.sim.store.list(kinds.ENDPOINTSLICE, NS)[0]
            if sl["metadata"]["labels"].get(objects.MANAGED_BY_LABEL) == "dcgm-migrate"]


def _dra_nodes(env: E2E) -> list[str]:
    return sorted(n["metadata"]["name"] for n in env.sim.store.list(kinds.NODE, None)[0]
                  if n["metadata"]["labels"].get(MODE_LABEL) == MODE_DRA)


def _label_node(env: E2E, node_name: str, key: str, value: str) -> None:
    edit_object(env.sim.store, kinds.NODE, None, node_name,
                lambda node: node["metadata"]["labels"].update({key: value}))


def _migrated_mixed(env: E2E) -> None:
    applied = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert applied.code == 0, applied.stdout + applied.stderr


def test_a_stopped_guard_is_caught_before_its_slices_blackhole_a_node_and_a_new_one_repairs(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    _migrated_mixed(env)
    kubeconfig = _guard_kubeconfig(env, tmp_path)  # the Role of docs/guard.yaml only
    with running_guard(env, kube=Kube.connect(kubeconfig)):
        env.until(lambda: not _routing_faults(env), 30, "shared")
        code, failed = _verify(env)
        assert (code, failed) == (0, {})
    # The guard stopped (its Lease released): the names still depend on its slices.
    code, failed = _verify(env)
    assert code == 1 and "no guard runs" in failed["guard-live/guard"], failed
    assert "dcgm-migrate guard -n gpu-operator" in failed["guard-live/guard"]

    # A node leaves the GPUCluster exporter on purpose: its pod goes, the tool's slice keeps
    # it ready (the disruption monitor counts that dead endpoint as ready: only kube-proxy's
    # view below tells, so the monitor restarts its baselines once the guard repaired it).
    with env.monitor.expected_outage():
        node = _dra_nodes(env)[-1]
        gone = {p for p, n in _live_ready(env, ("nvidia-dcgm-exporter-dra",)).items()
                if n == node}
        _label_node(env, node, "nvidia.com/gpu.deploy.dcgm-exporter-dra", "false")
        env.until(lambda: not gone & set(_live_ready(env, ("nvidia-dcgm-exporter-dra",))),
               30, "pod gone")
        faults = _routing_faults(env)
        assert any(f"routes to {sorted(gone)}" in f for f in faults), faults  # a real hazard
        code, failed = _verify(env)
        assert code == 1, failed
        detail = failed["shared-endpoints/nvidia-dcgm-exporter"]
        assert f"{sorted(gone)[0]} on {node}: the pod is gone" in detail, detail

        # A guard that starts again repairs the slices in its first pass.
        with running_guard(env, identity="guard-b", kube=Kube.connect(kubeconfig)):
            took = env.until(lambda: not _routing_faults(env), 30, "repaired")
            print(f"a restarted guard repaired the shared slices within {took:.1f} simulated s")
    with running_guard(env, identity="guard-c", kube=Kube.connect(kubeconfig)) as guard:
        # the slices are already right: its Lease, taken on its first pass, is what verify reads
        env.until(guard.leading, 30, "leading")
        code, failed = _verify(env)
        assert (code, failed) == (0, {})
        assert not _routing_faults(env)


def test_deleting_the_guard_with_its_manifest_leaves_no_shared_slice(
        e2e_factory: Callable[..., E2E], tmp_path: Path) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    _migrated_mixed(env)
    kubectl = kubectl_for(env.sim.kubeconfig, tmp_path)
    kubectl("apply", "-f", str(REPO / "docs" / "guard.yaml"))  # its Lease; no pod runs here
    with running_guard(env, kube=Kube.connect(_guard_kubeconfig(env, tmp_path))):
        env.until(lambda: not _routing_faults(env), 30, "shared")
    lease = env.sim.store.get(kinds.LEASE, NS, "dcgm-migrate-guard")
    assert _shared(env) and all(
        sl["metadata"]["ownerReferences"] == [{
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "name": "dcgm-migrate-guard", "uid": lease["metadata"]["uid"], "controller": False}]
        for sl in _shared(env))

    with env.monitor.expected_outage():  # the GPUCluster nodes leave the stable names
        kubectl("delete", "-f", str(REPO / "docs" / "guard.yaml"), "--wait=false")
        env.until(lambda: not _shared(env), 30, "slices collected")
    # What is left routes nowhere dead: the GPUCluster nodes answer under their -dra names
    # only, and `verify` names the guard the stable names now lack.
    assert not [f for f in _routing_faults(env) if "routes to" in f]
    code, failed = _verify(env)
    assert code == 1 and "no guard runs" in failed["guard-live/guard"], failed


@pytest.mark.parametrize("ip_family", ["ipv6", "dual"])
def test_every_node_is_reached_in_every_family_the_stable_names_serve(
        e2e_factory: Callable[..., E2E], tmp_path: Path, ip_family: str) -> None:
    """IPv6-only: one IPv6 slice set per name. Dual-stack: the operators render SingleStack
    Services (the primary family); made PreferDualStack, both families are shared."""
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4, operator_reconcile_seconds=None,
                      time_scale=0.05,
                      ip_family=ip_family)
    _migrated_mixed(env)
    families = [IPV6] if ip_family == "ipv6" else [IPV4, IPV6]
    if ip_family == "dual":
        admin = Kube.connect(env.sim.kubeconfig)  # through the API: its family defaulting
        for name in ("nvidia-dcgm", "nvidia-dcgm-exporter", "nvidia-dcgm-dra",
                     "nvidia-dcgm-exporter-dra"):
            admin.patch(kinds.SERVICE, name, NS, {"spec": {"ipFamilyPolicy": "PreferDualStack"}},
                        patch_type="merge")
        admin.close()
        env.until(lambda: all(
            {sl["addressType"] for sl in env.sim.store.list(kinds.ENDPOINTSLICE, NS)[0]
             if sl["metadata"]["labels"].get(objects.SERVICE_NAME_LABEL) == name}
            == {IPV4, IPV6} for name in ("nvidia-dcgm-dra", "nvidia-dcgm-exporter-dra")),
            30, "dual-stack slices")
    with running_guard(env, kube=Kube.connect(_guard_kubeconfig(env, tmp_path))):
        for family in families:
            env.until(partial(_unfaulted, env, family), 30, f"{family} shared")
        types = sorted({(sl["metadata"]["labels"][objects.SERVICE_NAME_LABEL],
                         sl["addressType"]) for sl in _shared(env)})
        assert types == sorted((n, f) for n in KINDS_OF for f in families)
        code, failed = _verify(env)
        assert (code, failed) == (0, {})
