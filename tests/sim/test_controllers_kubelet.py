"""The simulated kubelet: pod start time (default and per-node annotation), readiness fault
annotation, status shape, pod IPs, graceful termination, and pod GC for deleted nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dcgm_sim import kinds as sim_kinds
from dcgm_sim.controllers.kubelet import PODS_READY_ANNOTATION, START_SECONDS_ANNOTATION
from migrator.model import kinds
from tests.conftest import Bare

NS = "gpu-operator"
Obj = dict[str, Any]


def _pod(name: str, node: str, **spec: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "labels": {"app": "probe"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "img:1"}], **spec}}


def _conditions(pod: Obj) -> dict[str, str]:
    return {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}


def _get(bare: Bare, name: str) -> Obj | None:
    return bare.store.find(kinds.POD, NS, name)


def _phase(bare: Bare, name: str) -> str | None:
    return ((_get(bare, name) or {}).get("status") or {}).get("phase")


def _ip(bare: Bare, name: str) -> str | None:
    return ((_get(bare, name) or {}).get("status") or {}).get("podIP")


def _once(bare: Bare, name: str, holds: Callable[[Obj], object]) -> Obj:
    """The pod `name` as soon as `holds(pod)` is true (re-checked on every store change)."""
    def found() -> Obj | None:
        pod = _get(bare, name)
        return pod if pod is not None and holds(pod) else None

    pod = bare.wait_for(found)
    assert pod is not None  # wait_for answers only once the predicate's value is truthy
    return pod


def test_pod_starts_after_the_start_time_with_full_status(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1, stack="none", time_scale=0.01, pod_start_seconds=20.0)
    clock = bare.controllers.clock
    began = clock.now()
    bare.store.create(kinds.POD, _pod("p", "gpu-node-0001"))
    pending = _once(bare, "p", lambda pod: pod.get("status", {}).get("hostIP"))
    assert pending["status"]["phase"] == "Pending"
    assert _conditions(pending)["Ready"] == "False"
    running = _once(bare, "p", lambda pod: (pod.get("status") or {}).get("phase") == "Running")
    assert clock.now() - began >= 20  # simulated seconds
    st = running["status"]
    assert _conditions(running) == {"PodReadyToStartContainers": "True", "Initialized": "True",
                                    "Ready": "True", "ContainersReady": "True",
                                    "PodScheduled": "True"}
    assert st["podIP"] == st["podIPs"][0]["ip"] and st["podIP"].startswith("10.128.0.")
    assert st["hostIP"] == "192.168.0.2" and st["startTime"]
    cs = st["containerStatuses"][0]
    assert (cs["name"], cs["ready"], cs["started"], "running" in cs["state"]) == (
        "c", True, True, True)


def test_node_annotation_overrides_start_time(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2, stack="none", time_scale=0.01, pod_start_seconds=0.0)
    bare.annotate_node("gpu-node-0002", START_SECONDS_ANNOTATION, "1000")
    bare.store.create(kinds.POD, _pod("fast", "gpu-node-0001"))
    bare.store.create(kinds.POD, _pod("slow", "gpu-node-0002"))
    bare.wait_for(lambda: _phase(bare, "fast") == "Running")
    bare.controllers.clock.sleep(5)
    assert _phase(bare, "slow") == "Pending"
    assert not bare.controllers.idle()  # the slow start is pending work


def test_pods_ready_false_keeps_new_pods_running_but_not_ready(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=1, stack="none", time_scale=0.01)
    bare.annotate_node("gpu-node-0001", PODS_READY_ANNOTATION, "false")
    bare.store.create(kinds.POD, _pod("p", "gpu-node-0001"))
    bare.wait_for(lambda: _phase(bare, "p") == "Running")
    bare.wait_idle()
    pod = _get(bare, "p")
    assert pod is not None
    assert _conditions(pod)["Ready"] == "False"
    assert _conditions(pod)["ContainersReady"] == "False"
    assert pod["status"]["containerStatuses"][0]["started"] is True
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    bare.annotate_node("gpu-node-0001", PODS_READY_ANNOTATION, None)
    ready = _once(bare, "p", lambda pod: _conditions(pod).get("Ready") == "True")
    assert ready["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == started
    bare.annotate_node("gpu-node-0001", PODS_READY_ANNOTATION, "false")
    bare.store.create(kinds.POD, _pod("q", "gpu-node-0001"))
    bare.wait_for(lambda: _phase(bare, "q") == "Running")
    bare.wait_idle()
    assert _conditions(_get(bare, "q") or {})["Ready"] == "False"  # new pods never get Ready
    assert _conditions(_get(bare, "p") or {})["Ready"] == "True"  # a Ready pod stays Ready


def test_graceful_deletion_turns_not_ready_then_removes(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1, stack="none", time_scale=0.01, termination_seconds=10.0)
    bare.store.create(kinds.POD, _pod("p", "gpu-node-0001"))
    bare.wait_for(lambda: _conditions(_get(bare, "p") or {}).get("Ready") == "True")
    bare.store.mark_deleting(kinds.POD, NS, "p", 30)
    terminating = _once(bare, "p", lambda pod: _conditions(pod).get("Ready") == "False")
    assert terminating["metadata"]["deletionTimestamp"]
    assert terminating["status"]["phase"] == "Running"
    bare.wait_for(lambda: _get(bare, "p") is None)


def test_zero_grace_period_removes_at_once(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1, stack="none", time_scale=0.01, termination_seconds=1000.0)
    bare.store.create(kinds.POD, _pod("p", "gpu-node-0001"))
    bare.wait_for(lambda: _phase(bare, "p") == "Running")
    bare.store.mark_deleting(kinds.POD, NS, "p", 0)
    bare.wait_for(lambda: _get(bare, "p") is None, timeout=2)


def test_pod_ips_are_unique_per_node_and_reused_after_deletion(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=1, stack="none", time_scale=0.01)
    for name in ("a", "b", "c"):
        bare.store.create(kinds.POD, _pod(name, "gpu-node-0001"))
    bare.wait_for(lambda: all(_ip(bare, n) for n in "abc"))
    ips = {n: bare.get(kinds.POD, n, NS)["status"]["podIP"] for n in "abc"}
    assert len(set(ips.values())) == 3
    bare.store.delete(kinds.POD, NS, "a")
    bare.store.create(kinds.POD, _pod("d", "gpu-node-0001"))
    bare.wait_for(lambda: _ip(bare, "d"))
    assert bare.get(kinds.POD, "d", NS)["status"]["podIP"] == ips["a"]


def test_pods_of_a_deleted_node_are_collected_as_podgc_does(
        make_bare: Callable[..., Bare]) -> None:
    """PodGC `gcOrphaned`: a deleted node's pods are left as they were through the 40-s
    quarantine (no kubelet reports on them), then, 40 to 60 s after the node went, each is
    marked Failed with a DisruptionTarget condition and force-deleted; the DaemonSet stops
    counting the node at once."""
    bare = make_bare(nodes=2, time_scale=0.01)
    bare.wait_idle()
    clock = bare.controllers.clock
    on_node = [p["metadata"]["name"] for p in bare.store.list(kinds.POD, NS)[0]
               if p["spec"]["nodeName"] == "gpu-node-0002"]
    assert len(on_node) == 2
    seen: list[tuple[float, str, Obj]] = []

    def record(ev: Any) -> None:
        if ev.resource is sim_kinds.POD and ev.object["metadata"]["name"] in on_node:
            seen.append((clock.now(), ev.type, ev.object))

    bare.store.subscribe(record)
    gone_at = clock.now()
    bare.store.delete(kinds.NODE, None, "gpu-node-0002")
    bare.wait_for(lambda: all(_get(bare, n) is None for n in on_node))
    bare.wait_idle()
    bare.store.unsubscribe(record)
    for name in on_node:
        events = [(at - gone_at, kind, obj) for at, kind, obj in seen
                  if obj["metadata"]["name"] == name]
        assert [kind for _, kind, _ in events] == ["MODIFIED", "DELETED"], events
        after, _, marked = events[0]
        assert 40.0 <= after <= 62.0, after  # the quarantine, then the next 20-s loop
        assert marked["status"]["phase"] == "Failed"
        target = [c for c in marked["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert [(c["status"], c["reason"]) for c in target] == [("True", "DeletionByPodGC")]
        assert _conditions(marked)["Ready"] == "True"  # PodGC patches only phase and condition
    ds = bare.get(kinds.DAEMONSET, "nvidia-dcgm-dra")
    assert ds["status"]["desiredNumberScheduled"] == 1
    assert ds["status"]["numberAvailable"] == 1


def test_a_node_created_again_within_the_quarantine_keeps_its_pods(
        make_bare: Callable[..., Bare]) -> None:
    """PodGC GETs the node once the quarantine is over: one that exists again keeps its pods."""
    bare = make_bare(nodes=2, time_scale=0.01)
    bare.wait_idle()
    on_node = sorted(p["metadata"]["uid"] for p in bare.store.list(kinds.POD, NS)[0]
                     if p["spec"]["nodeName"] == "gpu-node-0002")
    node = bare.get(kinds.NODE, "gpu-node-0002")
    bare.store.delete(kinds.NODE, None, "gpu-node-0002")
    meta = {k: v for k, v in node["metadata"].items()
            if k not in ("uid", "resourceVersion", "creationTimestamp")}
    bare.store.create(kinds.NODE, {**node, "metadata": meta})
    bare.controllers.clock.sleep(70.0)  # past the quarantine and the loop after it
    bare.wait_idle()
    assert sorted(p["metadata"]["uid"] for p in bare.store.list(kinds.POD, NS)[0]
                  if p["spec"]["nodeName"] == "gpu-node-0002") == on_node


def test_a_stopped_kubelet_drops_its_pending_start(make_bare: Callable[..., Bare]) -> None:
    """Controllers share one loop thread; stopping one still ends its work (a pending pod
    start timer never fires) while the others keep running."""
    bare = make_bare(nodes=1, stack="none", time_scale=0.01, pod_start_seconds=2.0)
    bare.store.create(kinds.POD, _pod("p1", "gpu-node-0001"))
    bare.wait_for(lambda: _phase(bare, "p1") == "Pending")  # accepted; the start timer is set
    kubelet = bare.controllers.get("kubelet")
    assert kubelet is not None
    kubelet.stop()
    bare.wait_idle()
    bare.controllers.clock.sleep(4.0)  # twice the start time
    assert _phase(bare, "p1") == "Pending"
    daemonsets = bare.controllers.get("daemonset")
    assert daemonsets is not None and not daemonsets.stopped
