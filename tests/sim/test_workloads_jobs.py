"""Jobs in the simulated cluster, through the real kubectl and the official client: the API
server's defaults (generated selector and labels), a pod `<job>-<5 characters>` with the
tracking finalizer; its success → `kubectl wait --for=condition=complete` (SuccessCriteriaMet
then Complete, completionTime); failures up to backoffLimit, each replacement after the
failure backoff in simulated time → FailureTarget then Failed (BackoffLimitExceeded); a running
pod deleted → counted failed and replaced; the repository's docs/job.yaml runs its pod.
A pod ends as a kubelet reports it (`tests.helpers.podexit`): the sim's pods run no image."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.joblogic import TRACKING_FINALIZER
from dcgm_sim.store import Event
from migrator.model import kinds
from tests.helpers import workloads as w
from tests.helpers.kubectl import kubectl_for
from tests.helpers.podexit import finish_pod
from tests.sim.conftest import make_client

NS = "gpu-operator"
REPO = Path(__file__).resolve().parents[2]
Obj = dict[str, Any]




@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(nodes=2, stack="none", time_scale=0.005) as cluster:
        yield cluster


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Callable[..., str]:
    return kubectl_for(sim.kubeconfig, tmp_path)


@pytest.fixture
def api(sim: SimCluster) -> Iterator[client.ApiClient]:
    c = make_client(sim.url)
    yield c
    c.close()


def _job(name: str, **spec: Any) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "work", "image": "img:1"}]}}, **spec}}



def _running(sim: SimCluster, core: Any, job: str,
             not_in: frozenset[str] = frozenset()) -> str:
    """The name of the Job's Running pod (one not in `not_in`), once there is one."""
    def found() -> str | None:
        for pod in core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items:
            if (pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
                    and pod.metadata.name not in not_in):
                return str(pod.metadata.name)
        return None
    name = sim.wait_for(found, timeout=30)
    assert name is not None  # wait_for answers once the value is truthy
    return name


def test_defaults_then_a_succeeded_pod_completes_the_job(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    w.apply_object(kubectl, tmp_path, _job("once"))
    batch, core = w.batch(api), w.core(api)
    job = batch.read_namespaced_job("once", NS)
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels == {
        "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
        "batch.kubernetes.io/job-name": "once", "job-name": "once"}
    assert (job.spec.completions, job.spec.parallelism, job.spec.backoff_limit,
            job.spec.completion_mode, job.spec.suspend, job.spec.pod_replacement_policy) == (
        1, 1, 6, "NonIndexed", False, "TerminatingOrFailed")

    name = _running(sim, core, "once")
    pod = core.read_namespaced_pod(name, NS)
    assert name.startswith("once-") and len(name) == len("once-") + 5
    assert pod.metadata.finalizers == [TRACKING_FINALIZER]
    assert pod.metadata.owner_references[0].uid == uid
    assert pod.metadata.owner_references[0].controller is True
    running = batch.read_namespaced_job_status("once", NS).status
    assert (running.active, running.terminating) == (1, 0) and running.start_time

    finish_pod(core, NS, name, 0)
    out = kubectl("-n", NS, "wait", "--for=condition=complete", "job/once", "--timeout=60s")
    assert "job.batch/once condition met" in out
    st = batch.read_namespaced_job_status("once", NS).status
    assert (st.succeeded, st.failed, st.active, st.ready, st.terminating) == (1, None, None, 0, 0)
    assert st.completion_time is not None and st.completion_time >= st.start_time
    assert [(c.type, c.status, c.reason) for c in st.conditions] == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached")]
    assert not (st.uncounted_terminated_pods.succeeded or st.uncounted_terminated_pods.failed)
    done = core.read_namespaced_pod(name, NS)  # kept, Succeeded, no longer held
    assert done.status.phase == "Succeeded" and not done.metadata.finalizers
    row = kubectl("-n", NS, "get", "job", "once", "--no-headers").split()
    assert row[1:3] == ["Complete", "1/1"]
    assert len(core.list_namespaced_pod(NS, label_selector="job-name=once").items) == 1


def test_failures_up_to_the_backoff_limit_fail_the_job_after_backoffs(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    created: dict[str, float] = {}  # pod name -> simulated time it was created
    lock = threading.Lock()

    def watch(event: Event) -> None:
        if event.resource.key == kinds.POD.key and event.type == "ADDED":
            with lock:
                created[event.object["metadata"]["name"]] = sim.clock.now()

    sim.store.subscribe(watch)
    w.apply_object(kubectl, tmp_path, _job("flaky", backoffLimit=2))
    core, batch = w.core(api), w.batch(api)
    seen: set[str] = set()
    failed_at: list[float] = []
    for attempt in range(3):
        name = _running(sim, core, "flaky", frozenset(seen))
        if failed_at:  # the replacement waited for the backoff: 10 s, then 20 s
            assert created[name] - failed_at[-1] >= 10 * 2 ** (attempt - 1) - 0.5
        seen.add(name)
        failed_at.append(sim.clock.now())
        finish_pod(core, NS, name, 1)
    out = kubectl("-n", NS, "wait", "--for=condition=failed", "job/flaky", "--timeout=60s")
    assert "condition met" in out
    sim.store.unsubscribe(watch)
    st = batch.read_namespaced_job_status("flaky", NS).status
    assert (st.failed, st.succeeded, st.active) == (3, None, None)
    assert [(c.type, c.status, c.reason, c.message) for c in st.conditions] == [
        ("FailureTarget", "True", "BackoffLimitExceeded",
         "Job has reached the specified backoff limit"),
        ("Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit")]
    assert st.completion_time is None
    pods = core.list_namespaced_pod(NS, label_selector="job-name=flaky").items
    assert {p.metadata.name for p in pods} == seen  # no fourth pod
    assert all(p.status.phase == "Failed" and not p.metadata.finalizers for p in pods)
    assert kubectl("-n", NS, "get", "job", "flaky", "--no-headers").split()[1] == "Failed"


def test_a_running_pod_deleted_counts_as_failed_and_is_replaced(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    w.apply_object(kubectl, tmp_path, _job("keep"))
    core, batch = w.core(api), w.batch(api)
    first = _running(sim, core, "keep")
    kubectl("-n", NS, "delete", "pod", first, "--wait=false")
    sim.wait_for(lambda: batch.read_namespaced_job_status("keep", NS).status.failed == 1,
                 timeout=30)
    second = _running(sim, core, "keep", frozenset({first}))
    sim.wait_for(lambda: not [p for p in core.list_namespaced_pod(NS).items
                              if p.metadata.name == first], timeout=30)  # not held any more
    st = batch.read_namespaced_job_status("keep", NS).status
    assert (st.active, st.failed, st.conditions) == (1, 1, None)
    finish_pod(core, NS, second, 0)
    kubectl("-n", NS, "wait", "--for=condition=complete", "job/keep", "--timeout=60s")
    st = batch.read_namespaced_job_status("keep", NS).status
    assert (st.succeeded, st.failed) == (1, 1)


def test_deleting_a_job_releases_and_removes_its_pods(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient,
        tmp_path: Path) -> None:
    w.apply_object(kubectl, tmp_path, _job("gone"))
    core = w.core(api)
    _running(sim, core, "gone")
    kubectl("-n", NS, "delete", "job", "gone")
    sim.wait_for(lambda: not core.list_namespaced_pod(
        NS, label_selector="job-name=gone").items, timeout=30)


def test_the_repository_job_manifest_runs_its_pod(
        sim: SimCluster, kubectl: Callable[..., str], api: client.ApiClient) -> None:
    kubectl("apply", "-f", str(REPO / "docs" / "rbac.yaml"), "-f",
            str(REPO / "docs" / "job.yaml"))
    core = w.core(api)
    name = _running(sim, core, "dcgm-migrate-apply")
    pod = core.read_namespaced_pod(name, NS)
    assert pod.spec.service_account_name == "dcgm-migrate"
    assert pod.spec.containers[0].args[:3] == ["apply", "--phase", "1"]
    row = kubectl("-n", NS, "get", "job", "dcgm-migrate-apply", "--no-headers").split()
    assert row[1:3] == ["Running", "0/1"]
