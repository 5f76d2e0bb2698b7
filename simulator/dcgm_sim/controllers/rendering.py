"""Render the GPU Operator's DCGM / DCGM Exporter objects from the shipped fixtures.

One renderer, two users: `seed.py` creates the initial cluster from it and the operator
imitation reconciles against it, so what the sim seeds is exactly what its "operator" wants.
The render depends on the CR spec the way the real operator's does (images from
repository/image/version, `daemonsets` common config, standalone DCGM switching the exporter to
the remote-engine variant), so editing a CR changes the desired objects and their hash.

ClusterPolicy objects: the `clusterpolicy/` manifests with the "FILLED BY THE OPERATOR" fields
filled (TransformDCGM / TransformDCGMExporter). GPUCluster objects: the golden files with the
target namespace, plus the `nvidia.com/gpu-operator.state` label (`state-dcgm`,
`state-dcgm-exporter`). Both: a controller ownerReference to the CR; DaemonSets carry
`nvidia.com/last-applied-hash` of the rendered object.

Which states a CR enables (`state_enabled`) is decided here once, for the render and for the
operator imitation's deletion of a disabled state's objects (`operator.py`), so what one
renders the other never deletes. A ClusterPolicy state's manifests are the
`clusterpolicy/<state>_*` files (`clusterpolicy_state_manifests`), as upstream's
`n.resources[state]` holds the objects of `assets/<state>/`.

Operator releases (`releases.py`): `shipped` and `future-coexistence` render the above;
`shared-services-fork` is rahulait/gpu-operator@5746d440 (`controllers/sharedservices.py`):
every DCGM / DCGM Exporter DaemonSet of either stack carries `app.kubernetes.io/component:
nvidia-dcgm` / `nvidia-dcgm-exporter` on the DaemonSet and its pod template, and a pod
anti-affinity on that label (assets/state-dcgm/0400_dcgm.yml,
assets/state-dcgm-exporter/0800_daemonset.yaml, manifests/state-dcgm/0500_daemonset.yaml,
manifests/state-dcgm-exporter/0700_daemonset.yaml), and neither stack renders a Service: the
GPUCluster golden files of that commit hold none, and the ClusterPolicy Services are taken as
gone too (the module docstring of `sharedservices.py` says why). The shared Services are
rendered by `shared_service`.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers import releases
from dcgm_sim.jsoncopy import clone

Obj = dict[str, Any]

CLUSTERPOLICY = "clusterpolicy"
GPUCLUSTER = "gpucluster"

DCGM_LABEL = "nvidia.com/gpu-operator.dcgm"
EXPORTER_LABEL = "nvidia.com/gpu-operator.dcgm-exporter"
STATE_LABEL = "nvidia.com/gpu-operator.state"
HASH_ANNOTATION = "nvidia.com/last-applied-hash"
RENDERS_COMMON_LABELS = "sim.dcgm-migrate/renders-common-labels"
# Set on nodes by the releases that let both stacks coexist (`releases.Release.mode_label`):
# upstream removed it in 9654928ac, so the shipped release has none.
MODE_LABEL = "nvidia.com/gpu-operator.resource-allocation.mode"
MODE_DEVICE_PLUGIN = "device-plugin"
MODE_DRA = "dra"

# Per-component node labels each stack's DaemonSets select on.
DEPLOY_LABELS = {
    CLUSTERPOLICY: ("nvidia.com/gpu.deploy.dcgm", "nvidia.com/gpu.deploy.dcgm-exporter"),
    GPUCLUSTER: ("nvidia.com/gpu.deploy.dcgm-dra", "nvidia.com/gpu.deploy.dcgm-exporter-dra"),
}
DCGM_NAMES = frozenset({"nvidia-dcgm", "nvidia-dcgm-dra"})
EXPORTER_NAMES = frozenset({"nvidia-dcgm-exporter", "nvidia-dcgm-exporter-dra"})
SERVED_KINDS = frozenset({"DaemonSet", "Service", "ServiceMonitor", "ResourceClaimTemplate"})

# Operator releases the imitation can run (`OperatorImitation.release`, `releases.py`).
RELEASES = releases.RELEASES
COMPONENT_LABEL = "app.kubernetes.io/component"
DCGM_COMPONENT = "nvidia-dcgm"
EXPORTER_COMPONENT = "nvidia-dcgm-exporter"
SHARED_SERVICE_LABEL = "nvidia.com/shared-service"

# Images the ClusterPolicy Helm chart would put in the CR when the user sets none.
CP_DEFAULT_IMAGES = {
    "dcgm": ("nvcr.io/nvidia/cloud-native", "dcgm", "4.2.3-1-ubuntu22.04"),
    "dcgmExporter": ("nvcr.io/nvidia/k8s", "dcgm-exporter", "4.2.3-4.1.3-ubuntu22.04"),
    "validator": ("nvcr.io/nvidia/cloud-native", "gpu-operator-validator", "v25.3.0"),
}
DCGM_REMOTE_ENGINE_ENV = "DCGM_REMOTE_HOSTENGINE_INFO"


_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _parsed(relpath: str) -> tuple[Obj, ...]:
    """A fixture file's documents, parsed once per process: the files ship with the package
    and never change, and a reconcile every few simulated seconds (of every simulated cluster
    a test run starts) must not re-parse YAML. Never handed out: `load_fixture` clones."""
    root = resources.files("dcgm_sim").joinpath("fixtures", "gpu-operator")
    text = root.joinpath(*relpath.split("/")).read_text(encoding="utf-8")
    return tuple(d for d in yaml.load_all(text, Loader=_Loader) if d)


def load_fixture(relpath: str) -> list[Obj]:
    """The documents of a fixture file shipped in `dcgm_sim/fixtures/gpu-operator/`, fresh
    copies to render into."""
    return clone(list(_parsed(relpath)))


def sample_cr(stack: str) -> Obj:
    name = "clusterpolicy-sample.yaml" if stack == CLUSTERPOLICY else "gpucluster-sample.yaml"
    return load_fixture(name)[0]


def stack_of(cr: Mapping[str, Any]) -> str:
    return CLUSTERPOLICY if cr.get("kind") == "ClusterPolicy" else GPUCLUSTER


def _enabled(section: Mapping[str, Any] | None, default: bool, absent: bool | None = None) -> bool:
    """`section.enabled`, else `default`; a section left out is `absent` (None: `default`)."""
    if section is None and absent is not None:
        return absent
    if not section or section.get("enabled") is None:
        return default
    return bool(section["enabled"])


# The states each stack's DCGM / DCGM Exporter objects belong to, in the operator's order, with
# the CR spec section that switches each, whether it is on when the section does not say, and
# whether it is on when the CR leaves the section out (ClusterPolicy: `isStateEnabled`,
# state_manager.go, every section on; GPUCluster: `dcgmEnabled`, internal/state/gpucluster.go,
# on only with `enabled: true`, and the exporter state's `isEnabled`,
# internal/state/dcgm_exporter.go: `cr.Spec.DCGMExporter != nil && ...IsEnabled()`, so a
# GPUCluster without a `dcgmExporter` section runs no exporter).
STATES: dict[str, tuple[tuple[str, str, bool, bool], ...]] = {
    CLUSTERPOLICY: (("state-dcgm", "dcgm", True, True),
                    ("state-dcgm-exporter", "dcgmExporter", True, True)),
    GPUCLUSTER: (("state-dcgm", "dcgm", False, False),
                 ("state-dcgm-exporter", "dcgmExporter", True, False)),
}


def state_enabled(cr: Mapping[str, Any], state: str) -> bool:
    """Whether the CR enables `state` (one of `STATES[stack_of(cr)]`)."""
    spec = cr.get("spec") or {}
    for name, section, default, absent in STATES[stack_of(cr)]:
        if name == state:
            return _enabled(spec.get(section), default, absent)
    raise KeyError(f"no state {state!r} on the {stack_of(cr)} stack")


def service_monitor_enabled(cr: Mapping[str, Any]) -> bool:
    """ClusterPolicy `dcgmExporter.serviceMonitor.enabled` (off when unset, as upstream's
    `serviceMonitor == nil || !serviceMonitor.IsEnabled()`)."""
    exporter = (cr.get("spec") or {}).get("dcgmExporter") or {}
    return _enabled(exporter.get("serviceMonitor"), False)


def service_monitor_edits(config: Mapping[str, Any], smon: Obj) -> None:
    """ClusterPolicy `dcgmExporter.serviceMonitor` applied to the rendered ServiceMonitor, as
    upstream's `applyServiceMonitorCustomEdits` (controllers/object_controls.go) does:
    `additionalLabels` join its labels; `interval`, `scrapeTimeout`, `honorLabels` and
    `relabelings` go to its first endpoint, the relabelings replacing that endpoint's list."""
    if config.get("additionalLabels"):
        smon["metadata"].setdefault("labels", {}).update(config["additionalLabels"])
    endpoints = smon["spec"].get("endpoints") or []
    if not endpoints:
        return
    first = endpoints[0]
    for field in ("interval", "scrapeTimeout"):
        if config.get(field):
            first[field] = config[field]
    if config.get("honorLabels") is not None:
        first["honorLabels"] = bool(config["honorLabels"])
    if config.get("relabelings") is not None:
        first["relabelings"] = [dict(r) for r in config["relabelings"] if r is not None]


def clusterpolicy_state_manifests(state: str) -> list[Obj]:
    """Every manifest of a ClusterPolicy state, in file order, unrendered: the
    `clusterpolicy/<state>_*` fixture files (upstream: the objects of `assets/<state>/`)."""
    root = resources.files("dcgm_sim").joinpath("fixtures", "gpu-operator", CLUSTERPOLICY)
    names = sorted(f.name for f in root.iterdir() if f.name.startswith(state + "_"))
    return [doc for name in names for doc in load_fixture(f"{CLUSTERPOLICY}/{name}")]


def _image(section: Mapping[str, Any] | None, default: tuple[str, str, str]) -> str:
    section = section or {}
    repo = section.get("repository") or default[0]
    image = section.get("image") or default[1]
    version = section.get("version") or default[2]
    if ":" in image.rsplit("/", 1)[-1] or "@" in image:
        return f"{repo}/{image}" if repo else image
    return f"{repo}/{image}:{version}" if repo else f"{image}:{version}"


def object_hash(obj: Mapping[str, Any]) -> str:
    """The operator's `utils.GetObjectHash`: a stable 64-bit hash, as a decimal string."""
    return str(int(hashlib.sha256(P.canonical_json(obj).encode()).hexdigest()[:16], 16))


def _set_env(container: Obj, name: str, value: str) -> None:
    env = container.setdefault("env", [])
    for item in env:
        if item.get("name") == name:
            item["value"] = value
            item.pop("valueFrom", None)
            return
    env.append({"name": name, "value": value})


def _int_or_percent(value: Any) -> int | str:
    text = str(value).strip()
    return text if text.endswith("%") else int(text)


def _apply_common_config(ds: Obj, daemonsets: Mapping[str, Any], selector_keys: set[str],
                         reserved_extra: frozenset[str] = frozenset()) -> None:
    """`applyCommonDaemonsetConfig` + `applyCommonDaemonsetMetadata`; `reserved_extra`: more
    label keys `daemonsets.labels` may not set on the pod template."""
    spec = ds["spec"]
    pod = spec["template"].setdefault("spec", {})
    strategy = daemonsets.get("updateStrategy")
    max_unavailable = (daemonsets.get("rollingUpdate") or {}).get("maxUnavailable")
    if strategy == "OnDelete":
        spec["updateStrategy"] = {"type": "OnDelete"}
    elif max_unavailable not in (None, ""):
        rolling = {"maxUnavailable": _int_or_percent(max_unavailable)}
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": rolling}
    if daemonsets.get("priorityClassName"):
        pod["priorityClassName"] = daemonsets["priorityClassName"]
    _apply_shared_config(ds, daemonsets, selector_keys | reserved_extra)


def _apply_shared_config(ds: Obj, daemonsets: Mapping[str, Any],
                         reserved_extra: set[str] | frozenset[str] = frozenset()) -> None:
    """What both stacks take from `daemonsets`: its tolerations on the pod template, and its
    labels and annotations on the DaemonSet itself, unfiltered, and on its pod template but
    for `app`, `app.kubernetes.io/part-of` and `reserved_extra` (`applyCommonDaemonsetConfig`
    and `applyCommonDaemonsetMetadata`, object_controls.go; the GPUCluster's manifests,
    manifests/state-dcgm*/*_daemonset.yaml, take the same)."""
    if daemonsets.get("tolerations"):
        ds["spec"]["template"].setdefault("spec", {})["tolerations"] = clone(
            daemonsets["tolerations"])
    meta, tmeta = ds["metadata"], ds["spec"]["template"].setdefault("metadata", {})
    reserved = {"app", "app.kubernetes.io/part-of"} | set(reserved_extra)
    for key, value in (daemonsets.get("labels") or {}).items():
        meta.setdefault("labels", {})[key] = str(value)
        if key not in reserved:
            tmeta.setdefault("labels", {})[key] = str(value)
    for key, value in (daemonsets.get("annotations") or {}).items():
        meta.setdefault("annotations", {})[key] = str(value)
        tmeta.setdefault("annotations", {})[key] = str(value)


def _add_common_labels(ds: Obj) -> None:
    """The "new operator version" that renders the reserved common labels itself."""
    name = ds["metadata"]["name"]
    label = DCGM_LABEL if name in DCGM_NAMES else EXPORTER_LABEL if name in EXPORTER_NAMES else None
    if label is None:
        return
    ds["metadata"].setdefault("labels", {})[label] = "true"
    ds["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[label] = "true"


def component_of(name: str) -> str | None:
    """The `app.kubernetes.io/component` value of a DCGM / Exporter DaemonSet (either stack)."""
    if name in DCGM_NAMES:
        return DCGM_COMPONENT
    if name in EXPORTER_NAMES:
        return EXPORTER_COMPONENT
    return None


def _add_component_label(ds: Obj) -> None:
    """The shared-services release's DaemonSet shape: the component label on the DaemonSet and
    its pod template, and a required pod anti-affinity on it (one pod of a component per node,
    whichever stack runs it). The selector stays `app: <name>` (immutable)."""
    component = component_of(ds["metadata"]["name"])
    if component is None:
        return
    ds["metadata"].setdefault("labels", {})[COMPONENT_LABEL] = component
    template = ds["spec"]["template"]
    template.setdefault("metadata", {}).setdefault("labels", {})[COMPONENT_LABEL] = component
    affinity = template.setdefault("spec", {}).setdefault("affinity", {})
    affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": {COMPONENT_LABEL: component}},
        "topologyKey": "kubernetes.io/hostname"}]}


def _exporter_service(svc: Obj, exporter: Mapping[str, Any]) -> None:
    """`dcgmExporter.service`'s `type` and `internalTrafficPolicy` on the exporter's Service,
    both stacks (`TransformDCGMExporterService`, object_controls.go)."""
    service = exporter.get("service") or {}
    if service.get("type"):
        svc["spec"]["type"] = service["type"]
    if service.get("internalTrafficPolicy"):
        svc["spec"]["internalTrafficPolicy"] = service["internalTrafficPolicy"]


def _render_clusterpolicy(cr: Mapping[str, Any], namespace: str,
                          reserved: frozenset[str] = frozenset()) -> list[Obj]:
    spec = cr.get("spec") or {}
    daemonsets = spec.get("daemonsets") or {}
    validator = _image(spec.get("validator"), CP_DEFAULT_IMAGES["validator"])
    dcgm_on = state_enabled(cr, "state-dcgm")
    out: list[Obj] = []
    if dcgm_on:
        ds, svc = (load_fixture("clusterpolicy/state-dcgm_0400_dcgm.yml")[0],
                   load_fixture("clusterpolicy/state-dcgm_0500_service.yaml")[0])
        pod = ds["spec"]["template"]["spec"]
        pod["containers"][0]["image"] = _image(spec.get("dcgm"), CP_DEFAULT_IMAGES["dcgm"])
        for init in pod.get("initContainers") or []:
            init["image"] = validator
        _apply_common_config(ds, daemonsets, set(ds["spec"]["selector"]["matchLabels"]),
                             reserved)
        out += [ds, svc]
    if state_enabled(cr, "state-dcgm-exporter"):
        exporter = spec.get("dcgmExporter") or {}
        svc = load_fixture("clusterpolicy/state-dcgm-exporter_0400_service.yaml")[0]
        _exporter_service(svc, exporter)
        out.append(svc)
        if service_monitor_enabled(cr):
            smon = load_fixture("clusterpolicy/state-dcgm-exporter_0500_service_monitor.yaml")[0]
            smon["spec"]["namespaceSelector"]["matchNames"] = [namespace]
            service_monitor_edits(exporter.get("serviceMonitor") or {}, smon)
            out.append(smon)
        ds = load_fixture("clusterpolicy/state-dcgm-exporter_0800_daemonset.yaml")[0]
        pod = ds["spec"]["template"]["spec"]
        container = pod["containers"][0]
        container["image"] = _image(exporter, CP_DEFAULT_IMAGES["dcgmExporter"])
        for init in pod.get("initContainers") or []:
            init["image"] = validator
        if dcgm_on:
            _set_env(container, DCGM_REMOTE_ENGINE_ENV, "nvidia-dcgm:5555")
        _apply_common_config(ds, daemonsets, set(ds["spec"]["selector"]["matchLabels"]),
                             reserved)
        out.append(ds)
    for obj in out:
        obj["metadata"]["namespace"] = namespace
    return out


def _render_gpucluster(cr: Mapping[str, Any], namespace: str,
                       reserved: frozenset[str] = frozenset()) -> list[Obj]:
    spec = cr.get("spec") or {}
    daemonsets = spec.get("daemonsets") or {}
    dcgm = spec.get("dcgm") or {}
    exporter = spec.get("dcgmExporter") or {}
    dcgm_on = state_enabled(cr, "state-dcgm")
    out: list[tuple[str, Obj]] = []
    if dcgm_on:
        out += [("state-dcgm", o) for o in load_fixture("gpucluster-golden/gpucluster-dcgm.yaml")]
    if state_enabled(cr, "state-dcgm-exporter"):
        variant = "remote-engine" if dcgm_on else "embedded"
        docs = load_fixture(f"gpucluster-golden/gpucluster-dcgm-exporter-{variant}.yaml")
        out += [("state-dcgm-exporter", o) for o in docs]
    rendered: list[Obj] = []
    for state, obj in out:
        if obj.get("kind") not in SERVED_KINDS:
            continue
        obj["metadata"]["namespace"] = namespace
        obj["metadata"].setdefault("labels", {})[STATE_LABEL] = state
        if obj["kind"] == "DaemonSet":
            container = obj["spec"]["template"]["spec"]["containers"][0]
            section = dcgm if state == "state-dcgm" else exporter
            default = ("nvcr.io/nvidia/cloud-native", "dcgm", "test") if state == "state-dcgm" \
                else ("nvcr.io/nvidia/k8s", "dcgm-exporter", "test")
            container["image"] = _image(section, default)
            if state == "state-dcgm-exporter" and exporter.get("enablePodLabels"):
                _set_env(container, "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS", "true")
            # The GPUCluster's manifests hard-code `updateStrategy: RollingUpdate` and
            # `priorityClassName: system-node-critical`; only labels, annotations and
            # tolerations come from `daemonsets` (manifests/state-dcgm*/*_daemonset.yaml).
            _apply_shared_config(obj, daemonsets,
                                 set(obj["spec"]["selector"]["matchLabels"]) | reserved)
        elif obj["kind"] == "Service" and state == "state-dcgm-exporter":
            _exporter_service(obj, exporter)
        rendered.append(obj)
    return rendered


def render(cr: Mapping[str, Any], namespace: str,
           release: str = releases.DEFAULT) -> list[Obj]:
    """The objects the operator wants for this CR, in its apply order, each with the controller
    ownerReference (the CR must carry its uid) and, for DaemonSets, the last-applied hash.
    `release` (`RELEASES`): `shared-services-fork` adds the component label to the DaemonSets
    and renders no Service (the shared Services are `shared_service`'s)."""
    shared = releases.release(release).shared_services
    reserved = frozenset({COMPONENT_LABEL}) if shared else frozenset()
    if stack_of(cr) == CLUSTERPOLICY:
        objs = _render_clusterpolicy(cr, namespace, reserved)
    else:
        objs = _render_gpucluster(cr, namespace, reserved)
    if shared:
        objs = [o for o in objs if o["kind"] != "Service"]
    common = str((cr.get("metadata", {}).get("annotations") or {}).get(RENDERS_COMMON_LABELS,
                                                                       "")).lower() == "true"
    for obj in objs:
        meta = obj["metadata"]
        meta["ownerReferences"] = [P.owner_reference(cr)]
        if obj["kind"] == "DaemonSet":
            if common:
                _add_common_labels(obj)
            if shared:
                _add_component_label(obj)
            annotations = meta.setdefault("annotations", {})
            annotations.pop(HASH_ANNOTATION, None)
            annotations[HASH_ANNOTATION] = object_hash(obj)
    return objs


# manifests/shared/state-dcgm/service.yaml and state-dcgm-exporter/service.yaml
# (rahulait/gpu-operator@5746d440), with their templating filled.
def shared_service(name: str, namespace: str, service_type: str = "ClusterIP",
                   internal_traffic_policy: str = "") -> Obj:
    """The Service the SharedServiceReconciler renders for `name` (`nvidia-dcgm`: ClusterIP,
    internalTrafficPolicy Local; `nvidia-dcgm-exporter`: the type and policy given, the
    `prometheus.io/scrape` annotation), selecting by the component label."""
    if name == DCGM_COMPONENT:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": name, "namespace": namespace,
            "labels": {"app": name, COMPONENT_LABEL: name}},
            "spec": {"type": "ClusterIP", "internalTrafficPolicy": "Local",
                     "selector": {COMPONENT_LABEL: name},
                     "ports": [{"name": "dcgm", "port": 5555, "targetPort": 5555,
                                "protocol": "TCP"}]}}
    if name == EXPORTER_COMPONENT:
        spec: Obj = {"type": service_type}
        if internal_traffic_policy:
            spec["internalTrafficPolicy"] = internal_traffic_policy
        spec["selector"] = {COMPONENT_LABEL: name}
        spec["ports"] = [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400,
                          "protocol": "TCP"}]
        return {"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": name, "namespace": namespace,
            "labels": {"app": name, COMPONENT_LABEL: name},
            "annotations": {"prometheus.io/scrape": "true"}}, "spec": spec}
    raise KeyError(f"no shared Service {name!r}")
