"""Scrape paths (docs/monitoring.md) on plain data: annotations, ServiceMonitors, duplicates,
conflicts."""

from __future__ import annotations

from dataclasses import replace

from migrator.model import monitoring
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
    assert monitoring.duplicate_gate(b.gpucluster_snapshot(), EXPORTERS).ok


def test_servicemonitor_in_another_namespace_adds_a_path() -> None:
    sm = _sm("dcgm", {"app": "nvidia-dcgm-exporter-dra"}, namespaces=["gpu-operator"])
    snap = replace(b.gpucluster_snapshot(), service_monitors=(sm,))
    gate = monitoring.duplicate_gate(snap, EXPORTERS)
    assert not gate.ok and "servicemonitor/monitoring/dcgm" in gate.detail


def test_servicemonitor_without_namespace_selector_sees_only_its_own_namespace() -> None:
    sm = _sm("dcgm", {"app": "nvidia-dcgm-exporter-dra"})  # lives in "monitoring"
    snap = replace(b.gpucluster_snapshot(), service_monitors=(sm,))
    assert monitoring.duplicate_gate(snap, EXPORTERS).ok


def test_what_if_gate_ignores_duplicates_that_already_exist() -> None:
    sm = _sm("dcgm", {"app": "nvidia-dcgm-exporter-dra"}, namespaces=["gpu-operator"])
    before = replace(b.gpucluster_snapshot(), service_monitors=(sm,))
    unrelated = b.service("other", {"app": "nothing"}, owner=None)
    after = monitoring.with_service(before, unrelated)
    assert monitoring.duplicate_gate(after, EXPORTERS, before=before).ok
    assert not monitoring.duplicate_gate(after, EXPORTERS).ok


def test_conflicting_servicemonitors_are_reported() -> None:
    a = _sm("a", {"app": "nvidia-dcgm-exporter-dra"}, "15s", ["gpu-operator"])
    c = _sm("c", {"app": "nvidia-dcgm-exporter-dra"}, "30s", ["gpu-operator"])
    snap = replace(b.gpucluster_snapshot(), service_monitors=(a, c))
    found = monitoring.conflicting_monitors(snap)
    assert len(found) == 1 and "a, c" in found[0]
