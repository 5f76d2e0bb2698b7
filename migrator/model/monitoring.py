"""Scrape targets of exporter pods (docs/monitoring.md), one `ScrapePath` per target: the
`prometheus` chart's annotation jobs over Prometheus' Kubernetes discovery (`endpoints.go`,
`pod.go`), and one Prometheus Operator job per ServiceMonitor / PodMonitor endpoint, with its
discovery role (`promcfg.go`), meta labels and relabelings. The checks: `model/scrapechecks.py`."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from migrator.model import objects as o
from migrator.model.objects import CONTROLLER_NAME, MANAGED_BY_LABEL, SERVICE_NAME_LABEL, Obj
from migrator.model.selectors import NOTHING, Selector, for_service, lenient
from migrator.model.snapshot import EndpointView, PodView, Snapshot

# Discovery roles of a ServiceMonitor's job; the Operator's `ServiceDiscoveryRole` value.
ROLE_ENDPOINTS, ROLE_ENDPOINTSLICE = "endpoints", "endpointslice"
ENDPOINT_SLICE_ROLE = "EndpointSlice"
ENDPOINTSLICE_MIN_PROMETHEUS = (2, 21)  # promcfg.go: older Prometheus gets role endpoints


def role_flavor(value: Any) -> str:
    """promcfg.go `endpointRoleFlavor`: "EndpointSlice", else the endpoints role."""
    return ROLE_ENDPOINTSLICE if value == ENDPOINT_SLICE_ROLE else ROLE_ENDPOINTS


def prometheus_role(prometheus: Obj, monitor_role: Any = None) -> str:
    """The role a Prometheus gives a ServiceMonitor it selects: the monitor's own, else its
    `spec.serviceDiscoveryRole`; endpoints before 2.21 (`spec.version`)."""
    found = re.match(r"v?(\d+)\.(\d+)", str(o.dig(prometheus, "spec", "version") or ""))
    if found and (int(found[1]), int(found[2])) < ENDPOINTSLICE_MIN_PROMETHEUS:
        return ROLE_ENDPOINTS
    return role_flavor(o.dig(prometheus, "spec", "serviceDiscoveryRole")
                       if monitor_role is None else monitor_role)


def selects_monitor(prometheus: Obj, monitor: Obj) -> bool:
    """Whether a Prometheus picks this ServiceMonitor up (resource_selector.go); a namespace
    selector other than null (its own namespace) is taken as covering it."""
    spec = prometheus.get("spec") or {}
    return lenient(spec.get("serviceMonitorSelector")).matches(o.labels(monitor)) and (
        spec.get("serviceMonitorNamespaceSelector") is not None
        or o.meta(prometheus).get("namespace") == o.meta(monitor).get("namespace"))


def monitor_roles(snapshot: Snapshot, monitor: Obj) -> frozenset[str]:
    """The roles a ServiceMonitor's jobs run with: each selecting Prometheus', else its own."""
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


ANNOTATION, OPERATOR = "annotation", "prometheus-operator"
SCRAPE, SCRAPE_SLOW = "prometheus.io/scrape", "prometheus.io/scrape_slow"
PORT = "prometheus.io/port"
SERVICE_JOB, POD_JOB = "kubernetes-service-endpoints", "kubernetes-pods"
NOT_LISTED_PHASES = ("Pending", "Succeeded", "Failed", "Completed")


@dataclass(frozen=True)
class ScrapePath:
    """One scrape target that reaches a pod."""

    via: str  # "annotation", "servicemonitor/<ns>/<name>" or "podmonitor/<ns>/<name>"
    service: str  # the Service the target is discovered through; "" for a pod-level target
    job: str = ""  # the scrape job that holds it
    port: str = ""  # the target's port after relabelling ("" for a port-free target)
    role: str = ""  # the one discovery role that yields it ("": every role of its monitor does)
    slice: str = ""  # the foreign EndpointSlice it comes through ("": the Service's own)

    def __str__(self) -> str:
        through = f"Service/{self.service}" if self.service else "pod annotation"
        where = f":{self.port}" if self.port else ""
        how = f" (role {self.role}, EndpointSlice/{self.slice})" if self.slice else (
            f" (role {self.role})" if self.role else "")
        return f"{self.job if self.via == ANNOTATION else self.via} → {through}{where}{how}"

    @property
    def mechanism(self) -> str:
        """The discovery a Prometheus must use for this path: annotations or the operator."""
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
    wanted, found = annotations.get(PORT, ""), sorted(set(ports))
    return [wanted] if wanted.isdigit() and found else found


def _containers(snapshot: Snapshot, pod: PodView, *, init: bool = False) -> list[Obj]:
    """The pod's containers (and with `init` its init containers), from its DaemonSet's template."""
    containers, inits = o.template_containers(snapshot.daemonsets.get(pod.daemonset or ""))
    return containers + inits if init else containers


def _container_ports(snapshot: Snapshot, pod: PodView) -> list[Obj]:
    return [p for c in _containers(snapshot, pod) for p in c.get("ports") or []]


def monitor_ref(monitor: Obj) -> str:
    """`<namespace>/<name>`, as a ScrapePath's `via` names the monitor."""
    return f"{o.meta(monitor).get('namespace')}/{o.name(monitor)}"


def listed(snapshot: Snapshot, service: Obj,
           among: Iterable[PodView] | None = None) -> list[PodView]:
    """The pods (of `among`, default all) a Service's Endpoints/EndpointSlices list (selected,
    not terminal, started; being deleted only with `publishNotReadyAddresses`)."""
    publish = bool(o.dig(service, "spec", "publishNotReadyAddresses"))
    selects = for_service(o.dig(service, "spec", "selector")).matches
    return [p for p in (snapshot.pods if among is None else among)
            if selects(p.labels) and p.node
            and p.phase not in NOT_LISTED_PHASES and (publish or not p.deleting)]


def _service_targets(snapshot: Snapshot, service: Obj, pod: PodView,
                     job: str) -> list[ScrapePath]:
    """One target per endpoint port, plus one per container port no endpoint port covers."""
    cports = _container_ports(snapshot, pod)
    seen = {o.resolve_port(p, cports) for p in o.dig(service, "spec", "ports") or []}
    seen.discard(None)
    ports = [str(n) for n in seen]
    ports += [str(p["containerPort"]) for p in cports if int(p["containerPort"]) not in seen]
    return [ScrapePath(ANNOTATION, o.name(service), job, port)
            for port in _relabelled(o.annotations_of(service), ports)]


def _pod_targets(snapshot: Snapshot, pod: PodView) -> list[ScrapePath]:
    """One target per declared container port, or a port-free one per container declaring none."""
    job = annotation_job(pod.scrape_annotations, POD_JOB)
    if job is None or pod.phase in NOT_LISTED_PHASES or not pod.node:
        return []
    containers = _containers(snapshot, pod, init=True)
    ports = [str(p["containerPort"]) for c in containers for p in c.get("ports") or []]
    ports += ["" for c in containers if not c.get("ports")]
    return [ScrapePath(ANNOTATION, "", job, port)
            for port in _relabelled(pod.scrape_annotations, ports)]


def _kept(ep: Obj, ports: Iterable[Obj], targets: Callable[[Obj], Iterable[Any]]) -> list[Obj]:
    """The ports a monitor endpoint keeps: `port` by name, else `targetPort` (one of `targets`
    of a port), else all. The tool's slices name their ports as the Service does."""
    if "port" in ep:
        return [p for p in ports if p.get("name") == ep["port"]]
    if "targetPort" in ep:
        return [p for p in ports if str(ep["targetPort"]) in targets(p)]
    return list(ports)


def _sm_paths(snapshot: Snapshot, service: Obj, sm: Obj,
              pods: list[PodView]) -> dict[str, list[ScrapePath]]:
    """One ServiceMonitor's targets of these pods through this Service, under each of its roles;
    a target only one role yields names it (and its foreign slice)."""
    roles, ref = sorted(monitor_roles(snapshot, sm)), monitor_ref(sm)
    own = {p.name for p in listed(snapshot, service, pods)}
    endpoints = snapshot.endpoints_of(o.name(service)).endpoints
    by_name = {e.pod: e for e in endpoints if e.pod and e.managed_by in ("", CONTROLLER_NAME)}
    # What `role: endpointslice` adds: pods foreign slices (e.g. the tool's) list for the Service.
    shared = {e.pod: e for e in endpoints if e.slice and e.managed_by != CONTROLLER_NAME}
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
                for port in _kept(ep, o.dig(service, "spec", "ports") or [],
                                  lambda p: (str(o.target_port(p)),)):
                    rules = ep.get("relabelings") or []
                    if rules and not relabel_keeps(rules, target_labels(
                            service, pod, role, port, endpoint, snapshot.namespace)):
                        continue
                    key = (f"serviceMonitor/{ref}/{i}", str(o.target_port(port)))
                    seen, slice_ = found.setdefault(pod.name, {}).get(key, (set(), ""))
                    foreign = endpoint.slice if (pod.name not in own and endpoint) else ""
                    found[pod.name][key] = (seen | {role}, slice_ or foreign)
    return {pod: [ScrapePath(f"servicemonitor/{ref}", o.name(service), job, port,
                             ROLE_ENDPOINTSLICE if slice_ else
                             "" if len(seen) == len(roles) else next(iter(seen)), slice_)
                  for (job, port), (seen, slice_) in paths.items()]
            for pod, paths in found.items()}


def _pm_targets(snapshot: Snapshot, pod: PodView, pm: Obj) -> list[ScrapePath]:
    """One target per PodMonitor endpoint that keeps a container port of the pod."""
    cports = _container_ports(snapshot, pod)
    out, ref = [], monitor_ref(pm)
    for i, ep in enumerate(o.dig(pm, "spec", "podMetricsEndpoints") or []):
        kept = _kept(ep, cports, lambda p: (str(p.get("containerPort")), p.get("name")))
        out += [ScrapePath(f"podmonitor/{ref}", "", f"podMonitor/{ref}/{i}",
                           str(p.get("containerPort"))) for p in kept]
    return out


def _monitor_selector(monitor: Obj, namespace: str) -> Selector:
    """A monitor's `spec.selector` (absent: everything) where its `namespaceSelector` (empty: its
    own namespace) covers the namespace; else nothing."""
    ns_sel = o.dig(monitor, "spec", "namespaceSelector") or {}
    if ns_sel.get("any") or ns_sel.get("matchNames"):
        covered = bool(ns_sel.get("any")) or namespace in ns_sel["matchNames"]
    else:
        covered = o.meta(monitor).get("namespace") == namespace
    return lenient(o.dig(monitor, "spec", "selector") or {}) if covered else NOTHING


def monitors_of(snapshot: Snapshot, service: Obj) -> list[Obj]:
    """ServiceMonitors whose namespaceSelector and selector match the Service."""
    return [sm for sm in snapshot.service_monitors
            if _monitor_selector(sm, snapshot.namespace).matches(o.labels(service))]


def exporter_pods(snapshot: Snapshot, daemonsets: Iterable[str]) -> list[PodView]:
    names = set(daemonsets)
    return [p for p in snapshot.pods if p.daemonset in names and not p.deleting]


def scrape_paths(snapshot: Snapshot, daemonsets: Iterable[str]) -> dict[str, list[ScrapePath]]:
    """Every scrape target reaching each exporter pod, by pod name (memoised on the snapshot)."""
    key = ("scrape_paths", tuple(sorted(set(daemonsets))))
    if key not in snapshot.memo:
        snapshot.memo[key] = _scrape_paths(snapshot, exporter_pods(snapshot, key[1]))
    found: dict[str, list[ScrapePath]] = snapshot.memo[key]
    return {pod: list(paths) for pod, paths in found.items()}


def _scrape_paths(snapshot: Snapshot, pods: list[PodView]) -> dict[str, list[ScrapePath]]:
    out: dict[str, list[ScrapePath]] = {p.name: _pod_targets(snapshot, p) for p in pods}
    for svc in snapshot.services.values():
        if (job := annotation_job(o.annotations_of(svc), SERVICE_JOB)) is not None:
            per_daemonset: dict[str | None, list[ScrapePath]] = {}  # pods run their template
            for pod in listed(snapshot, svc, pods):
                if pod.owner_name not in per_daemonset:
                    per_daemonset[pod.owner_name] = _service_targets(snapshot, svc, pod, job)
                out[pod.name] += per_daemonset[pod.owner_name]
        for sm in monitors_of(snapshot, svc):
            for name, found in _sm_paths(snapshot, svc, sm, pods).items():
                out[name] += found
    for pm in snapshot.pod_monitors:
        selector = _monitor_selector(pm, snapshot.namespace)
        for pod in (p for p in pods if selector.matches(p.labels)):
            out[pod.name] += _pm_targets(snapshot, pod, pm)
    return out


def with_service(snapshot: Snapshot, service: Obj) -> Snapshot:
    """The snapshot as it would be with this Service created or replaced (for what-if gates)."""
    return replace(snapshot, services={**snapshot.services, o.name(service): service})
