"""Scrape paths (docs/monitoring.md) on plain data: annotations, ServiceMonitors, duplicates,
conflicts, discovery roles and relabelings."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from migrator.model import monitoring, scrapechecks
from migrator.model import monitoring as promdiscovery
from migrator.model.snapshot import EndpointView, ServiceEndpoints, Snapshot
from tests.helpers import builders as b

EXPORTERS = ["nvidia-dcgm-exporter-dra"]


def _sm(name: str, match: dict[str, str], interval: str = "15s",
        namespaces: list[str] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"selector": {"matchLabels": match},
                               "endpoints": [{"port": "gpu-metrics", "interval": interval}]}
    if namespaces is not None:
        spec["namespaceSelector"] = {"matchNames": namespaces}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
            "metadata": {"name": name, "namespace": "monitoring"}, "spec": spec}


def test_annotation_is_one_path_per_exporter_pod() -> None:
    paths = monitoring.scrape_paths(b.gpucluster_snapshot(), EXPORTERS)
    assert len(paths) == 3
    assert all([str(p) for p in v] == [
        "kubernetes-service-endpoints → Service/nvidia-dcgm-exporter-dra:9400"]
               for v in paths.values())
    assert scrapechecks.duplicate_gate(b.gpucluster_snapshot(), EXPORTERS).ok


def test_servicemonitor_in_another_namespace_adds_a_path() -> None:
    sm = _sm("dcgm", {"app": "nvidia-dcgm-exporter-dra"}, namespaces=["gpu-operator"])
    snap = replace(b.gpucluster_snapshot(), service_monitors=(sm,))
    gate = scrapechecks.duplicate_gate(snap, EXPORTERS)
    assert not gate.ok and "servicemonitor/monitoring/dcgm" in gate.detail


def test_servicemonitor_without_namespace_selector_sees_only_its_own_namespace() -> None:
    sm = _sm("dcgm", {"app": "nvidia-dcgm-exporter-dra"})  # lives in "monitoring"
    snap = replace(b.gpucluster_snapshot(), service_monitors=(sm,))
    assert scrapechecks.duplicate_gate(snap, EXPORTERS).ok


def test_what_if_gate_ignores_duplicates_that_already_exist() -> None:
    sm = _sm("dcgm", {"app": "nvidia-dcgm-exporter-dra"}, namespaces=["gpu-operator"])
    before = replace(b.gpucluster_snapshot(), service_monitors=(sm,))
    unrelated = b.service("other", {"app": "nothing"}, owner=None)
    after = monitoring.with_service(before, unrelated)
    assert scrapechecks.duplicate_gate(after, EXPORTERS, before=before).ok
    assert not scrapechecks.duplicate_gate(after, EXPORTERS).ok


def test_conflicting_servicemonitors_are_reported() -> None:
    a = _sm("a", {"app": "nvidia-dcgm-exporter-dra"}, "15s", ["gpu-operator"])
    c = _sm("c", {"app": "nvidia-dcgm-exporter-dra"}, "30s", ["gpu-operator"])
    snap = replace(b.gpucluster_snapshot(), service_monitors=(a, c))
    found = scrapechecks.conflicting_monitors(snap)
    assert len(found) == 1 and "a, c" in found[0]


# ---- discovery roles (docs/monitoring.md, "Discovery roles") ---------------------------------

CP_SM = "nvidia-dcgm-exporter"
SHARED_SLICE = "nvidia-dcgm-exporter-dcgm-migrate-0"


def _prometheus(role: str | None = None, *, selector: dict[str, Any] | None = None,
                namespace: str = "monitoring", ns_selector: dict[str, Any] | None = None,
                version: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"serviceMonitorSelector": {} if selector is None else selector,
                            "serviceMonitorNamespaceSelector": (
                                {} if ns_selector is None else ns_selector)}
    if role is not None:
        spec["serviceDiscoveryRole"] = role
    if version is not None:
        spec["version"] = version
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": f"p-{role}", "namespace": namespace}, "spec": spec}


def _mixed(*, relabelings: list[dict[str, Any]] | None = None,
           prometheuses: tuple[dict[str, Any], ...] = ()) -> Snapshot:
    """A GPUCluster exporter on 3 nodes next to the ClusterPolicy operator's
    `nvidia-dcgm-exporter` (annotated, its own ServiceMonitor, selecting only its own pods,
    none here), which the tool's shared EndpointSlice gives the GPUCluster pods; the
    GPUCluster's own ServiceMonitor on `-dra`."""
    base = b.gpucluster_snapshot()
    cp_svc = b.service(CP_SM, {"app": CP_SM}, owner="ClusterPolicy",
                       annotations={"prometheus.io/scrape": "true"})
    cp_sm = _sm(CP_SM, {"app": CP_SM}, namespaces=[b.NS])
    cp_sm["metadata"] = {"name": CP_SM, "namespace": b.NS, "ownerReferences": [
        {"kind": "ClusterPolicy", "name": "cluster-policy", "controller": True}]}
    if relabelings is not None:
        cp_sm["spec"]["endpoints"][0]["relabelings"] = relabelings  # type: ignore[index]
    dra_sm = _sm("nvidia-dcgm-exporter-dra", {"app": "nvidia-dcgm-exporter-dra"},
                 namespaces=[b.NS])
    dra_sm["metadata"] = {"name": "nvidia-dcgm-exporter-dra", "namespace": b.NS}
    dra_pods = [p for p in base.pods if p.owner_name == EXPORTERS[0]]
    shared = ServiceEndpoints(CP_SM, tuple(
        EndpointView(p.name, p.node, True, True, slice=SHARED_SLICE,
                     managed_by="dcgm-migrate") for p in dra_pods))
    return replace(base, services={**base.services, CP_SM: cp_svc},
                   endpoints={**base.endpoints, CP_SM: shared},
                   service_monitors=(cp_sm, dra_sm), prometheuses=prometheuses)


def test_role_flavor_and_a_prometheus_too_old_for_endpointslice() -> None:
    assert promdiscovery.role_flavor(None) == promdiscovery.ROLE_ENDPOINTS
    assert promdiscovery.role_flavor("Endpoints") == promdiscovery.ROLE_ENDPOINTS
    assert promdiscovery.role_flavor("EndpointSlice") == promdiscovery.ROLE_ENDPOINTSLICE
    assert promdiscovery.prometheus_role(_prometheus("EndpointSlice")) == "endpointslice"
    assert promdiscovery.prometheus_role(_prometheus("EndpointSlice", version="v2.20.1")) \
        == "endpoints"
    # the monitor's own role wins over the Prometheus'
    assert promdiscovery.prometheus_role(_prometheus("EndpointSlice"), "Endpoints") == "endpoints"


def test_effective_role_of_a_servicemonitor() -> None:
    snap = _mixed()
    sm = snap.service_monitors[0]
    assert promdiscovery.monitor_roles(snap, sm) == {"endpoints"}  # no Prometheus seen: default
    own = {**sm, "spec": {**sm["spec"], "serviceDiscoveryRole": "EndpointSlice"}}
    assert promdiscovery.monitor_roles(snap, own) == {"endpointslice"}
    sliced = replace(snap, prometheuses=(_prometheus("EndpointSlice"),))
    assert promdiscovery.monitor_roles(sliced, sm) == {"endpointslice"}
    assert promdiscovery.monitor_roles(sliced, own) == {"endpointslice"}
    both = replace(snap, prometheuses=(_prometheus("EndpointSlice"), _prometheus(None)))
    assert promdiscovery.monitor_roles(both, sm) == {"endpoints", "endpointslice"}
    # a null serviceMonitorSelector selects nothing; a null namespace selector only the
    # Prometheus' own namespace (the monitor is in gpu-operator): the default applies
    unselected = _prometheus("EndpointSlice")
    unselected["spec"]["serviceMonitorSelector"] = None
    other_ns = _prometheus("EndpointSlice")
    other_ns["spec"]["serviceMonitorNamespaceSelector"] = None
    wrong_labels = _prometheus("EndpointSlice", selector={"matchLabels": {"release": "x"}})
    for prom in (unselected, other_ns, wrong_labels):
        assert promdiscovery.monitor_roles(replace(snap, prometheuses=(prom,)), sm) == {"endpoints"}
    # the monitor's own role overrides each selecting Prometheus' role
    own_ep = {**sm, "spec": {**sm["spec"], "serviceDiscoveryRole": "Endpoints"}}
    assert promdiscovery.monitor_roles(sliced, own_ep) == {"endpoints"}


def test_the_tools_slices_count_under_endpointslice_and_not_under_endpoints() -> None:
    # role endpoints: the Endpoints object of nvidia-dcgm-exporter follows its selector, so a
    # GPUCluster pod has its annotation path and the GPUCluster ServiceMonitor: possible only
    paths = monitoring.scrape_paths(_mixed(), EXPORTERS)
    assert all(sorted(p.via for p in v) == ["annotation", "servicemonitor/gpu-operator/"
                                            "nvidia-dcgm-exporter-dra"] for v in paths.values())
    assert scrapechecks.certain(paths) == {}
    # role endpointslice: the ClusterPolicy monitor reads the tool's slice as well
    sliced = _mixed(prometheuses=(_prometheus("EndpointSlice"),))
    paths = monitoring.scrape_paths(sliced, EXPORTERS)
    dups = scrapechecks.certain(paths)
    assert sorted(dups) == sorted(paths) and len(dups) == 3
    through = [p for p in next(iter(dups.values())) if p.slice]
    assert [str(p) for p in through] == [
        "servicemonitor/gpu-operator/nvidia-dcgm-exporter → Service/nvidia-dcgm-exporter:9400"
        f" (role endpointslice, EndpointSlice/{SHARED_SLICE})"]
    # the annotation job stays role endpoints (the chart's): no third path
    assert sum(p.via == "annotation" for p in next(iter(paths.values()))) == 1


def test_a_prometheus_per_role_gives_the_path_only_its_role_yields() -> None:
    snap = _mixed(prometheuses=(_prometheus("EndpointSlice"), _prometheus(None)))
    found = monitoring.scrape_paths(snap, EXPORTERS)["nvidia-dcgm-exporter-dra-0"]
    roles = {p.via: (p.role, p.slice) for p in found}
    assert roles == {"annotation": ("", ""),
                     "servicemonitor/gpu-operator/nvidia-dcgm-exporter-dra": ("", ""),
                     "servicemonitor/gpu-operator/nvidia-dcgm-exporter": (
                         "endpointslice", SHARED_SLICE)}


def test_the_drop_relabeling_takes_the_tools_slices_out() -> None:
    rule = promdiscovery.drop_relabeling("dcgm-migrate")
    assert rule == {"action": "drop", "sourceLabels": [
        "__meta_kubernetes_endpointslice_label_endpointslice_kubernetes_io_managed_by"],
        "regex": "dcgm-migrate"}
    by_name = {"action": "drop", "sourceLabels": ["__meta_kubernetes_endpointslice_name"],
               "regex": "nvidia-dcgm-exporter-dcgm-migrate-[0-9]+"}
    for rules in ([rule], [by_name]):
        snap = _mixed(relabelings=rules, prometheuses=(_prometheus("EndpointSlice"),))
        paths = monitoring.scrape_paths(snap, EXPORTERS)
        assert scrapechecks.certain(paths) == {}
        assert all(not p.slice for v in paths.values() for p in v)
    # a drop matching nothing, or a keep on the controller's slices only, keeps / drops as
    # Prometheus would
    other = {**rule, "regex": "someone-else"}
    snap = _mixed(relabelings=[other], prometheuses=(_prometheus("EndpointSlice"),))
    assert len(scrapechecks.certain(monitoring.scrape_paths(snap, EXPORTERS))) == 3
    keep_own = {"action": "keep", "sourceLabels": [rule["sourceLabels"][0]],
                "regex": "endpointslice-controller.k8s.io"}
    snap = _mixed(relabelings=[keep_own], prometheuses=(_prometheus("EndpointSlice"),))
    assert scrapechecks.certain(monitoring.scrape_paths(snap, EXPORTERS)) == {}


def test_relabel_keeps_applies_keep_drop_and_replace_in_order() -> None:
    labels = {"__meta_kubernetes_pod_name": "p-1", "service": "s"}
    assert promdiscovery.relabel_keeps([], labels)
    assert not promdiscovery.relabel_keeps(
        [{"action": "keep", "sourceLabels": ["missing"], "regex": ".+"}], labels)
    assert promdiscovery.relabel_keeps(
        [{"action": "keep", "sourceLabels": ["missing"], "regex": ""}], labels)
    replace_then_drop = [
        {"sourceLabels": ["__meta_kubernetes_pod_name"], "regex": "p-(.*)",
         "targetLabel": "idx", "replacement": "n${1}"},
        {"action": "Drop", "sourceLabels": ["idx", "service"], "separator": "/",
         "regex": "n1/s"}]
    assert not promdiscovery.relabel_keeps(replace_then_drop, labels)


def test_the_fix_names_the_clusterpolicy_field_with_the_relabeling() -> None:
    snap = _mixed(prometheuses=(_prometheus("EndpointSlice"),))
    fix = scrapechecks.shared_slice_fix(snap, scrapechecks.certain(
        monitoring.scrape_paths(snap, EXPORTERS)))
    assert ("add {action: drop, sourceLabels: [__meta_kubernetes_endpointslice_label_"
            "endpointslice_kubernetes_io_managed_by], regex: dcgm-migrate} to "
            "ClusterPolicy/cluster-policy spec.dcgmExporter.serviceMonitor.relabelings") in fix
    assert "ServiceMonitor gpu-operator/nvidia-dcgm-exporter" in fix
    # no duplicate through a foreign slice: no such fix
    plain = _mixed()
    assert scrapechecks.shared_slice_fix(plain, scrapechecks.certain(
        monitoring.scrape_paths(plain, EXPORTERS))) == ""
