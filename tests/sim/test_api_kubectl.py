"""kubectl v1.32 against the simulated API server: discovery, `get -o json`, label, patch (all
three types), delete, `auth can-i` and `rollout status` following DaemonSet status."""

from __future__ import annotations

import json
import time

from dcgm_sim import writes
from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds
from tests.sim.conftest import NS, Kubectl, daemonset, pod, service


def _seed(store: Store) -> None:
    writes.create(store, kinds.DAEMONSET, daemonset("nvidia-dcgm"), namespace=NS)
    writes.create(store, kinds.SERVICE, service("nvidia-dcgm"), namespace=NS)
    writes.create(store, kinds.POD, pod("nvidia-dcgm-a", labels={"app": "nvidia-dcgm"}),
                  namespace=NS)
    writes.create(store, kinds.ENDPOINTSLICE, {
        "metadata": {"name": "nvidia-dcgm-x", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "nvidia-dcgm"}},
        "addressType": "IPv4", "endpoints": [], "ports": []}, namespace=NS)


def test_get_json_of_several_kinds(store: Store, kubectl: Kubectl) -> None:
    _seed(store)
    out = kubectl("get", "ds,svc,pods,endpointslices", "-n", NS, "-o", "json")
    items = json.loads(out.stdout)["items"]
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [
        ("DaemonSet", "nvidia-dcgm"), ("Service", "nvidia-dcgm"), ("Pod", "nvidia-dcgm-a"),
        ("EndpointSlice", "nvidia-dcgm-x")]
    selected = kubectl("get", "pods", "-l", "app in (nvidia-dcgm)", "-o", "name")
    assert selected.stdout.split() == ["pod/nvidia-dcgm-a"]


def test_api_resources_lists_every_kind(kubectl: Kubectl) -> None:
    out = kubectl("api-resources", "-o", "name").stdout.split()
    for expected in ("pods", "daemonsets.apps", "endpointslices.discovery.k8s.io",
                     "gpuclusters.nvidia.com", "clusterpolicies.nvidia.com",
                     "servicemonitors.monitoring.coreos.com"):
        assert expected in out


def test_label_and_patch(store: Store, kubectl: Kubectl) -> None:
    _seed(store)
    kubectl("label", "ds", "nvidia-dcgm", "nvidia.com/gpu-operator.dcgm=true")
    ds = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")
    assert ds["metadata"]["labels"]["nvidia.com/gpu-operator.dcgm"] == "true"
    assert ds["metadata"]["generation"] == 1
    kubectl("patch", "ds", "nvidia-dcgm", "-p", json.dumps(
        {"spec": {"template": {"metadata": {"labels": {"nvidia.com/gpu-operator.dcgm": "true"}}}}}))
    ds = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")
    assert ds["spec"]["template"]["metadata"]["labels"]["nvidia.com/gpu-operator.dcgm"] == "true"
    assert ds["metadata"]["generation"] == 2
    kubectl("patch", "svc", "nvidia-dcgm", "--type=merge", "-p",
            '{"spec":{"selector":{"app":null,"nvidia.com/gpu-operator.dcgm":"true"}}}')
    assert store.get(kinds.SERVICE, NS, "nvidia-dcgm")["spec"]["selector"] == {
        "nvidia.com/gpu-operator.dcgm": "true"}
    kubectl("patch", "svc", "nvidia-dcgm", "--type=json", "-p",
            '[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]')
    assert store.get(kinds.SERVICE, NS, "nvidia-dcgm")["metadata"]["labels"] == {"a": "b"}
    kubectl("label", "ds", "nvidia-dcgm", "nvidia.com/gpu-operator.dcgm-")
    assert "nvidia.com/gpu-operator.dcgm" not in store.get(
        kinds.DAEMONSET, NS, "nvidia-dcgm")["metadata"]["labels"]


def test_errors_reach_kubectl(store: Store, kubectl: Kubectl) -> None:
    _seed(store)
    missing = kubectl("get", "ds", "absent", check=False)
    assert missing.returncode == 1
    assert 'daemonsets.apps "absent" not found' in missing.stderr
    immutable = kubectl("patch", "svc", "nvidia-dcgm", "-p",
                        '{"spec":{"clusterIP":"10.96.200.200"}}', check=False)
    assert immutable.returncode == 1
    assert "may not change once set" in immutable.stderr


def test_delete_pod_is_graceful(store: Store, kubectl: Kubectl) -> None:
    _seed(store)
    kubectl("delete", "pod", "nvidia-dcgm-a", "--wait=false")
    marked = store.get(kinds.POD, NS, "nvidia-dcgm-a")
    assert marked["metadata"]["deletionTimestamp"]
    kubectl("delete", "pod", "nvidia-dcgm-a", "--grace-period=0", "--force", "--wait=false")
    assert store.find(kinds.POD, NS, "nvidia-dcgm-a") is None


def test_auth_can_i_uses_access_reviews(kubectl: Kubectl, server: ApiServer) -> None:
    assert kubectl("auth", "can-i", "patch", "daemonsets.apps").stdout.strip() == "yes"
    assert server.log.find(resource="selfsubjectaccessreviews", verb="create")


def _ds_status(store: Store, *, ready: bool) -> None:
    ds = store.get(kinds.DAEMONSET, NS, "nvidia-dcgm")
    n = 3
    status = {"observedGeneration": ds["metadata"]["generation"], "desiredNumberScheduled": n,
              "currentNumberScheduled": n, "updatedNumberScheduled": n if ready else 1,
              "numberAvailable": n if ready else 2, "numberReady": n if ready else 2,
              "numberMisscheduled": 0}
    writes.patch(store, kinds.DAEMONSET, "application/merge-patch+json", {"status": status},
                 namespace=NS, name="nvidia-dcgm", subresource="status")


def test_rollout_status_waits_for_the_rollout(store: Store, server: ApiServer,
                                              kubectl: Kubectl) -> None:
    _seed(store)
    _ds_status(store, ready=False)
    mark = server.log.last_seq
    proc = kubectl.popen("rollout", "status", "ds/nvidia-dcgm", "--timeout=30s")
    deadline = time.monotonic() + 20
    while not server.log.find(since=mark, verb="watch", resource="daemonsets", open=True):
        assert time.monotonic() < deadline, "kubectl never started watching"
        time.sleep(0.02)
    assert proc.poll() is None  # still waiting: the rollout is not done
    _ds_status(store, ready=True)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert 'daemon set "nvidia-dcgm" successfully rolled out' in out


def test_rollout_status_times_out_while_not_ready(store: Store, kubectl: Kubectl) -> None:
    _seed(store)
    _ds_status(store, ready=False)
    result = kubectl("rollout", "status", "ds/nvidia-dcgm", "--timeout=1s", check=False)
    assert result.returncode != 0
    assert "1 out of 3 new pods have been updated" in result.stdout



def test_human_output_uses_server_side_tables(store: Store, kubectl: Kubectl) -> None:
    _seed(store)
    pods = kubectl("get", "pods").stdout.splitlines()
    assert pods[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[:4] == ["nvidia-dcgm-a", "0/1", "Pending", "0"]
    ds = kubectl("get", "ds", "-o", "wide").stdout.splitlines()[0].split()
    assert ds[:6] == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE"]
    svc = kubectl("get", "svc", "nvidia-dcgm").stdout.splitlines()[1].split()
    assert svc[1:5] == ["ClusterIP", store.get(kinds.SERVICE, NS, "nvidia-dcgm")["spec"][
        "clusterIP"], "<none>", "9400/TCP"]
