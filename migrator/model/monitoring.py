"""Scrape targets of exporter pods (docs/monitoring.md): what real Prometheus discovery makes of
the annotations, ServiceMonitors and PodMonitors in the cluster, one `ScrapePath` per target.

Annotation discovery is modelled on the de-facto standard configuration, the
prometheus-community `prometheus` chart's default jobs, over Prometheus' Kubernetes discovery
(`discovery/kubernetes/endpoints.go`, `pod.go`):

- `kubernetes-service-endpoints` (`role: endpoints`) keeps Services annotated
  `prometheus.io/scrape: "true"`; `-slow` keeps `prometheus.io/scrape_slow: "true"` (and the
  first job drops those). Each pod the Service lists gives one target per endpoint port, plus
  one per container port no endpoint port covers; `prometheus.io/port` rewrites every address
  to that port, and targets whose labels end up identical are one target.
- `kubernetes-pods` (`role: pod`) keeps pods annotated the same way, drops Pending, Succeeded
  and Failed pods, and gives one target per declared container port and one port-free target
  per container (init containers included) that declares none; `prometheus.io/port` again
  collapses them.

The Prometheus Operator makes one job per ServiceMonitor endpoint (`serviceMonitor/<ns>/<name>/
<i>`) over the Services it selects, and one per PodMonitor endpoint over the pods it selects,
each keeping the port it names.

A ServiceMonitor's job discovers with `role: endpoints` or `role: endpointslice`
(prometheus-operator `pkg/prometheus/promcfg.go`, `generateServiceMonitorConfig` /
`endpointRoleFlavor`): the monitor's own `spec.serviceDiscoveryRole` when set, else that of the
Prometheus that selects it (`Prometheus.spec.serviceDiscoveryRole`, default Endpoints; Prometheus
older than 2.21 always endpoints). Monitors several Prometheuses select with different roles get
both; monitors no visible Prometheus selects get the default. The roles see different pods:

- `role: endpoints` reads the core/v1 Endpoints object, which the endpoints controller fills
  from the Service's selector alone: EndpointSlices someone else writes (the tool's shared
  slices, `model/sharing.py`) are never mirrored into it;
- `role: endpointslice` reads every EndpointSlice and joins it to the Service named by its
  `kubernetes.io/service-name` label (Prometheus `discovery/kubernetes/endpointslice.go`), so
  the tool's slices of `nvidia-dcgm-exporter` put the GPUCluster pods behind the ClusterPolicy
  operator's ServiceMonitor as well.

The endpoint's `relabelings` run after the operator's own keep rules: a `keep`/`drop` on the
target's meta labels (`__meta_kubernetes_endpointslice_name`, `__meta_kubernetes_endpointslice_
label_<label>`, service, pod and port labels) is honoured here (other actions are not modelled),
which is how a consumer drops the tool's slices from a monitor (docs/monitoring.md).

Two targets of one mechanism (annotation jobs, or the Prometheus Operator's) are a certain
duplicate: whichever Prometheus reads that mechanism scrapes the pod twice. An annotation target
plus an operator target is a duplicate only for a Prometheus that uses both (annotation
discovery is a hand-written scrape config; the Prometheus Operator reads only its monitors),
which the tool cannot see: it is reported as a possible duplicate. The what-if gates of phases 2
and 3 count every target (the tool never creates even a possible duplicate); the verdict fails
on certain ones and on a Ready exporter pod that no target reaches. ServiceMonitors that select
the same Service with different endpoint settings are a conflict. All are reported, never
resolved here.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from migrator.model import objects as o
from migrator.model.gates import GateResult, service_selects
from migrator.model.selectors import NOTHING, Selector, SelectorError, from_label_selector
from migrator.model.snapshot import EndpointView, PodView, Snapshot

Obj = dict[str, Any]


ANNOTATION, OPERATOR = "annotation", "prometheus-operator"
SCRAPE, SCRAPE_SLOW = "prometheus.io/scrape", "prometheus.io/scrape_slow"
PORT = "prometheus.io/port"
SERVICE_JOB, POD_JOB = "kubernetes-service-endpoints", "kubernetes-pods"
# The endpoints controller keeps at most this many addresses in one Endpoints object and marks
# it `endpoints.kubernetes.io/over-capacity: truncated`: `role: endpoints` discovery then misses
# the rest (upstream pkg/controller/endpoint, maxCapacity).
ENDPOINTS_CAPACITY = 1000
NOT_LISTED_PHASES = ("Pending", "Succeeded", "Failed", "Completed")
# Kubernetes discovery roles a ServiceMonitor's job may use, and the Prometheus Operator's
# `ServiceDiscoveryRole` values (pkg/apis/monitoring/v1/prometheus_types.go).
ROLE_ENDPOINTS, ROLE_ENDPOINTSLICE = "endpoints", "endpointslice"
ENDPOINT_SLICE_ROLE = "EndpointSlice"
ENDPOINTSLICE_MIN_PROMETHEUS = (2, 21)  # promcfg.go: older Prometheus gets role endpoints
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_MANAGED_BY = "endpointslice-controller.k8s.io"  # the EndpointSlice controller's


@dataclass(frozen=True)
class ScrapePath:
    """One scrape target that reaches a pod."""

    via: str  # "annotation", "servicemonitor/<ns>/<name>" or "podmonitor/<ns>/<name>"
    service: str  # the Service the target is discovered through; "" for a pod-level target
    job: str = ""  # the scrape job that holds it
    port: str = ""  # the target's port after relabelling ("" for a port-free target)
    # The one discovery role that yields it ("" when every role its monitor has does; always
    # endpointslice through a slice), and the EndpointSlice not made by the EndpointSlice
    # controller it comes from ("": the Service's own endpoints), e.g. the tool's
    # `nvidia-dcgm-exporter-dcgm-migrate-0`.
    role: str = ""
    slice: str = ""

    def __str__(self) -> str:
        through = f"Service/{self.service}" if self.service else "pod annotation"
        where = f":{self.port}" if self.port else ""
        how = f" (role {self.role}, EndpointSlice/{self.slice})" if self.slice else (
            f" (role {self.role})" if self.role else "")
        return f"{self.job if self.via == ANNOTATION else self.via} → {through}{where}{how}"

    @property
    def mechanism(self) -> str:
        """The discovery a Prometheus must use for this path: annotation jobs or the
        Prometheus Operator (ServiceMonitors and PodMonitors)."""
        return ANNOTATION if self.via == ANNOTATION else OPERATOR


def annotation_job(annotations: Mapping[str, str], base: str) -> str | None:
    """The chart job that keeps an object with these annotations (regex `true`, anchored)."""
    if annotations.get(SCRAPE_SLOW) == "true":
        return f"{base}-slow"
    if annotations.get(SCRAPE) == "true":
        return base
    return None


def _relabelled(annotations: Mapping[str, str], ports: Iterable[str]) -> list[str]:
    """The distinct target ports once `prometheus.io/port` (digits only) rewrote them."""
    wanted = annotations.get(PORT, "")
    found = sorted(set(ports))
    if wanted.isdigit() and found:
        return [wanted]
    return found


def _containers(snapshot: Snapshot, pod: PodView, *, init: bool) -> list[Obj]:
    """The pod's containers, from its DaemonSet's template (pods run the template)."""
    ds = snapshot.daemonsets.get(pod.owner_name or "") if pod.owner_kind == "DaemonSet" else None
    spec = o.dig(ds, "spec", "template", "spec") or {}
    found = list(spec.get("containers") or [])
    if init:
        found += list(spec.get("initContainers") or [])
    return found


def _container_ports(containers: Iterable[Obj]) -> list[Obj]:
    return [p for c in containers for p in c.get("ports") or []]


def _resolve(port: Obj, container_ports: Iterable[Obj]) -> int | None:
    """A Service port's targetPort for this pod (a name resolves against container ports)."""
    target = port.get("targetPort", port.get("port"))
    if target is None:
        return None
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    protocol = port.get("protocol") or "TCP"
    return next((int(p["containerPort"]) for p in container_ports
                 if p.get("name") == target and (p.get("protocol") or "TCP") == protocol), None)


def listed(snapshot: Snapshot, service: Obj,
           among: Iterable[PodView] | None = None) -> list[PodView]:
    """The pods (of `among`, default all) a Service's Endpoints/EndpointSlices list (selected,
    not terminal, started; being deleted only with `publishNotReadyAddresses`)."""
    publish = bool(o.dig(service, "spec", "publishNotReadyAddresses"))
    return [p for p in (snapshot.pods if among is None else among)
            if service_selects(service, p.labels) and p.node
            and p.phase not in NOT_LISTED_PHASES and (publish or not p.deleting)]


def _service_targets(snapshot: Snapshot, service: Obj, pod: PodView) -> list[ScrapePath]:
    job = annotation_job(o.annotations_of(service), SERVICE_JOB)
    if job is None:
        return []
    cports = _container_ports(_containers(snapshot, pod, init=False))
    seen = {_resolve(p, cports) for p in o.dig(service, "spec", "ports") or []}
    seen.discard(None)
    ports = [str(n) for n in seen]
    ports += [str(p["containerPort"]) for p in cports if int(p["containerPort"]) not in seen]
    return [ScrapePath(ANNOTATION, o.name(service), job, port)
            for port in _relabelled(o.annotations_of(service), ports)]


def _pod_targets(snapshot: Snapshot, pod: PodView) -> list[ScrapePath]:
    job = annotation_job(pod.scrape_annotations, POD_JOB)
    if job is None or pod.phase in NOT_LISTED_PHASES or not pod.node:
        return []
    containers = _containers(snapshot, pod, init=True)
    ports = [str(p["containerPort"]) for c in containers for p in c.get("ports") or []]
    ports += ["" for c in containers if not c.get("ports")]
    return [ScrapePath(ANNOTATION, "", job, port)
            for port in _relabelled(pod.scrape_annotations, ports)]


def _sm_ports(service: Obj, ep: Obj) -> list[Obj]:
    """The Service ports a ServiceMonitor endpoint keeps (`port` by name, `targetPort`, or all).
    The tool's slices name their ports as the Service does, so this holds under either role."""
    svc_ports = o.dig(service, "spec", "ports") or []
    if "port" in ep:
        return [p for p in svc_ports if p.get("name") == ep["port"]]
    if "targetPort" in ep:
        return [p for p in svc_ports
                if str(p.get("targetPort", p.get("port"))) == str(ep["targetPort"])]
    return list(svc_ports)


# ---- discovery roles -------------------------------------------------------------------------

def role_flavor(value: Any) -> str:
    """promcfg.go `endpointRoleFlavor`: "EndpointSlice" is the endpointslice role; unset or
    "Endpoints" (anything else) the endpoints role."""
    return ROLE_ENDPOINTSLICE if value == ENDPOINT_SLICE_ROLE else ROLE_ENDPOINTS


def _version(text: Any) -> tuple[int, int] | None:
    found = re.match(r"v?(\d+)\.(\d+)", str(text or ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


def prometheus_role(prometheus: Obj, monitor_role: Any = None) -> str:
    """The role a Prometheus gives a ServiceMonitor it selects: the monitor's own
    `serviceDiscoveryRole` if set, else its `spec.serviceDiscoveryRole`; endpoints for a
    Prometheus older than 2.21 (`spec.version`), which has no endpointslice role."""
    version = _version(o.dig(prometheus, "spec", "version"))
    if version is not None and version < ENDPOINTSLICE_MIN_PROMETHEUS:
        return ROLE_ENDPOINTS
    own = monitor_role if monitor_role is not None else o.dig(
        prometheus, "spec", "serviceDiscoveryRole")
    return role_flavor(own)


def selects_monitor(prometheus: Obj, monitor: Obj) -> bool:
    """Whether a Prometheus picks this ServiceMonitor up (resource_selector.go): its
    `serviceMonitorSelector` (null: none; empty: all) matches the monitor's labels, and its
    `serviceMonitorNamespaceSelector` (null: its own namespace) covers the monitor's namespace.
    A non-empty namespace selector is taken as covering it: namespace labels are not read."""
    spec = prometheus.get("spec") or {}
    selector = spec.get("serviceMonitorSelector")
    if selector is None:
        return False
    try:
        if not from_label_selector(selector).matches(o.labels(monitor)):
            return False
    except SelectorError:
        return False
    if spec.get("serviceMonitorNamespaceSelector") is None:
        return o.meta(prometheus).get("namespace") == o.meta(monitor).get("namespace")
    return True


def monitor_roles(snapshot: Snapshot, monitor: Obj) -> frozenset[str]:
    """The discovery roles a ServiceMonitor's jobs run with: one per Prometheus that selects
    it (they may differ), or, when no Prometheus it can see does, its own role or the default
    (the tool may not see the Prometheus CRs: the Prometheus Operator's default is endpoints)."""
    own = o.dig(monitor, "spec", "serviceDiscoveryRole")
    roles = {prometheus_role(p, own) for p in snapshot.prometheuses
             if selects_monitor(p, monitor)}
    return frozenset(roles or {role_flavor(own)})


# ---- relabelings -----------------------------------------------------------------------------

def sanitize(name: str) -> str:
    """Prometheus' `strutil.SanitizeLabelName`: every character outside [a-zA-Z0-9_] is `_`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _object_labels(prefix: str, labels: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for k, v in labels.items():
        out[f"{prefix}_label_{sanitize(k)}"] = v
        out[f"{prefix}_labelpresent_{sanitize(k)}"] = "true"
    return out


def _regex(pattern: str) -> re.Pattern[str]:
    """A relabel regex, anchored at both ends as Prometheus anchors it (`re` keeps compiled
    patterns itself: no cache of ours)."""
    return re.compile(f"^(?:{pattern})$")


def relabel_keeps(rules: Iterable[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """Whether a target with these labels survives a ServiceMonitor endpoint's `relabelings`
    (the camelCase RelabelConfig of the Prometheus Operator): `keep`/`drop` are applied,
    `replace` sets its target label so a later rule sees it; other actions leave the labels
    as they are here. A label that is absent reads as ""."""
    have = dict(labels)
    for rule in rules:
        action = str(rule.get("action") or "replace").lower()
        sources = rule.get("sourceLabels") or []
        value = str(rule.get("separator", ";")).join(have.get(str(s), "") for s in sources)
        try:
            found = _regex(str(rule.get("regex", "(.*)"))).match(value)
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
    """The meta labels a ServiceMonitor target of this pod carries under `role`, as Prometheus'
    Kubernetes discovery sets them (`endpoints.go`, `endpointslice.go`; slice labels and name
    from `addObjectMetaLabels`), plus the target labels the Prometheus Operator's own rules set
    before the endpoint's relabelings run (namespace, service, pod, job)."""
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
        managed_by = endpoint.managed_by if endpoint is not None else CONTROLLER_MANAGED_BY
        slice_labels = {SERVICE_NAME_LABEL: o.name(service), MANAGED_BY_LABEL: managed_by}
        labels.update(_object_labels("__meta_kubernetes_endpointslice", slice_labels))
        labels["__meta_kubernetes_endpointslice_name"] = endpoint.slice if endpoint else ""
        labels["__meta_kubernetes_endpointslice_port_name"] = str(port.get("name") or "")
        labels["__meta_kubernetes_endpointslice_address_target_kind"] = "Pod"
        labels["__meta_kubernetes_endpointslice_address_target_name"] = pod.name
    else:
        labels["__meta_kubernetes_endpoints_name"] = o.name(service)
        labels["__meta_kubernetes_endpoint_port_name"] = str(port.get("name") or "")
        labels["__meta_kubernetes_endpoint_address_target_kind"] = "Pod"
        labels["__meta_kubernetes_endpoint_address_target_name"] = pod.name
    return labels


def shared_members(snapshot: Snapshot, service: Obj,
                   pods: Iterable[PodView]) -> dict[str, EndpointView]:
    """Pods (of `pods`) that EndpointSlices not made by the EndpointSlice controller list for
    this Service, e.g. the tool's shared slices, by pod name: what `role: endpointslice` adds
    to the Service's own endpoints (`role: endpoints` never sees them)."""
    names = {p.name for p in pods}
    return {e.pod: e for e in snapshot.endpoints_of(o.name(service)).endpoints
            if e.pod in names and e.slice and e.managed_by != CONTROLLER_MANAGED_BY}


def _sm_paths(snapshot: Snapshot, service: Obj, sm: Obj,
              pods: list[PodView]) -> dict[str, list[ScrapePath]]:
    """Every target of one ServiceMonitor that reaches these pods through this Service, under
    each role the monitor has. A target every role yields is one path; one only a role yields
    names that role (and the foreign slice it comes through)."""
    roles = sorted(monitor_roles(snapshot, sm))
    via = f"servicemonitor/{o.meta(sm).get('namespace')}/{o.name(sm)}"
    own = {p.name for p in listed(snapshot, service, pods)}
    shared = shared_members(snapshot, service, pods) if ROLE_ENDPOINTSLICE in roles else {}
    by_name = {e.pod: e for e in snapshot.endpoints_of(o.name(service)).endpoints
               if e.pod and e.managed_by in ("", CONTROLLER_MANAGED_BY)}
    found: dict[str, dict[tuple[str, str], tuple[set[str], str]]] = {}
    for role in roles:
        for pod in pods:
            if pod.name in own:  # the Service's own endpoints, under either role
                endpoint = by_name.get(pod.name)
            elif role == ROLE_ENDPOINTSLICE and pod.name in shared:
                endpoint = shared[pod.name]
            else:
                continue
            for i, ep in enumerate(o.dig(sm, "spec", "endpoints") or []):
                for port in _sm_ports(service, ep):
                    rules = ep.get("relabelings") or []
                    if rules and not relabel_keeps(rules, target_labels(
                            service, pod, role, port, endpoint, snapshot.namespace)):
                        continue
                    key = (f"serviceMonitor/{via.split('/', 1)[1]}/{i}",
                           str(port.get("targetPort", port.get("port"))))
                    seen, slice_ = found.setdefault(pod.name, {}).get(key, (set(), ""))
                    foreign = endpoint.slice if (pod.name not in own and endpoint) else ""
                    found[pod.name][key] = (seen | {role}, slice_ or foreign)
    return {pod: [ScrapePath(via, o.name(service), job, port, ROLE_ENDPOINTSLICE if slice_ else
                             "" if len(seen) == len(roles) else next(iter(seen)), slice_)
                  for (job, port), (seen, slice_) in paths.items()]
            for pod, paths in found.items()}


def _pm_targets(snapshot: Snapshot, pod: PodView, pm: Obj) -> list[ScrapePath]:
    """One target per PodMonitor endpoint that keeps a container port of the pod."""
    via = f"podmonitor/{o.meta(pm).get('namespace')}/{o.name(pm)}"
    cports = _container_ports(_containers(snapshot, pod, init=False))
    out = []
    for i, ep in enumerate(o.dig(pm, "spec", "podMetricsEndpoints") or []):
        if "port" in ep:
            kept = [p for p in cports if p.get("name") == ep["port"]]
        elif "targetPort" in ep:
            kept = [p for p in cports if str(ep["targetPort"]) in (
                str(p.get("containerPort")), p.get("name"))]
        else:
            kept = list(cports)
        out += [ScrapePath(via, "", f"podMonitor/{via.split('/', 1)[1]}/{i}",
                           str(p.get("containerPort"))) for p in kept]
    return out


def _monitor_namespace(monitor: Obj, namespace: str) -> bool:
    """A monitor's `namespaceSelector` covers the namespace (empty: its own namespace)."""
    ns_sel = o.dig(monitor, "spec", "namespaceSelector") or {}
    if ns_sel.get("any"):
        return True
    names = ns_sel.get("matchNames") or []
    if names:
        return namespace in names
    return o.meta(monitor).get("namespace") == namespace


def _monitor_selector(monitor: Obj) -> Selector:
    """`spec.selector` is a LabelSelector value, not a pointer, in prometheus-operator: absent
    means empty, which selects everything. One Kubernetes would reject selects nothing (the
    operator skips that monitor)."""
    try:
        return from_label_selector(o.dig(monitor, "spec", "selector") or {})
    except SelectorError:
        return NOTHING


def monitors_of(snapshot: Snapshot, service: Obj) -> list[Obj]:
    """ServiceMonitors whose namespaceSelector and selector match the Service."""
    return [sm for sm in snapshot.service_monitors
            if _monitor_namespace(sm, snapshot.namespace)
            and _monitor_selector(sm).matches(o.labels(service))]


def exporter_pods(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[PodView]:
    names = set(daemonsets)
    return [p for p in snapshot.pods
            if p.owner_kind == "DaemonSet" and p.owner_name in names and not p.deleting]


def scrape_paths(snapshot: Snapshot, daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Every scrape target reaching each exporter pod, keyed by pod name (computed once per
    snapshot: it is immutable, and a report asks for it several times)."""
    names = tuple(sorted(set(daemonsets)))
    key = ("scrape_paths", names)
    if key not in snapshot.memo:
        snapshot.memo[key] = _scrape_paths(snapshot, names)
    found: dict[str, list[ScrapePath]] = snapshot.memo[key]
    return {pod: list(paths) for pod, paths in found.items()}


def _scrape_paths(snapshot: Snapshot, daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    pods = exporter_pods(snapshot, daemonsets)
    out: dict[str, list[ScrapePath]] = {p.name: _pod_targets(snapshot, p) for p in pods}
    for svc in snapshot.services.values():
        sms = monitors_of(snapshot, svc)
        if annotation_job(o.annotations_of(svc), SERVICE_JOB) is not None:
            per_daemonset: dict[str | None, list[ScrapePath]] = {}  # pods run their template
            for pod in listed(snapshot, svc, pods):
                if pod.owner_name not in per_daemonset:
                    per_daemonset[pod.owner_name] = _service_targets(snapshot, svc, pod)
                out[pod.name] += per_daemonset[pod.owner_name]
        for sm in sms:
            for name, found in _sm_paths(snapshot, svc, sm, pods).items():
                out[name] += found
    pms = [pm for pm in snapshot.pod_monitors if _monitor_namespace(pm, snapshot.namespace)]
    for pm in pms:
        selector = _monitor_selector(pm)
        for pod in pods:
            if selector.matches(pod.labels):
                out[pod.name] += _pm_targets(snapshot, pod, pm)
    return out


def drop_relabeling(managed_by: str) -> dict[str, Any]:
    """The relabeling that drops a ServiceMonitor's targets from EndpointSlices this writer
    manages (the slice's `endpointslice.kubernetes.io/managed-by` label, which Prometheus 2.46+
    and VictoriaMetrics expose as `__meta_kubernetes_endpointslice_label_endpointslice_
    kubernetes_io_managed_by`). Under `role: endpoints` the label is absent and it drops
    nothing, so it is right under either role."""
    return {"action": "drop",
            "sourceLabels": [f"__meta_kubernetes_endpointslice_label_{sanitize(MANAGED_BY_LABEL)}"],
            "regex": managed_by}


def _flow(rule: Mapping[str, Any]) -> str:
    """A relabeling as one line of YAML flow style."""
    return "{" + ", ".join(f"{k}: [{', '.join(v)}]" if isinstance(v, list) else f"{k}: {v}"
                           for k, v in rule.items()) + "}"


def shared_slice_fix(snapshot: Snapshot, duplicated: Mapping[str, list[ScrapePath]]) -> str:
    """The consumer's change for duplicates that come through foreign EndpointSlices (the
    tool's shared slices) under `role: endpointslice`, naming where to put the drop relabeling:
    the ClusterPolicy field its operator renders into its ServiceMonitor
    (`spec.dcgmExporter.serviceMonitor.relabelings`, copied into the monitor's first endpoint
    and reverted there if edited by hand), or a hand-made monitor's own endpoints. "" when no
    duplicate comes through such a slice."""
    fixes: dict[str, str] = {}
    for found in duplicated.values():
        for path in found:
            if not path.slice or path.via in fixes:
                continue
            ns, name = path.via.split("/", 1)[1].split("/", 1)
            sm = next((m for m in snapshot.service_monitors if o.name(m) == name
                       and o.meta(m).get("namespace") == ns), {})
            view = next((e for e in snapshot.endpoints_of(path.service).endpoints
                         if e.slice == path.slice), None)
            rule = _flow(drop_relabeling(view.managed_by if view else "dcgm-migrate"))
            owner = o.controller_owner(sm) or {}
            if owner.get("kind") == "ClusterPolicy":
                fixes[path.via] = (
                    f"add {rule} to ClusterPolicy/{owner.get('name')} "
                    "spec.dcgmExporter.serviceMonitor.relabelings (the GPU Operator renders "
                    f"that list into ServiceMonitor {ns}/{name}; keep any entries it has)")
            else:
                fixes[path.via] = (f"add {rule} to the relabelings of every endpoint of "
                                   f"ServiceMonitor {ns}/{name}")
    if not fixes:
        return ""
    return ("the tool's EndpointSlices of the shared Service reach these pods a second time "
            "under role endpointslice: " + "; ".join(fixes[k] for k in sorted(fixes))
            + " (docs/monitoring.md, 'Discovery roles')")


def unscraped(paths: Mapping[str, list[ScrapePath]], pods: Iterable[PodView]) -> list[str]:
    """Ready exporter pods no target reaches: their GPUs are missing from every dashboard."""
    return sorted(p.name for p in pods if p.ready and not paths.get(p.name))


def truncated_endpoints(snapshot: Snapshot) -> list[str]:
    """Annotated Services listing more pods than one Endpoints object holds: the chart's
    `role: endpoints` job sees only the first ENDPOINTS_CAPACITY of them."""
    out = []
    for name, svc in sorted(snapshot.services.items()):
        if annotation_job(o.annotations_of(svc), SERVICE_JOB) is None:
            continue
        count = len(listed(snapshot, svc))
        if count > ENDPOINTS_CAPACITY:
            out.append(f"Service/{name} lists {count} pods, more than the {ENDPOINTS_CAPACITY} "
                       "addresses an Endpoints object holds (the endpoints controller truncates "
                       "it): a Prometheus job with `role: endpoints` scrapes only "
                       f"{ENDPOINTS_CAPACITY} of them; use `role: endpointslice` "
                       "(docs/monitoring.md)")
    return out


def duplicate_gate(snapshot: Snapshot, daemonsets: Iterable[str],
                   name: str = "no-duplicate-scrape",
                   before: Snapshot | None = None) -> GateResult:
    """No exporter pod reached by more than one scrape path. With `before` (a what-if check),
    only duplicates the change would create or worsen count: an existing one is a warning of
    its own, not a reason to refuse an unrelated change."""
    names = list(daemonsets)
    paths = scrape_paths(snapshot, names)
    prior = scrape_paths(before, names) if before is not None else {}
    dups = {pod: p for pod, p in paths.items()
            if len(p) > 1 and (before is None or len(p) > len(prior.get(pod, [])))}
    if not dups:
        existing = sum(1 for p in prior.values() if len(p) > 1)
        note = f" (the change adds none; {existing} already duplicated)" if existing else ""
        return GateResult(name, True,
                          f"{len(paths)} exporter pods, no new second scrape path{note}")
    pod, example = next(iter(sorted(dups.items())))
    return GateResult(name, False, f"{len(dups)} exporter pods scraped more than once, e.g. "
                      f"{pod} via {'; '.join(map(str, example))}")


def certain(paths: Mapping[str, list[ScrapePath]]) -> dict[str, list[ScrapePath]]:
    """The pods reached by more than one target of the same mechanism, with those targets:
    every Prometheus that reads that mechanism scrapes them twice."""
    out = {}
    for pod, found in paths.items():
        for mechanism in (ANNOTATION, OPERATOR):
            same = [p for p in found if p.mechanism == mechanism]
            if len(same) > 1:
                out[pod] = same
                break
    return out


def possible(paths: Mapping[str, list[ScrapePath]]) -> list[str]:
    """The pods reached once by annotation discovery and once by the Prometheus Operator (and
    not certainly duplicated): scraped twice only by a Prometheus configured for both."""
    return sorted(pod for pod, found in paths.items()
                  if len(found) == 2 and {p.mechanism for p in found} == {ANNOTATION, OPERATOR})


def certain_duplicates(snapshot: Snapshot,
                       daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Exporter pods with a certain duplicate (`certain`), with the targets."""
    return certain(scrape_paths(snapshot, daemonsets))


def possible_duplicates(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[str]:
    """Exporter pods with a possible duplicate (`possible`)."""
    return possible(scrape_paths(snapshot, daemonsets))


def duplicates_through(snapshot: Snapshot, daemonsets: Iterable[str],
                       services: Iterable[str]) -> list[str]:
    """Exporter pods scraped more than once where one of the paths goes through one of these
    Services (the tool's own aliases): a duplicate the migration is answerable for."""
    names = set(services)
    return sorted(pod for pod, paths in scrape_paths(snapshot, daemonsets).items()
                  if len(paths) > 1 and any(p.service in names for p in paths))


def conflicting_monitors(snapshot: Snapshot) -> list[str]:
    """ServiceMonitors that select the same Service with different endpoint settings."""
    found = []
    for svc in snapshot.services.values():
        sms = monitors_of(snapshot, svc)
        settings = {json.dumps(o.dig(sm, "spec", "endpoints"), sort_keys=True) for sm in sms}
        if len(sms) > 1 and len(settings) > 1:
            found.append(f"Service/{o.name(svc)} is selected by ServiceMonitors "
                         f"{', '.join(sorted(o.name(sm) for sm in sms))} with different "
                         "endpoint settings")
    return found


def with_service(snapshot: Snapshot, service: Obj) -> Snapshot:
    """The snapshot as it would be with this Service created or replaced (for what-if gates)."""
    services: Mapping[str, Obj] = {**snapshot.services, o.name(service): service}
    return replace(snapshot, services=services)
