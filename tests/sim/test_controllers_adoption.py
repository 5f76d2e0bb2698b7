"""Adoption: a DaemonSet re-created after `delete --cascade=orphan` claims the orphaned pods
that match its selector (upstream ControllerRefManager.ClaimPods) instead of starting a second
pod beside each; pods of another template are then rolled by the update strategy. Checked on
the controllers directly and through real kubectl."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim import writes
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.rollouts import HASH_LABEL
from dcgm_sim.store import TEMPLATE_GENERATION_ANNOTATION, Store
from migrator.model import kinds
from tests.conftest import Bare

NS = "gpu-operator"
DCGM = "nvidia-dcgm-dra"
Obj = dict[str, Any]


def _fresh_copy(ds: Obj) -> Obj:
    """The DaemonSet as a client would create it again: spec and labels, no server fields
    (the template-generation annotation is one: sent on create, the server would keep it)."""
    meta = ds["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k != TEMPLATE_GENERATION_ANNOTATION}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "labels": dict(meta.get("labels") or {}),
                         "annotations": annotations},
            "spec": copy.deepcopy(ds["spec"])}


def _endpoints(store: Store, service: str) -> list[str]:
    slices, _ = store.list(kinds.ENDPOINTSLICE, NS)
    return [str((ep.get("targetRef") or {}).get("name")) for sl in slices
            if sl["metadata"]["labels"].get("kubernetes.io/service-name") == service
            for ep in sl.get("endpoints") or []]


def _orphan_delete(bare: Bare) -> Obj:
    ds = bare.get(kinds.DAEMONSET, DCGM)
    writes.delete(bare.store, kinds.DAEMONSET, namespace=NS, name=DCGM,
                  options=writes.DeleteOptions(propagation="Orphan"))
    bare.wait_for(lambda: bare.store.find(kinds.DAEMONSET, NS, DCGM) is None)
    assert all(P.controller_ref(p) is None for p in bare.pods(DCGM))
    return ds


def _owned_by(bare: Bare, uid: str) -> bool:
    pods = bare.pods(DCGM)
    return bool(pods) and all((P.controller_ref(p) or {}).get("uid") == uid for p in pods)


def test_recreated_daemonset_adopts_its_orphans(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    before = {p["metadata"]["uid"] for p in bare.pods(DCGM)}
    old = _orphan_delete(bare)
    created = [0]

    def count(ev: Any) -> None:
        if ev.resource.key == kinds.POD.key and ev.type == "ADDED":
            created[0] += 1
    bare.store.subscribe(count)
    bare.samplers.append(count)
    new = writes.create(bare.store, kinds.DAEMONSET, _fresh_copy(old), namespace=NS)
    bare.wait_for(lambda: _owned_by(bare, new["metadata"]["uid"]))
    bare.wait_idle()
    pods = bare.pods(DCGM)
    assert {p["metadata"]["uid"] for p in pods} == before  # the same pods, none new
    assert created[0] == 0
    ref = P.controller_ref(pods[0]) or {}
    assert ref["blockOwnerDeletion"] is True and ref["kind"] == "DaemonSet"
    status = bare.get(kinds.DAEMONSET, DCGM)["status"]
    assert status["numberReady"] == status["desiredNumberScheduled"] == 3
    assert sorted(_endpoints(bare.store, DCGM)) == sorted(p["metadata"]["name"] for p in pods)


def _roll_once(bare: Bare) -> None:
    """Move the DaemonSet to generation 2 and wait for its pods to carry it."""
    bare.edit(kinds.DAEMONSET, DCGM, lambda ds: ds["spec"]["template"]["metadata"][
        "labels"].update({"first": "edit"}))
    bare.wait_for(lambda: len(bare.pods(DCGM)) == 3 and all(
        P.labels_of(p).get("pod-template-generation") == "2" and P.is_pod_ready(p)
        for p in bare.pods(DCGM)))


def test_a_template_generation_match_alone_is_not_updated_as_upstream(
        make_bare: Callable[..., Bare]) -> None:
    """`IsPodUpdated` tests the hash, and the template generation against
    `fmt.Sprint(dsTemplateGeneration)`, a pointer's address: orphans of a generation-1
    DaemonSet are not "updated" for a re-created one of another template, although it is at
    generation 1 too and their `pod-template-generation` says 1, so they are rolled."""
    bare = make_bare(nodes=3)
    before = {p["metadata"]["uid"] for p in bare.pods(DCGM)}
    assert {p["metadata"]["labels"]["pod-template-generation"] for p in bare.pods(DCGM)} == {"1"}
    body = _fresh_copy(_orphan_delete(bare))
    body["spec"]["template"]["metadata"]["labels"]["extra"] = "yes"
    new = writes.create(bare.store, kinds.DAEMONSET, body, namespace=NS)
    assert new["metadata"]["annotations"][TEMPLATE_GENERATION_ANNOTATION] == "1"
    bare.wait_for(lambda: len(bare.pods(DCGM)) == 3 and not {
        p["metadata"]["uid"] for p in bare.pods(DCGM)} & before, timeout=30)
    assert all(p["metadata"]["labels"].get("extra") == "yes" for p in bare.pods(DCGM))


def test_adopted_pods_of_another_template_are_rolled(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=3)
    _roll_once(bare)
    before = {p["metadata"]["uid"] for p in bare.pods(DCGM)}
    old = _orphan_delete(bare)
    most = [0]

    def sample(ev: Any) -> None:
        if ev.resource.key == kinds.POD.key:
            most[0] = max(most[0], len([p for p in bare.store.list(kinds.POD, NS)[0]
                                        if p["metadata"]["labels"].get("app") == DCGM]))
    bare.store.subscribe(sample)
    bare.samplers.append(sample)
    body = _fresh_copy(old)
    body["spec"]["template"]["metadata"]["labels"]["extra"] = "yes"
    new = writes.create(bare.store, kinds.DAEMONSET, body, namespace=NS)

    def rolled() -> bool:
        pods = [p for p in bare.pods(DCGM) if not P.is_deleting(p)]
        return (len(pods) == 3 and all(P.labels_of(p).get("extra") == "yes" and P.is_pod_ready(p)
                                       for p in pods))
    bare.wait_for(rolled)
    pods = bare.pods(DCGM)
    assert not before & {p["metadata"]["uid"] for p in pods}
    assert _owned_by(bare, new["metadata"]["uid"])
    hashes = {P.labels_of(p)[HASH_LABEL] for p in pods}
    assert len(hashes) == 1
    assert most[0] <= 3  # maxSurge 0: an old pod goes before its node's new one comes


def test_a_pod_being_deleted_is_not_adopted(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2, termination_seconds=60.0)
    old = _orphan_delete(bare)
    victim = bare.pods(DCGM)[0]["metadata"]["name"]
    writes.delete(bare.store, kinds.POD, namespace=NS, name=victim)
    new = writes.create(bare.store, kinds.DAEMONSET, _fresh_copy(old), namespace=NS)
    uid = new["metadata"]["uid"]
    bare.wait_for(lambda: len([p for p in bare.pods(DCGM)
                               if (P.controller_ref(p) or {}).get("uid") == uid]) == 2)
    assert P.controller_ref(bare.get(kinds.POD, victim)) is None


@pytest.fixture
def kubectl_sim(tmp_path: Path) -> Callable[[SimCluster], Callable[..., Any]]:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")

    def bind(sim: SimCluster) -> Callable[..., Any]:
        env = {**os.environ, "KUBECONFIG": sim.kubeconfig, "HOME": str(tmp_path),
               "KUBECACHEDIR": str(tmp_path / "cache")}

        def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            out = subprocess.run([binary, *args], env=env, capture_output=True, text=True,
                                 timeout=90, check=False, input=stdin)
            assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
            return out
        return run
    return bind


def test_kubectl_cascade_orphan_then_recreate(
        make_sim: Callable[..., SimCluster],
        kubectl_sim: Callable[[SimCluster], Callable[..., Any]]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster")
    kubectl = kubectl_sim(sim)
    before = {p["metadata"]["uid"] for p in sim.store.list(kinds.POD, NS)[0]
              if P.labels_of(p).get("app") == DCGM}
    saved = json.loads(kubectl("get", "ds", DCGM, "-n", NS, "-o", "json").stdout)
    kubectl("delete", "ds", DCGM, "-n", NS, "--cascade=orphan")  # waits until it is gone
    assert sim.store.find(kinds.DAEMONSET, NS, DCGM) is None
    listed = json.loads(kubectl("get", "pods", "-n", NS, "-l", f"app={DCGM}", "-o",
                                "json").stdout)["items"]
    assert {p["metadata"]["uid"] for p in listed} == before
    assert all(not p["metadata"].get("ownerReferences") for p in listed)
    kubectl("create", "--validate=false", "-f", "-", stdin=json.dumps(_fresh_copy(saved)))
    uid = sim.store.get(kinds.DAEMONSET, NS, DCGM)["metadata"]["uid"]

    def adopted() -> bool:
        pods = [p for p in sim.store.list(kinds.POD, NS)[0] if P.labels_of(p).get("app") == DCGM]
        return bool(pods) and all((P.controller_ref(p) or {}).get("uid") == uid for p in pods)
    sim.wait_for(adopted)
    sim.wait_idle()
    kubectl("rollout", "status", f"ds/{DCGM}", "-n", NS, "--timeout=60s")
    after = json.loads(kubectl("get", "pods", "-n", NS, "-l", f"app={DCGM}", "-o",
                               "json").stdout)["items"]
    assert {p["metadata"]["uid"] for p in after} == before
    assert len(_endpoints(sim.store, DCGM)) == 3


def test_kubectl_cascade_foreground_returns_once_the_pods_are_gone(
        make_sim: Callable[..., SimCluster],
        kubectl_sim: Callable[[SimCluster], Callable[..., Any]]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster")
    kubectl = kubectl_sim(sim)
    kubectl("delete", "ds", DCGM, "-n", NS, "--cascade=foreground")  # waits until it is gone
    assert sim.store.find(kinds.DAEMONSET, NS, DCGM) is None
    left = [p for p in sim.store.list(kinds.POD, NS)[0] if P.labels_of(p).get("app") == DCGM]
    assert left == []  # the DaemonSet went only after its pods
    assert len([p for p in sim.store.list(kinds.POD, NS)[0]
                if P.labels_of(p).get("app") == "nvidia-dcgm-exporter-dra"]) == 3
