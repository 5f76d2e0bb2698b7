"""Plain-data builders for unit tests of planning and gates: snapshots without a server."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from migrator.model.snapshot import EndpointView, PodView, ServiceEndpoints, Snapshot

NS = "gpu-operator"
COMMON = {"dcgm": "nvidia.com/gpu-operator.dcgm",
          "exporter": "nvidia.com/gpu-operator.dcgm-exporter"}


def _container(daemonset: str) -> dict[str, Any]:
    """The main container as the operator renders it: its one declared port."""
    port = ({"name": "metrics", "containerPort": 9400} if "exporter" in daemonset
            else {"name": "dcgm", "containerPort": 5555})
    return {"name": daemonset, "image": f"nvcr.io/nvidia/{daemonset}:test", "ports": [port]}


def daemonset(name: str, *, labels: dict[str, str] | None = None,
              template_labels: dict[str, str] | None = None, desired: int = 3,
              updated: int | None = None, available: int | None = None,
              strategy: str = "RollingUpdate", owner: str | None = "GPUCluster",
              generation: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "generation": generation, "labels": {"app": name, **(labels or {})}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "gpu-cluster", "controller": True,
                                    "apiVersion": "nvidia.com/v1alpha1", "uid": "cr-uid"}]
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "updateStrategy": {"type": strategy},
                     "template": {"metadata": {"labels": {"app": name,
                                                          **(template_labels or {})}},
                                  "spec": {"containers": [_container(name)]}}},
            "status": {"observedGeneration": generation, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": desired if updated is None else updated,
                       "numberAvailable": desired if available is None else available}}


PORT_NAMES = {9400: "gpu-metrics", 5555: "dcgm"}  # as the operator's Services name them


def service(name: str, selector: dict[str, str], *, local: bool = False,
            owner: str | None = "GPUCluster", labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None, port: int = 9400) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}",
                            "labels": labels if labels is not None else {"app": name},
                            "annotations": annotations or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "gpu-cluster", "controller": True,
                                    "apiVersion": "nvidia.com/v1alpha1", "uid": "cr-uid"}]
    spec: dict[str, Any] = {"type": "ClusterIP", "clusterIP": "10.96.0.10",
                            "selector": selector,
                            "ports": [{"name": PORT_NAMES.get(port, "p"), "port": port,
                                       "targetPort": port,
                                       "protocol": "TCP", "nodePort": None}],
                            "internalTrafficPolicy": "Local" if local else "Cluster"}
    spec["ports"][0].pop("nodePort")
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def pods(ds: str, nodes: int, *, labels: dict[str, str] | None = None,
         ready: bool = True) -> list[PodView]:
    return [PodView(name=f"{ds}-{i}", uid=f"{ds}-uid-{i}", node=f"node-{i}",
                    labels={"app": ds, **(labels or {})}, ready=ready, deleting=False,
                    owner_kind="DaemonSet", owner_name=ds) for i in range(nodes)]


def endpoints_for(service_name: str, pod_views: list[PodView]) -> ServiceEndpoints:
    return ServiceEndpoints(service_name, tuple(
        EndpointView(p.name, p.node, p.ready, p.ready) for p in pod_views))


def gpucluster_snapshot(nodes: int = 3, *, labelled: bool = False, aliases: bool = False,
                        extra_services: list[dict[str, Any]] | None = None) -> Snapshot:
    lab_d = {COMMON["dcgm"]: "true"} if labelled else {}
    lab_e = {COMMON["exporter"]: "true"} if labelled else {}
    ds = {"nvidia-dcgm-dra": daemonset("nvidia-dcgm-dra", labels=lab_d, template_labels=lab_d,
                                       desired=nodes),
          "nvidia-dcgm-exporter-dra": daemonset("nvidia-dcgm-exporter-dra", labels=lab_e,
                                                template_labels=lab_e, desired=nodes)}
    pd = pods("nvidia-dcgm-dra", nodes, labels=lab_d)
    pe = pods("nvidia-dcgm-exporter-dra", nodes, labels=lab_e)
    svcs = {"nvidia-dcgm-dra": service("nvidia-dcgm-dra", {"app": "nvidia-dcgm-dra"},
                                       local=True, port=5555),
            "nvidia-dcgm-exporter-dra": service(
                "nvidia-dcgm-exporter-dra", {"app": "nvidia-dcgm-exporter-dra"},
                annotations={"prometheus.io/scrape": "true"})}
    eps = {"nvidia-dcgm-dra": endpoints_for("nvidia-dcgm-dra", pd),
           "nvidia-dcgm-exporter-dra": endpoints_for("nvidia-dcgm-exporter-dra", pe)}
    for svc in extra_services or []:
        svcs[svc["metadata"]["name"]] = svc
    gc = {"apiVersion": "nvidia.com/v1alpha1", "kind": "GPUCluster",
          "metadata": {"name": "gpu-cluster", "uid": "cr-uid", "generation": 1}}
    return Snapshot(NS, gpu_clusters=(gc,), daemonsets=ds, services=svcs, pods=(*pd, *pe),
                    endpoints=eps)


COMPONENT = "app.kubernetes.io/component"  # the shared-services release's component label


def shared_service(name: str, component: str) -> dict[str, Any]:
    """The shared-services release's Service of a stable name (plans/releases.yaml): its
    label, the component selector, a non-controller ownerReference, and the tool's markers it
    merged in when it adopted the alias."""
    svc = service(name, {COMPONENT: component}, owner=None, local=name == "nvidia-dcgm",
                  labels={"nvidia.com/shared-service": "true",
                          "app.kubernetes.io/managed-by": "dcgm-migrate"},
                  port=5555 if name == "nvidia-dcgm" else 9400,
                  annotations={} if name == "nvidia-dcgm" else {"prometheus.io/scrape": "true"})
    svc["metadata"]["ownerReferences"] = [{"kind": "GPUCluster", "name": "gpu-cluster",
                                           "uid": "cr-uid", "controller": False,
                                           "apiVersion": "nvidia.com/v1alpha1"}]
    return svc


def handed_over_snapshot() -> Snapshot:
    """A migrated GPUCluster cluster after the upgrade to the shared-services release: the -dra
    Services deleted, the DaemonSets re-rendered with the component label (the tool's common
    label dropped), the stable names the release's."""
    snap = gpucluster_snapshot()
    daemonsets, all_pods = {}, []
    for ds_name, comp in (("nvidia-dcgm-dra", "nvidia-dcgm"),
                          ("nvidia-dcgm-exporter-dra", "nvidia-dcgm-exporter")):
        daemonsets[ds_name] = daemonset(ds_name, labels={COMPONENT: comp},
                                        template_labels={COMPONENT: comp})
        all_pods += pods(ds_name, 3, labels={COMPONENT: comp})
    services = {n: shared_service(n, n) for n in ("nvidia-dcgm", "nvidia-dcgm-exporter")}
    endpoints = {n: endpoints_for(n, [p for p in all_pods if p.labels[COMPONENT] == n])
                 for n in services}
    return replace(snap, daemonsets=daemonsets, services=services, pods=tuple(all_pods),
                   endpoints=endpoints)
