"""The simulated garbage collector: dependents of a deleted owner go (pods gracefully), objects
born with a missing owner go, a dependent with another live owner only loses the dangling
reference, and orphan propagation keeps the dependents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from migrator.model import kinds
from tests.conftest import Bare

NS = "gpu-operator"
DCGM = "nvidia-dcgm-dra"
Obj = dict[str, Any]


def _cm(name: str, owners: list[Obj]) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "ownerReferences": owners},
            "data": {"k": "v"}}


def _ref(obj: Obj, controller: bool = False) -> Obj:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
            "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
            "controller": controller}


def test_deleting_a_daemonset_removes_its_pods_and_revisions(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=3)
    pods = [p["metadata"]["name"] for p in bare.pods(DCGM)]
    bare.store.delete(kinds.DAEMONSET, NS, DCGM)
    marked = bare.wait_for(lambda: all(
        (bare.store.find(kinds.POD, NS, n) or {"metadata": {"deletionTimestamp": "gone"}})
        ["metadata"].get("deletionTimestamp") for n in pods))
    assert marked
    bare.wait_for(lambda: not bare.pods(DCGM))
    bare.wait_idle()
    assert not [r for r in bare.store.list(kinds.CONTROLLER_REVISION, NS)[0]
                if r["metadata"]["name"].startswith(f"{DCGM}-")]
    assert len(bare.pods("nvidia-dcgm-exporter-dra")) == 3  # the other DaemonSet is untouched


def test_deleting_a_service_removes_its_endpointslices(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2)
    bare.store.delete(kinds.SERVICE, NS, DCGM)
    bare.wait_for(lambda: not [s for s in bare.store.list(kinds.ENDPOINTSLICE, NS)[0]
                               if s["metadata"]["labels"]["kubernetes.io/service-name"] == DCGM])


def test_object_created_with_a_missing_owner_is_collected(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=1)
    ghost = {"apiVersion": "v1", "kind": "Service", "name": "ghost", "uid": "no-such-uid"}
    bare.store.create(kinds.CONFIGMAP, _cm("orphaned", [ghost]))
    bare.wait_for(lambda: bare.store.find(kinds.CONFIGMAP, NS, "orphaned") is None)


def test_dependent_with_a_live_owner_only_loses_the_dangling_reference(
    make_bare: Callable[..., Bare]
) -> None:
    bare = make_bare(nodes=1)
    dcgm = bare.get(kinds.SERVICE, DCGM)
    exporter = bare.get(kinds.SERVICE, "nvidia-dcgm-exporter-dra")
    bare.store.create(kinds.CONFIGMAP, _cm("shared", [_ref(dcgm), _ref(exporter)]))
    bare.store.delete(kinds.SERVICE, NS, DCGM)
    bare.wait_for(lambda: len(bare.get(kinds.CONFIGMAP, "shared")["metadata"]
                              ["ownerReferences"]) == 1)
    refs = bare.get(kinds.CONFIGMAP, "shared")["metadata"]["ownerReferences"]
    assert refs[0]["uid"] == exporter["metadata"]["uid"]


def test_orphan_propagation_keeps_the_dependents(make_bare: Callable[..., Bare]) -> None:
    bare = make_bare(nodes=2)
    ds = bare.get(kinds.DAEMONSET, DCGM)
    pods = sorted(p["metadata"]["name"] for p in bare.pods(DCGM))
    marked = dict(ds, metadata=dict(ds["metadata"], finalizers=["orphan"]))
    bare.store.update(kinds.DAEMONSET, marked)
    bare.store.delete(kinds.DAEMONSET, NS, DCGM)
    bare.wait_for(lambda: all(not p["metadata"].get("ownerReferences")
                              for p in bare.pods(DCGM)))
    bare.wait_idle()
    assert sorted(p["metadata"]["name"] for p in bare.pods(DCGM)) == pods
    assert not any(p["metadata"].get("deletionTimestamp") for p in bare.pods(DCGM))
