"""The simulated DaemonSet controller's history as kube-controller-manager keeps it, over HTTP
with the official client: the ControllerRevision a template change makes under `OnDelete`
(`constructHistory`/`snapshot`/`getPatch`, pkg/controller/daemon/update.go), pods counted as
updated by their `controller-revision-hash` alone (`IsPodUpdated`,
pkg/controller/daemon/util/daemonset_util.go) and so relabelled in place without a restart,
stale pods rolled once `RollingUpdate` is back (`rollingUpdate`), revisions reused on a revert
and deduplicated (`dedupCurHistories`), and the pod updates the API server allows
(`ValidatePodUpdate`, pkg/apis/core/validation/validation.go)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import urllib3
from kubernetes import client, config

from dcgm_sim import kinds
from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.rollouts import GENERATION_LABEL, HASH_LABEL
from dcgm_sim.store import TEMPLATE_GENERATION_ANNOTATION as TEMPLATE_GENERATION
from dcgm_sim.store import Event

NS = "gpu-operator"
DCGM = "nvidia-dcgm-dra"
COMMON = "nvidia.com/gpu-operator.dcgm"
JSON_PATCH = "application/json-patch+json"
Obj = dict[str, Any]


class Api:
    """The official client against one sim, answering raw JSON (what the server sent)."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        api = config.new_client_from_config(sim.kubeconfig)
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)

    @staticmethod
    def decode(resp: object) -> Any:
        return json.loads(cast(urllib3.HTTPResponse, resp).data)

    def ds(self) -> Obj:
        found: Obj = self.decode(self.apps.read_namespaced_daemon_set(
            DCGM, NS, _preload_content=False))
        return found

    def patch_ds(self, body: Obj) -> Obj:
        patched: Obj = self.decode(self.apps.patch_namespaced_daemon_set(
            DCGM, NS, body, _preload_content=False))
        return patched

    def create_revision(self, body: Obj) -> None:
        """POST a ControllerRevision (the client sends a plain dict as it is)."""
        self.apps.create_namespaced_controller_revision(NS, cast(client.V1ControllerRevision,
                                                                 body))

    def revisions(self) -> list[Obj]:
        """The ControllerRevisions the DaemonSet controls, by revision number."""
        uid = self.ds()["metadata"]["uid"]
        items = self.decode(self.apps.list_namespaced_controller_revision(
            NS, _preload_content=False))["items"]
        owned = [r for r in items if any(ref.get("controller") and ref["uid"] == uid
                                         for ref in r["metadata"].get("ownerReferences") or [])]
        return sorted(owned, key=lambda r: int(r["revision"]))

    def pods(self) -> dict[str, Obj]:
        """The DaemonSet's pods that are not terminating, by node."""
        items = self.decode(self.core.list_namespaced_pod(
            NS, label_selector=f"app={DCGM}", _preload_content=False))["items"]
        return {p["spec"]["nodeName"]: p for p in items
                if not p["metadata"].get("deletionTimestamp")}

    def relabel(self, pod: Obj, labels: dict[str, str], hash_: str) -> Obj:
        """The in-place update: a JSON patch that tests the pod's uid and hash first."""
        meta = pod["metadata"]
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
            {"op": "test", "path": "/metadata/labels/controller-revision-hash",
             "value": meta["labels"][HASH_LABEL]},
            {"op": "replace", "path": "/metadata/labels/controller-revision-hash",
             "value": hash_},
        ]
        ops += [{"op": "add", "path": "/metadata/labels/" + k.replace("~", "~0").replace(
            "/", "~1"), "value": v} for k, v in labels.items()]
        patched: Obj = self.decode(self.core.patch_namespaced_pod(
            meta["name"], NS, ops, _content_type=JSON_PATCH, _preload_content=False))
        return patched

    def status(self) -> Obj:
        status: Obj = self.ds().get("status") or {}
        return status

    def observed(self) -> bool:
        ds = self.ds()
        return bool((ds.get("status") or {}).get("observedGeneration", 0)
                    >= ds["metadata"]["generation"])

    def settle(self, seconds: float = 30) -> None:
        """Let the controllers finish and `seconds` of simulated time pass."""
        self.sim.wait_for(self.observed)
        self.sim.wait_idle()
        self.sim.controllers.clock.sleep(seconds)
        self.sim.wait_idle()


@pytest.fixture
def api(make_sim: Callable[..., SimCluster]) -> Iterator[Api]:
    yield Api(make_sim(nodes=3, stack="gpucluster"))


def _uids(pods: dict[str, Obj]) -> dict[str, str]:
    return {node: p["metadata"]["uid"] for node, p in pods.items()}


def _hashes(pods: dict[str, Obj]) -> set[str]:
    return {p["metadata"]["labels"][HASH_LABEL] for p in pods.values()}


def _on_delete(api: Api) -> None:
    api.patch_ds({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}})


def _rolling(api: Api) -> None:
    api.patch_ds({"spec": {"updateStrategy": {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}}})


def _label_template(api: Api, value: str | None = "true") -> Obj:
    return api.patch_ds({"spec": {"template": {"metadata": {"labels": {COMMON: value}}}}})


def _get_patch(ds: Obj) -> Obj:
    """`getPatch` (update.go): the template, marked `$patch: replace`, under `spec`."""
    return {"spec": {"template": dict(ds["spec"]["template"], **{"$patch": "replace"})}}


def test_on_delete_template_change_makes_the_revision_and_restarts_nothing(api: Api) -> None:
    """`constructHistory` runs whatever the strategy (`syncDaemonSet`); `OnDelete` skips only
    `rollingUpdate`; `updateDaemonSetStatus` counts a pod updated by `IsPodUpdated`; and a
    labels-only template change is a spec change: generation moves, observedGeneration
    follows (`PrepareForUpdate`, pkg/registry/apps/daemonset/strategy.go;
    `storeDaemonSetStatus`)."""
    api.settle(0)
    (first,) = api.revisions()
    before = api.pods()
    old_hash = first["metadata"]["labels"][HASH_LABEL]
    assert _hashes(before) == {old_hash} and len(before) == 3
    _on_delete(api)
    api.settle(0)
    assert [r["metadata"]["name"] for r in api.revisions()] == [first["metadata"]["name"]]
    generation = api.ds()["metadata"]["generation"]
    ds = _label_template(api)
    assert ds["metadata"]["generation"] == generation + 1
    api.settle()
    ds = api.ds()
    assert ds["status"]["observedGeneration"] == ds["metadata"]["generation"]
    old, new = api.revisions()
    assert old["metadata"]["name"] == first["metadata"]["name"] and old["revision"] == 1
    new_hash = new["metadata"]["labels"][HASH_LABEL]
    assert new_hash != old_hash and new["revision"] == 2
    assert new["metadata"]["name"] == f"{DCGM}-{new_hash}"
    assert new["metadata"]["labels"] == {**ds["spec"]["template"]["metadata"]["labels"],
                                         HASH_LABEL: new_hash}
    assert new["data"] == _get_patch(ds)
    assert old["data"]["spec"]["template"]["metadata"]["labels"] == {"app": DCGM}
    after = api.pods()
    assert _uids(after) == _uids(before) and _hashes(after) == {old_hash}
    status = api.status()
    assert status["desiredNumberScheduled"] == 3 and status["numberAvailable"] == 3
    assert status.get("updatedNumberScheduled", 0) == 0


def test_relabelled_pods_count_as_updated_and_stay_running_after_rolling_update_is_back(
    api: Api,
) -> None:
    """A pod carrying the current revision's hash is updated (`IsPodUpdated`): `rollingUpdate`
    finds it on its node as the new pod (`findUpdatedPodsOnNode`) and deletes nothing."""
    api.settle(0)
    before = api.pods()
    _on_delete(api)
    _label_template(api)
    api.settle(0)
    new_hash = api.revisions()[-1]["metadata"]["labels"][HASH_LABEL]
    for pod in before.values():
        relabelled = api.relabel(pod, {COMMON: "true"}, new_hash)
        assert relabelled["metadata"]["uid"] == pod["metadata"]["uid"]
    api.sim.wait_for(lambda: api.status().get("updatedNumberScheduled") == 3)
    _rolling(api)
    api.settle()
    after = api.pods()
    assert _uids(after) == _uids(before)
    assert _hashes(after) == {new_hash}
    assert all(p["metadata"]["labels"][COMMON] == "true" for p in after.values())
    status = api.status()
    assert (status["updatedNumberScheduled"], status["numberAvailable"]) == (3, 3)
    assert len(api.revisions()) == 2


def test_pods_with_a_stale_hash_are_rolled_once_rolling_update_is_back(api: Api) -> None:
    """`rollingUpdate` (maxSurge 0): an old available pod is a candidate for deletion within
    maxUnavailable (one node at a time here); `manage` then creates its replacement from the
    current revision. The relabelled pod is left alone."""
    api.settle(0)
    before = api.pods()
    _on_delete(api)
    _label_template(api)
    api.settle(0)
    new_hash = api.revisions()[-1]["metadata"]["labels"][HASH_LABEL]
    api.relabel(before["gpu-node-0001"], {COMMON: "true"}, new_hash)
    api.settle()
    assert _uids(api.pods()) == _uids(before)
    assert api.status()["updatedNumberScheduled"] == 1
    down: list[int] = []

    def sample(event: Event) -> None:  # nodes without a Ready, non-terminating pod
        if event.resource is kinds.POD:
            serving = {p["spec"].get("nodeName") for p in api.sim.store.list(kinds.POD, NS)[0]
                       if p["metadata"]["labels"].get("app") == DCGM and P.is_pod_ready(p)
                       and not P.is_deleting(p)}
            down.append(len(set(before) - serving))

    api.sim.store.subscribe(sample)
    try:
        _rolling(api)
        api.sim.wait_for(lambda: api.status().get("updatedNumberScheduled") == 3
                         and api.status().get("numberAvailable") == 3)
        api.settle()
    finally:
        api.sim.store.unsubscribe(sample)
    assert max(down) == 1
    after = api.pods()
    assert after["gpu-node-0001"]["metadata"]["uid"] == before["gpu-node-0001"]["metadata"]["uid"]
    for node in ("gpu-node-0002", "gpu-node-0003"):
        assert after[node]["metadata"]["uid"] != before[node]["metadata"]["uid"]
        assert after[node]["metadata"]["labels"][COMMON] == "true"
    assert _hashes(after) == {new_hash}


def test_the_hash_follows_the_template_alone(api: Api) -> None:
    """`ComputeHash(&ds.Spec.Template, collisionCount)` and `Match` compare the template only:
    a strategy or DaemonSet-label change makes no revision; a template reverted to an earlier
    one reuses that revision with the next revision number (`constructHistory`)."""
    api.settle(0)
    (first,) = api.revisions()
    old_hash = first["metadata"]["labels"][HASH_LABEL]
    _on_delete(api)
    api.patch_ds({"metadata": {"labels": {COMMON: "true"}}})
    api.patch_ds({"spec": {"revisionHistoryLimit": 5}})
    api.settle(0)
    assert [r["metadata"]["name"] for r in api.revisions()] == [first["metadata"]["name"]]
    assert api.revisions()[0]["revision"] == 1
    _label_template(api)
    api.settle(0)
    assert [r["revision"] for r in api.revisions()] == [1, 2]
    new_hash = api.revisions()[1]["metadata"]["labels"][HASH_LABEL]
    assert api.status().get("updatedNumberScheduled", 0) == 0
    _label_template(api, None)  # back to the first template
    api.settle(0)
    revisions = api.revisions()
    assert [(r["metadata"]["labels"][HASH_LABEL], r["revision"]) for r in revisions] == [
        (new_hash, 2), (old_hash, 3)]
    assert api.status()["updatedNumberScheduled"] == 3  # the pods run that template again
    _rolling(api)
    api.settle()
    assert _hashes(api.pods()) == {old_hash}
    assert len(api.revisions()) == 2


def test_duplicate_current_revisions_are_deduplicated_and_pods_relabelled(api: Api) -> None:
    """`dedupCurHistories`: of the revisions matching the template, the one with the highest
    revision is kept, every pod is relabelled to its hash (a merge patch: no restart) and the
    others are deleted; `constructHistory` first labels a revision that lacks the hash label
    with its own name."""
    api.settle(0)
    (first,) = api.revisions()
    before = api.pods()
    ds = api.ds()
    owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": DCGM,
             "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    labels = dict(first["metadata"]["labels"])
    del labels[HASH_LABEL]
    duplicate = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                 "metadata": {"name": f"{DCGM}-copy", "labels": labels,
                              "ownerReferences": [owner]},
                 "data": first["data"], "revision": 7}
    api.create_revision(duplicate)
    api.sim.wait_for(lambda: [r["metadata"]["name"] for r in api.revisions()] == [
        f"{DCGM}-copy"])
    api.settle()
    (kept,) = api.revisions()
    assert kept["metadata"]["labels"][HASH_LABEL] == f"{DCGM}-copy" and kept["revision"] == 7
    after = api.pods()
    assert _uids(after) == _uids(before)
    assert _hashes(after) == {f"{DCGM}-copy"}
    assert api.status()["updatedNumberScheduled"] == 3


def test_pod_labels_are_mutable_and_the_rest_is_not(api: Api) -> None:
    """`ValidatePodUpdate`: metadata labels may change; the spec (but for images, tolerations
    and deadlines) and the uid may not; a JSON patch whose `test` fails changes nothing. On
    OnDelete, so the controller leaves the pod it no longer counts updated where it is."""
    api.settle(0)
    _on_delete(api)
    pod = api.pods()["gpu-node-0001"]
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    patched = api.relabel(pod, {COMMON: "true"}, "other")
    assert patched["metadata"]["labels"][COMMON] == "true"
    with pytest.raises(client.ApiException) as stale:
        api.relabel(pod, {COMMON: "again"}, "third")  # the hash is no longer the old one
    assert stale.value.status == 422
    assert api.pods()["gpu-node-0001"]["metadata"]["labels"][HASH_LABEL] == "other"
    with pytest.raises(client.ApiException) as spec:
        api.core.patch_namespaced_pod(name, NS, [
            {"op": "replace", "path": "/spec/nodeName", "value": "gpu-node-0002"}],
            _content_type=JSON_PATCH)
    assert spec.value.status == 422 and "pod updates may not change fields" in str(
        spec.value.body)
    with pytest.raises(client.ApiException) as moved:
        api.core.patch_namespaced_pod(name, NS, [
            {"op": "replace", "path": "/metadata/uid", "value": "0" * 8}],
            _content_type=JSON_PATCH)
    assert moved.value.status == 422 and "metadata.uid" in str(moved.value.body)
    assert api.pods()["gpu-node-0001"]["metadata"]["uid"] == uid


def test_the_template_generation_annotation_moves_with_the_template_alone(api: Api) -> None:
    """The server-owned `deprecated.daemonset.template.generation` (`PrepareForUpdate`,
    pkg/registry/apps/daemonset/strategy.go): one more on a template change, kept on any other
    change and whatever a client sends; new pods carry it as `pod-template-generation`
    (`CreatePodTemplate`) and a revision copies the DaemonSet's annotations (`snapshot`)."""
    api.settle(0)
    assert api.ds()["metadata"]["annotations"][TEMPLATE_GENERATION] == "1"
    assert {p["metadata"]["labels"][GENERATION_LABEL] for p in api.pods().values()} == {"1"}
    _on_delete(api)
    ds = api.patch_ds({"metadata": {"annotations": {TEMPLATE_GENERATION: "9"}}})
    assert ds["metadata"]["annotations"][TEMPLATE_GENERATION] == "1"
    assert ds["metadata"]["generation"] == 2
    ds = _label_template(api)
    assert ds["metadata"]["annotations"][TEMPLATE_GENERATION] == "2"
    assert ds["metadata"]["generation"] == 3
    api.settle(0)
    new = api.revisions()[-1]
    assert new["metadata"]["annotations"][TEMPLATE_GENERATION] == "2"
    victim = api.pods()["gpu-node-0003"]
    api.core.delete_namespaced_pod(victim["metadata"]["name"], NS)
    api.sim.wait_for(lambda: api.status().get("updatedNumberScheduled") == 1
                     and api.status().get("numberAvailable") == 3)
    labels = api.pods()["gpu-node-0003"]["metadata"]["labels"]
    assert labels[GENERATION_LABEL] == "2"
    assert labels[HASH_LABEL] == new["metadata"]["labels"][HASH_LABEL]


def test_revisions_are_claimed_by_the_selector(api: Api) -> None:
    """`controlledHistories` (`ClaimControllerRevisions`, controller_ref_manager.go): an
    orphan revision matching the selector is adopted as an old revision (the current one is
    renumbered above it), one that does not is left alone, and an owned one whose labels stop
    matching is released."""
    api.settle(0)
    (first,) = api.revisions()
    other = json.loads(json.dumps(first["data"]))
    other["spec"]["template"]["metadata"]["labels"]["older"] = "yes"

    def orphan(name: str, app: str, revision: int) -> Obj:
        return {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": name, "labels": {"app": app, HASH_LABEL: name}},
                "data": other, "revision": revision}

    api.create_revision(orphan("older", DCGM, 4))
    api.create_revision(orphan("stranger", "other", 9))
    api.sim.wait_for(lambda: [(r["metadata"]["name"], r["revision"]) for r in api.revisions()]
                     == [("older", 4), (first["metadata"]["name"], 5)])
    api.settle(0)
    stranger = api.apps.read_namespaced_controller_revision("stranger", NS)
    assert stranger.metadata is not None and not stranger.metadata.owner_references
    api.apps.patch_namespaced_controller_revision(
        "older", NS, {"metadata": {"labels": {"app": "other"}}})
    api.sim.wait_for(lambda: [r["metadata"]["name"] for r in api.revisions()] == [
        first["metadata"]["name"]])
    released = api.apps.read_namespaced_controller_revision("older", NS)
    assert released.metadata is not None and not released.metadata.owner_references
    assert _hashes(api.pods()) == {first["metadata"]["labels"][HASH_LABEL]}


def test_a_hash_collision_bumps_the_collision_count(api: Api) -> None:
    """`snapshot`: a revision of the new hash's name already there with other data (adopted,
    an orphan matching the selector) bumps `status.collisionCount`; the next sync hashes the
    template with it (`ComputeHash`) and makes the revision under that name."""
    api.settle(0)
    _on_delete(api)
    preview = api.decode(api.apps.patch_namespaced_daemon_set(
        DCGM, NS, {"spec": {"template": {"metadata": {"labels": {COMMON: "true"}}}}},
        dry_run="All", _preload_content=False))
    taken = P.template_hash(preview["spec"]["template"])
    squatter = {"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": f"{DCGM}-{taken}", "labels": {"app": DCGM}},
                "data": {"spec": {"template": {"$patch": "replace"}}}, "revision": 1}
    api.create_revision(squatter)
    api.sim.wait_for(lambda: len(api.revisions()) == 2)
    ds = _label_template(api)
    api.sim.wait_for(lambda: api.status().get("collisionCount") == 1 and len(
        api.revisions()) == 3)
    api.settle(0)
    new = api.revisions()[-1]
    expected = P.template_hash(ds["spec"]["template"], 1)
    assert expected != taken
    assert (new["metadata"]["name"], new["metadata"]["labels"][HASH_LABEL]) == (
        f"{DCGM}-{expected}", expected)
    assert new["data"] == _get_patch(ds) and new["revision"] == 3
    assert api.status().get("updatedNumberScheduled", 0) == 0


def test_kubectl_rollout_undo_reads_the_history(api: Api, tmp_path: Path) -> None:
    """kubectl's DaemonSet rollback (staging/src/k8s.io/kubectl/pkg/polymorphichelpers/
    rollback.go, `DaemonSetRollbacker`) finds the revision by number among those the DaemonSet
    controls and patches its `data` back as a strategic merge patch: the sim's revisions are
    ones it can read, and the controller reuses the reverted-to revision, renumbered."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    env = {**os.environ, "KUBECONFIG": api.sim.kubeconfig, "HOME": str(tmp_path)}

    def kubectl(*args: str) -> str:
        out = subprocess.run([binary, *args], env=env, capture_output=True, text=True,
                             timeout=90, check=False)
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
        return out.stdout

    api.settle(0)
    (first,) = api.revisions()
    _label_template(api)
    api.sim.wait_for(lambda: len(api.revisions()) == 2)
    kubectl("rollout", "undo", f"daemonset/{DCGM}", "--to-revision=1")
    kubectl("rollout", "status", f"daemonset/{DCGM}", "--timeout=60s")
    ds = api.ds()
    assert ds["spec"]["template"]["metadata"]["labels"] == {"app": DCGM}
    revisions = api.revisions()
    assert (revisions[-1]["metadata"]["name"], revisions[-1]["revision"]) == (
        first["metadata"]["name"], 3)
    history = kubectl("rollout", "history", f"daemonset/{DCGM}")
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]
    assert _hashes(api.pods()) == {first["metadata"]["labels"][HASH_LABEL]}


def test_pod_spec_updates_allowed_as_upstream(api: Api) -> None:
    """`ValidatePodUpdate`: an image may change; a toleration may be added but an existing one
    changed only in `tolerationSeconds` (`validateOnlyAddedTolerations`); an active deadline
    set, then only lowered; the grace period is immutable."""
    api.settle(0)
    pod = api.pods()["gpu-node-0002"]
    name = pod["metadata"]["name"]

    def patch(*ops: Obj) -> int:
        try:
            api.core.patch_namespaced_pod(name, NS, list(ops), _content_type=JSON_PATCH)
        except client.ApiException as err:
            assert err.status == 422, err.body
            return 422
        return 200

    image = pod["spec"]["containers"][0]["image"] + "-next"
    assert patch({"op": "replace", "path": "/spec/containers/0/image", "value": image}) == 200
    added = {"key": "example.com/x", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 30}
    assert patch({"op": "add", "path": "/spec/tolerations/-", "value": added}) == 200
    last = len(pod["spec"]["tolerations"])
    assert patch({"op": "replace", "path": f"/spec/tolerations/{last}/tolerationSeconds",
                  "value": 60}) == 200
    assert patch({"op": "replace", "path": f"/spec/tolerations/{last}/key",
                  "value": "example.com/y"}) == 422
    assert patch({"op": "remove", "path": "/spec/tolerations/0"}) == 422
    assert patch({"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 600}) == 200
    assert patch({"op": "replace", "path": "/spec/activeDeadlineSeconds", "value": 900}) == 422
    assert patch({"op": "replace", "path": "/spec/activeDeadlineSeconds", "value": 300}) == 200
    assert patch({"op": "remove", "path": "/spec/activeDeadlineSeconds"}) == 422
    assert patch({"op": "replace", "path": "/spec/terminationGracePeriodSeconds",
                  "value": 5}) == 422
    spec = api.pods()["gpu-node-0002"]["spec"]
    assert spec["containers"][0]["image"] == image and spec["activeDeadlineSeconds"] == 300
    assert spec["tolerations"][last] == dict(added, tolerationSeconds=60)
    assert api.pods()["gpu-node-0002"]["metadata"]["uid"] == pod["metadata"]["uid"]
