"""How Prometheus and its Operator see one ServiceMonitor target (pure): its job's discovery role
(`promcfg.go`), its meta labels, and whether its relabelings keep it. Only `role: endpointslice`
sees the tool's shared slices (`model/sharing.py`); a consumer drops them with a relabeling."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from migrator.model import objects as o
from migrator.model.selectors import lenient
from migrator.model.slices import CONTROLLER_NAME, MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from migrator.model.snapshot import EndpointView, PodView, Snapshot

Obj = dict[str, Any]

# Kubernetes discovery roles a ServiceMonitor's job may use, and the Prometheus Operator's
# `ServiceDiscoveryRole` values (pkg/apis/monitoring/v1/prometheus_types.go).
ROLE_ENDPOINTS, ROLE_ENDPOINTSLICE = "endpoints", "endpointslice"
ENDPOINT_SLICE_ROLE = "EndpointSlice"
ENDPOINTSLICE_MIN_PROMETHEUS = (2, 21)  # promcfg.go: older Prometheus gets role endpoints


def role_flavor(value: Any) -> str:
    """promcfg.go `endpointRoleFlavor`: "EndpointSlice", else the endpoints role."""
    return ROLE_ENDPOINTSLICE if value == ENDPOINT_SLICE_ROLE else ROLE_ENDPOINTS


def _version(text: Any) -> tuple[int, int] | None:
    found = re.match(r"v?(\d+)\.(\d+)", str(text or ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


def prometheus_role(prometheus: Obj, monitor_role: Any = None) -> str:
    """The role a Prometheus gives a ServiceMonitor it selects: the monitor's own, else its
    `spec.serviceDiscoveryRole`; endpoints before 2.21 (`spec.version`)."""
    version = _version(o.dig(prometheus, "spec", "version"))
    if version is not None and version < ENDPOINTSLICE_MIN_PROMETHEUS:
        return ROLE_ENDPOINTS
    own = monitor_role if monitor_role is not None else o.dig(
        prometheus, "spec", "serviceDiscoveryRole")
    return role_flavor(own)


def selects_monitor(prometheus: Obj, monitor: Obj) -> bool:
    """Whether a Prometheus picks this ServiceMonitor up (resource_selector.go); a namespace
    selector other than null (its own namespace) is taken as covering it."""
    spec = prometheus.get("spec") or {}
    if not lenient(spec.get("serviceMonitorSelector")).matches(o.labels(monitor)):
        return False
    return (spec.get("serviceMonitorNamespaceSelector") is not None
            or o.meta(prometheus).get("namespace") == o.meta(monitor).get("namespace"))


def monitor_roles(snapshot: Snapshot, monitor: Obj) -> frozenset[str]:
    """The discovery roles a ServiceMonitor's jobs run with: one per Prometheus that selects it,
    or, when none it can see does, its own role or the default (endpoints)."""
    own = o.dig(monitor, "spec", "serviceDiscoveryRole")
    roles = {prometheus_role(p, own) for p in snapshot.prometheuses
             if selects_monitor(p, monitor)}
    return frozenset(roles or {role_flavor(own)})


def sanitize(name: str) -> str:
    """Prometheus' `strutil.SanitizeLabelName`: every character outside [a-zA-Z0-9_] is `_`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _object_labels(prefix: str, labels: Mapping[str, str]) -> dict[str, str]:
    return {f"{prefix}_{kind}_{sanitize(k)}": v if kind == "label" else "true"
            for k, v in labels.items() for kind in ("label", "labelpresent")}


def relabel_keeps(rules: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """Whether a target with these labels survives an endpoint's `relabelings`: `keep`/`drop`
    apply, `replace` sets its target label for later rules, other actions change nothing."""
    have = dict(labels)
    for rule in rules:
        action = str(rule.get("action") or "replace").lower()
        sources = rule.get("sourceLabels") or []
        value = str(rule.get("separator", ";")).join(have.get(str(s), "") for s in sources)
        try:
            found = re.match(f"^(?:{rule.get('regex', '(.*)')})$", value)  # anchored, as Prometheus
        except re.error:
            continue  # Prometheus would reject the config; here it changes nothing
        if action == "keep" and not found:
            return False
        if action == "drop" and found:
            return False
        if action == "replace" and found and rule.get("targetLabel"):
            have[str(rule["targetLabel"])] = _expand(found, str(rule.get("replacement", "$1")))
    return True


def _expand(found: re.Match[str], replacement: str) -> str:
    """`$1` / `${1}` in a relabel replacement, from the regex's groups."""
    def group(ref: re.Match[str]) -> str:
        n = int(ref.group(1))
        return (found.group(n) or "") if n <= (found.re.groups or 0) else ""
    return re.sub(r"\$\{?(\d+)\}?", group, replacement)


def target_labels(service: Obj, pod: PodView, role: str, port: Obj,
                  endpoint: EndpointView | None, namespace: str) -> dict[str, str]:
    """The meta labels a ServiceMonitor target of this pod carries under `role`
    (`endpointslice.go`), plus those the operator's own rules set first."""
    labels = {"__meta_kubernetes_namespace": namespace,
              "__meta_kubernetes_service_name": o.name(service),
              "__meta_kubernetes_pod_name": pod.name,
              "__meta_kubernetes_pod_node_name": pod.node,
              "__meta_kubernetes_pod_phase": pod.phase,
              "namespace": namespace, "service": o.name(service), "pod": pod.name,
              "job": o.name(service)}
    labels.update(_object_labels("__meta_kubernetes_service", o.labels(service)))
    labels.update(_object_labels("__meta_kubernetes_pod", pod.labels))
    if role == ROLE_ENDPOINTSLICE:
        managed_by = endpoint.managed_by if endpoint is not None else CONTROLLER_NAME
        slice_labels = {SERVICE_NAME_LABEL: o.name(service), MANAGED_BY_LABEL: managed_by}
        labels.update(_object_labels("__meta_kubernetes_endpointslice", slice_labels))
        labels["__meta_kubernetes_endpointslice_name"] = endpoint.slice if endpoint else ""
    else:
        labels["__meta_kubernetes_endpoints_name"] = o.name(service)
    kind = "endpointslice" if role == ROLE_ENDPOINTSLICE else "endpoint"
    labels[f"__meta_kubernetes_{kind}_port_name"] = str(port.get("name") or "")
    labels[f"__meta_kubernetes_{kind}_address_target_kind"] = "Pod"
    labels[f"__meta_kubernetes_{kind}_address_target_name"] = pod.name
    return labels


def drop_relabeling(managed_by: str) -> dict[str, Any]:
    """The relabeling that drops a ServiceMonitor's targets from EndpointSlices this writer
    manages (by the managed-by label Prometheus 2.46+ and VictoriaMetrics expose)."""
    return {"action": "drop",
            "sourceLabels": [f"__meta_kubernetes_endpointslice_label_{sanitize(MANAGED_BY_LABEL)}"],
            "regex": managed_by}
