"""Defaulting and validation, as the real server applies them before an object is stored.

What is covered is what a migration tool can trip over: object names and label/annotation
syntax, ownerReferences, Namespace/Pod/DaemonSet/ConfigMap defaults and rules (DaemonSet
selector required, matching its template, immutable; pod spec immutable but for images),
Deployment/ReplicaSet/Job/CronJob defaults and the template rules a manifest trips over
(selector, restartPolicy; a Job's selector and labels generated from its uid), EndpointSlices
via `validation_endpointslice`, and Services via `allocation`. Custom resources (nvidia.com,
monitoring.coreos.com) are stored schema-less, as a CRD without a structural schema would be.
Status is reset on create for kinds whose status is a subresource, as the real strategies do.

`admit` is pure: the caller supplies the addresses and ports other Services hold.
"""

from __future__ import annotations

import re
from typing import Any

from dcgm_sim import allocation, kinds, labelselectors, podupdates, validation_endpointslice
from dcgm_sim.allocation import Allocated
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import CRON_JOB, DEPLOYMENT, ENDPOINTS, JOB, REPLICA_SET, Kind
from dcgm_sim.statuses import FieldErrors, bad_request

Obj = dict[str, Any]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_MAX_CONFIGMAP_BYTES = 1024 * 1024

_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                  "characters, '-' or '.', and must start and end with an alphanumeric character "
                  "(e.g. 'example.com', regex used for validation is "
                  "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
              "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  "
              "or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_DNS1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                "start with an alphabetic character, and end with an alphanumeric character "
                "(e.g. 'my-name',  or 'abc-123', regex used for validation is "
                "'[a-z]([-a-z0-9]*[a-z0-9])?')")
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
                    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
_QUALIFIED_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                  "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
                  "or '123-abc', regex used for validation is "
                  "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")

_STATUS_ON_CREATE: dict[str, Obj] = {
    # Required int32 fields the real server always serialises (clients validate them).
    kinds.DAEMONSET.key: {"currentNumberScheduled": 0, "numberMisscheduled": 0,
                          "desiredNumberScheduled": 0, "numberReady": 0},
    kinds.SERVICE.key: {"loadBalancer": {}},
    kinds.CLUSTER_POLICY.key: {},
    kinds.GPU_CLUSTER.key: {},
    kinds.RESOURCE_CLAIM.key: {},  # PrepareForCreate drops a client's status
    DEPLOYMENT.key: {}, JOB.key: {}, CRON_JOB.key: {},
    REPLICA_SET.key: {"replicas": 0},  # `replicas` has no omitempty
}
GPU_CLUSTER_NAME = "gpu-cluster"  # the only name the GPUCluster CRD admits
_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def admit(kind: Kind, obj: Obj, old: Obj | None = None, *,
          allocated: Allocated | None = None) -> Obj:
    """Return a defaulted copy of `obj` for create (`old` None) or update; 422/400 when invalid."""
    obj = clone(obj)
    meta = obj.setdefault("metadata", {})
    _check_types(kind, obj)
    name = meta.get("name") or meta.get("generateName", "")
    errors = FieldErrors()
    meta.pop("managedFields", None)
    if old is None and kind.key in _STATUS_ON_CREATE:
        obj["status"] = clone(_STATUS_ON_CREATE[kind.key])
    if kind == kinds.NAMESPACE:
        _namespace(obj, old)
    elif kind == kinds.POD:
        _pod(obj, old, errors)
    elif kind == kinds.DAEMONSET:
        _daemonset(obj, old, errors)
    elif kind == kinds.SERVICE:
        errors.errors += allocation.admit_service(obj, old, allocated or Allocated()).errors
    elif kind == kinds.CONFIGMAP:
        _configmap(obj, errors)
    elif kind == ENDPOINTS:
        _endpoints(obj)
    elif kind == kinds.ENDPOINTSLICE:
        errors.errors += validation_endpointslice.validate(obj, old).errors
    elif kind == DEPLOYMENT:
        _deployment(obj, old, errors)
    elif kind == REPLICA_SET:
        _replicaset(obj, old, errors)
    elif kind == JOB:
        if old is None:
            _generate_job_selector(obj)
        _job_spec(obj.setdefault("spec", {}), "spec", errors, defaults=True)
        if old is not None and obj["spec"].get("selector") != (old.get("spec") or {}).get(
                "selector"):
            errors.add("Invalid", "spec.selector", "field is immutable",
                       obj["spec"].get("selector"))
    elif kind == CRON_JOB:
        _cronjob(obj, errors)
    elif kind == kinds.GPU_CLUSTER and name != GPU_CLUSTER_NAME:
        # The CRD's x-kubernetes-validations rule (gpu-operator api/nvidia/v1alpha1/
        # gpucluster_types.go, `+kubebuilder:validation:XValidation`), reported at the root
        # as the apiextensions-apiserver's CEL validator reports it.
        errors.add("Invalid", "<nil>", "GPUCluster is a singleton, metadata.name must be "
                   "'gpu-cluster'", "object")
    elif kind == kinds.RESOURCE_CLAIM and old is not None and obj.get("spec") != old.get("spec"):
        # ValidateResourceClaimUpdate (pkg/apis/resource/validation): the spec is immutable.
        errors.add("Invalid", "spec", "field is immutable", obj.get("spec"))
    _metadata(kind, meta, old is None, errors)
    if old is not None:
        _metadata_update(meta, old, errors)
    errors.raise_if_any(kind, name)
    return obj


def _metadata_update(meta: Obj, old: Obj, errors: FieldErrors) -> None:
    """`ValidateObjectMetaUpdate` (apimachinery/pkg/api/validation/objectmeta.go), run for
    every kind by `rest.BeforeUpdate`: a body without a uid gets the stored one, a different
    uid is refused (a pod's labels may change, its identity may not)."""
    old_uid = (old.get("metadata") or {}).get("uid")
    if meta.get("uid") and old_uid and meta["uid"] != old_uid:
        errors.add("Invalid", "metadata.uid", "field is immutable", meta["uid"])


def _endpoints(obj: Obj) -> None:
    """`SetDefaults_EndpointPort`: a port without a protocol is TCP."""
    for subset in obj.get("subsets") or []:
        for port in (subset.get("ports") or []) if isinstance(subset, dict) else []:
            if isinstance(port, dict) and not port.get("protocol"):
                port["protocol"] = "TCP"


def _check_types(kind: Kind, obj: Obj) -> None:
    """What Go's JSON decoder would refuse before validation even starts (400)."""
    meta = obj.get("metadata")
    for fld in ("labels", "annotations"):
        values = meta.get(fld) if isinstance(meta, dict) else None
        if values is None:
            continue
        bad = (not isinstance(values, dict)
               or any(not isinstance(v, str) for v in values.values()))
        if bad:
            raise bad_request(
                f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                f"json: cannot unmarshal non-string into Go struct field ObjectMeta.metadata."
                f"{fld} of type string")
    if not isinstance(meta, dict):
        raise bad_request(f"{kind.kind} in version {kind.version!r} cannot be handled: "
                          "metadata must be an object")


def _path_segment_problems(name: str) -> list[str]:
    """apimachinery/pkg/api/validation/path/name.go `IsValidPathSegmentName`."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def _metadata(kind: Kind, meta: Obj, creating: bool, errors: FieldErrors) -> None:
    name = meta.get("name", "")
    if name and creating and kind.group == "rbac.authorization.k8s.io":
        # pkg/apis/rbac/validation: ValidateRBACName = path.IsValidPathSegmentName, so the
        # bootstrap names ("system:basic-user") are valid
        for problem in _path_segment_problems(name):
            errors.add("Invalid", "metadata.name", problem, name)
    elif name and creating:
        if kind in (kinds.NAMESPACE,):
            pattern, message, limit = _DNS1123_LABEL, _LABEL_MSG, 63
        elif kind == kinds.SERVICE:
            pattern, message, limit = _DNS1035_LABEL, _DNS1035_MSG, 63
        else:
            pattern, message, limit = _DNS1123_SUBDOMAIN, _SUBDOMAIN_MSG, 253
        if len(name) > limit:
            errors.add("Invalid", "metadata.name", f"must be no more than {limit} characters",
                       name)
        elif not pattern.match(name):
            errors.add("Invalid", "metadata.name", message, name)
    for key, value in (meta.get("labels") or {}).items():
        _qualified_key(key, "metadata.labels", errors)
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            detail = ("must be no more than 63 characters" if len(value) > 63
                      else _LABEL_VALUE_MSG)
            errors.add("Invalid", "metadata.labels", detail, value)
    for key in meta.get("annotations") or {}:
        _qualified_key(key, "metadata.annotations", errors)
    controllers = 0
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        for fld in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(fld):
                what = {"uid": "uid must not be empty", "name": "name must not be empty",
                        "kind": "kind must not be empty",
                        "apiVersion": "version must not be empty"}[fld]
                errors.add("Invalid", f"metadata.ownerReferences[{i}].{fld}", what,
                           ref.get(fld, ""))
        controllers += bool(ref.get("controller"))
    if controllers > 1:
        errors.add("Invalid", "metadata.ownerReferences",
                   "Only one reference can have Controller set to true. Found \"true\" in "
                   "references for multiple owners", meta.get("ownerReferences"))


def _qualified_key(key: str, path: str, errors: FieldErrors) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errors.add("Invalid", path, f"prefix part {_SUBDOMAIN_MSG}", key)
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.add("Invalid", path, _QUALIFIED_MSG, key)


def _namespace(obj: Obj, old: Obj | None) -> None:
    name = obj["metadata"].get("name", "")
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    if old is None:
        obj["status"] = {"phase": "Active"}


def default_pod_spec(spec: Obj) -> None:
    """`SetDefaults_PodSpec` and container defaults (in place); shared by pods and templates."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for group in ("initContainers", "containers"):
        for c in spec.get(group) or []:
            c.setdefault("terminationMessagePath", "/dev/termination-log")
            c.setdefault("terminationMessagePolicy", "File")
            image = str(c.get("image", ""))
            tag = image.rsplit("/", 1)[-1]
            latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
            c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
            c.setdefault("resources", {})
            for port in c.get("ports") or []:
                port.setdefault("protocol", "TCP")
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if isinstance(c.get(probe), dict):
                    p = c[probe]
                    for k, v in (("timeoutSeconds", 1), ("periodSeconds", 10),
                                 ("successThreshold", 1), ("failureThreshold", 3)):
                        p.setdefault(k, v)
                    if isinstance(p.get("httpGet"), dict):
                        p["httpGet"].setdefault("scheme", "HTTP")
    for vol in spec.get("volumes") or []:
        if isinstance(vol.get("hostPath"), dict):
            vol["hostPath"].setdefault("type", "")
        for src in ("configMap", "secret"):
            if isinstance(vol.get(src), dict):
                vol[src].setdefault("defaultMode", 420)


def _validate_pod_spec(spec: Obj, path: str, errors: FieldErrors) -> None:
    containers = spec.get("containers")
    if not containers:
        errors.add("Required", f"{path}.containers")
        return
    names: set[str] = set()
    for i, c in enumerate(containers):
        if not c.get("name"):
            errors.add("Required", f"{path}.containers[{i}].name")
        elif c["name"] in names:
            errors.add("Duplicate", f"{path}.containers[{i}].name", value=c["name"])
        names.add(c.get("name", ""))
        if not c.get("image"):
            errors.add("Required", f"{path}.containers[{i}].image")


def _pod(obj: Obj, old: Obj | None, errors: FieldErrors) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    if old is None:
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", _PRIORITY_CLASSES.get(spec.get("priorityClassName", ""), 0))
        burstable = any((c.get("resources") or {}) for c in spec.get("containers") or [])
        obj["status"] = {"phase": "Pending", "qosClass": "Burstable" if burstable else "BestEffort"}
    _validate_pod_spec(spec, "spec", errors)
    if old is not None:
        old_spec = clone(old.get("spec") or {})
        default_pod_spec(old_spec)  # objects written straight to the store may lack defaults
        podupdates.validate(spec, old_spec, errors)


def _daemonset(obj: Obj, old: Obj | None, errors: FieldErrors) -> None:
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    elif strategy["type"] != "OnDelete":
        errors.add("NotSupported", "spec.updateStrategy",
                   'supported values: "OnDelete", "RollingUpdate"', strategy["type"])
    spec.setdefault("revisionHistoryLimit", 10)
    pod_spec = _template_selector(spec, "spec", "daemonset", errors)
    selector = spec.get("selector")
    if old is not None and selector != (old.get("spec") or {}).get("selector"):
        errors.add("Invalid", "spec.selector", "field is immutable", selector)
    if pod_spec.get("restartPolicy") != "Always":
        errors.add("NotSupported", "spec.template.spec.restartPolicy",
                   'supported values: "Always"', pod_spec.get("restartPolicy"))
    _validate_pod_spec(pod_spec, "spec.template.spec", errors)


def _template_selector(spec: Obj, path: str, what: str, errors: FieldErrors) -> Obj:
    """Default the pod template and check the selector against its labels (DaemonSet,
    Deployment: `ValidateDeploymentSpec`'s "empty selector is invalid for deployment")."""
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    pod_spec: Obj = template.setdefault("spec", {})
    default_pod_spec(pod_spec)
    selector = spec.get("selector")
    if not selector:
        errors.add("Required", f"{path}.selector")
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errors.add("Invalid", f"{path}.selector", f"empty selector is invalid for {what}",
                   selector)
    else:
        try:
            matches = labelselectors.label_selector_as_selector(selector).matches(
                template["metadata"].get("labels") or {})
        except labelselectors.SelectorError as e:
            errors.add("Invalid", f"{path}.selector", str(e), selector)
        else:
            if not matches:
                errors.add("Invalid", f"{path}.template.metadata.labels",
                           "`selector` does not match template `labels`",
                           template["metadata"].get("labels") or {})
    return pod_spec


def _deployment(obj: Obj, old: Obj | None, errors: FieldErrors) -> None:
    """`SetDefaults_Deployment` (apps/v1) and the rules of `ValidateDeployment` a manifest can
    trip over: selector required, matching the template, immutable; restartPolicy Always."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    elif strategy["type"] != "Recreate":
        errors.add("NotSupported", "spec.strategy.type",
                   'supported values: "Recreate", "RollingUpdate"', strategy["type"])
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    pod_spec = _replicated_template(spec, old, "deployment", errors)
    _validate_pod_spec(pod_spec, "spec.template.spec", errors)


def _replicated_template(spec: Obj, old: Obj | None, what: str, errors: FieldErrors) -> Obj:
    """What apps/v1 checks alike on a Deployment's and a ReplicaSet's template: the selector
    (required, matching the template's labels, immutable) and restartPolicy Always; the pod
    spec, for the caller's further checks."""
    pod_spec = _template_selector(spec, "spec", what, errors)
    if old is not None and spec.get("selector") != (old.get("spec") or {}).get("selector"):
        errors.add("Invalid", "spec.selector", "field is immutable", spec.get("selector"))
    if pod_spec.get("restartPolicy") != "Always":
        errors.add("NotSupported", "spec.template.spec.restartPolicy",
                   'supported values: "Always"', pod_spec.get("restartPolicy"))
    return pod_spec


def _replicaset(obj: Obj, old: Obj | None, errors: FieldErrors) -> None:
    """`SetDefaults_ReplicaSet` (replicas 1) and `ValidateReplicaSet`'s selector rules (required,
    matching the template, immutable in apps/v1); restartPolicy Always."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _replicated_template(spec, old, "replicaset", errors)


JOB_NAME_LABELS = ("job-name", "batch.kubernetes.io/job-name")
CONTROLLER_UID_LABELS = ("controller-uid", "batch.kubernetes.io/controller-uid")


def _generate_job_selector(obj: Obj) -> None:
    """The Job strategy's `PrepareForCreate` → `generateSelector` (pkg/registry/batch/job/
    strategy.go), unless `spec.manualSelector` is true: the template gains the legacy and the
    `batch.kubernetes.io/` job-name and controller-uid labels (those it lacks), and the selector
    `batch.kubernetes.io/controller-uid: <uid>`, which makes the pods this Job's alone."""
    spec = obj.setdefault("spec", {})
    if spec.get("manualSelector") is True:
        return
    meta = obj["metadata"]
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).get("labels") or {}
    for key in JOB_NAME_LABELS:
        labels.setdefault(key, str(meta.get("name") or ""))
    for key in CONTROLLER_UID_LABELS:
        labels.setdefault(key, str(meta.get("uid") or ""))
    spec["template"]["metadata"]["labels"] = labels
    selector = spec.get("selector") or {}
    match = dict(selector.get("matchLabels") or {})
    match.setdefault(CONTROLLER_UID_LABELS[1], str(meta.get("uid") or ""))
    spec["selector"] = dict(selector, matchLabels=match)


def _job_spec(spec: Obj, path: str, errors: FieldErrors, *, defaults: bool) -> None:
    """`SetDefaults_Job` (batch/v1, a Job's own spec only: a CronJob's jobTemplate gets the pod
    defaults alone) and the restartPolicy rule. The selector is generated before this
    (`_generate_job_selector`)."""
    if defaults:
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = spec["parallelism"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit",
                        6 if spec.get("backoffLimitPerIndex") is None else 2147483647)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy",
                        "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    pod_spec = template.setdefault("spec", {})
    default_pod_spec(pod_spec)
    if pod_spec.get("restartPolicy") not in ("OnFailure", "Never"):
        errors.add("NotSupported", f"{path}.template.spec.restartPolicy",
                   'supported values: "OnFailure", "Never"', pod_spec.get("restartPolicy"))
    _validate_pod_spec(pod_spec, f"{path}.template.spec", errors)


def _cronjob(obj: Obj, errors: FieldErrors) -> None:
    """`SetDefaults_CronJob` (batch/v1); a schedule is required (its syntax is not checked)."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    if not spec.get("schedule"):
        errors.add("Required", "spec.schedule")
    job_template = spec.setdefault("jobTemplate", {})
    _job_spec(job_template.setdefault("spec", {}), "spec.jobTemplate.spec", errors,
              defaults=False)


def _configmap(obj: Obj, errors: FieldErrors) -> None:
    size = 0
    for fld in ("data", "binaryData"):
        values = obj.get(fld) or {}
        if not isinstance(values, dict):
            raise bad_request(f"ConfigMap {fld} must be an object")
        for key, value in values.items():
            if not _CONFIGMAP_KEY.match(key) or len(key) > 253:
                errors.add("Invalid", f"{fld}[{key}]", "a valid config key must consist of "
                           "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                           "'KEY_NAME',  or 'key-name', regex used for validation is "
                           "'[-._a-zA-Z0-9]+')", key)
            if not isinstance(value, str):
                raise bad_request("ConfigMap in version \"v1\" cannot be handled as a ConfigMap: "
                                  f"json: cannot unmarshal {type(value).__name__} into Go "
                                  f"struct field ConfigMap.{fld} of type string")
            size += len(key) + len(value.encode())
    if size > _MAX_CONFIGMAP_BYTES:
        errors.add("TooLong", "[]", f"must have at most {_MAX_CONFIGMAP_BYTES} bytes")

