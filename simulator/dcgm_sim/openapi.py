"""OpenAPI documents: `/openapi/v2`, the `/openapi/v3` discovery document and one
`/openapi/v3/<group-version>` document per served group version, and the unknown-field check of
`fieldValidation=Strict|Warn`.

Built from a compact field table (`_DEFS`), not the full upstream schemas: the kinds the
project's objects use (DaemonSet, Pod template, Service, ConfigMap, Namespace, and what
docs/guard.yaml, docs/job.yaml and docs/rbac.yaml apply: Deployment, Job, CronJob,
ServiceAccount, Role, RoleBinding, ClusterRole, ClusterRoleBinding) are modelled with
every field name upstream's types have at v1.32, their nested objects the project does not use
(probes, security contexts, volume sources, statuses, ...) are
`x-kubernetes-preserve-unknown-fields` objects, and every other served kind is a root object
with `apiVersion`, `kind`, `metadata` and anything else preserved. A valid object is therefore
never refused; an unknown field of a modelled object is.

What kubectl does with them (v1.32): `create/apply/replace -f` (default `--validate=strict`)
read each group version's PATCH operation in `/openapi/v3`; it declares the `fieldValidation`
query parameter, so kubectl leaves validation to the server and sends `fieldValidation=Strict`,
answered here as upstream does (400, `strict decoding error: unknown field "spec.foo"`).
`kubectl explain` renders the `/openapi/v3` document's schemas. PATCH operations accept JSON
and merge patches only, so `kubectl apply` builds its strategic merge patch from its own
compiled-in types, as it did without OpenAPI. `/openapi/v2` is JSON: a request that accepts
only protobuf (client-go's `OpenAPISchema`) is 406. Pure.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Collection, Iterator
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.encoding import dumps
from dcgm_sim.jsoncopy import clone
from dcgm_sim.kinds import Kind, ResourceName

Obj = dict[str, Any]

_PREFIXES = {
    "meta.": "io.k8s.apimachinery.pkg.apis.meta.v1.",
    "core.": "io.k8s.api.core.v1.",
    "apps.": "io.k8s.api.apps.v1.",
    "batch.": "io.k8s.api.batch.v1.",
    "rbac.": "io.k8s.api.rbac.v1.",
}
_PRESERVE: Obj = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

# name -> (description, {field: type}). A type is "string", "integer", "boolean", "number",
# "intstr", "any" (an object kept as sent), "map" (string values), "qmap" (quantities),
# "@Name" (a definition), "[]type" (a list of it). A definition whose name ends in "+" keeps
# fields it does not list (`x-kubernetes-preserve-unknown-fields`).
_DEFS: dict[str, tuple[str, dict[str, str]]] = {
    "meta.ObjectMeta": (
        "ObjectMeta is metadata that all persisted resources must have, which includes all "
        "objects users must create.", {
            "name": "string", "generateName": "string", "namespace": "string",
            "selfLink": "string", "uid": "string", "resourceVersion": "string",
            "generation": "integer", "creationTimestamp": "string",
            "deletionTimestamp": "string", "deletionGracePeriodSeconds": "integer",
            "labels": "map", "annotations": "map", "ownerReferences": "[]@meta.OwnerReference",
            "finalizers": "[]string", "managedFields": "[]any"}),
    "meta.OwnerReference": (
        "OwnerReference contains enough information to let you identify an owning object.", {
            "apiVersion": "string", "kind": "string", "name": "string", "uid": "string",
            "controller": "boolean", "blockOwnerDeletion": "boolean"}),
    "meta.LabelSelector": (
        "A label selector is a label query over a set of resources.", {
            "matchLabels": "map", "matchExpressions": "[]@meta.LabelSelectorRequirement"}),
    "meta.LabelSelectorRequirement": (
        "A label selector requirement is a selector that contains values, a key, and an "
        "operator that relates the key and values.", {
            "key": "string", "operator": "string", "values": "[]string"}),
    "apps.DaemonSet": (
        "DaemonSet represents the configuration of a daemon set.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@apps.DaemonSetSpec", "status": "@apps.DaemonSetStatus+"}),
    "apps.DaemonSetSpec": (
        "DaemonSetSpec is the specification of a daemon set.", {
            "selector": "@meta.LabelSelector", "template": "@core.PodTemplateSpec",
            "updateStrategy": "@apps.DaemonSetUpdateStrategy", "minReadySeconds": "integer",
            "revisionHistoryLimit": "integer"}),
    "apps.DaemonSetUpdateStrategy": (
        "DaemonSetUpdateStrategy is a struct used to control the update strategy for a "
        "DaemonSet.", {"type": "string", "rollingUpdate": "@apps.RollingUpdateDaemonSet"}),
    "apps.RollingUpdateDaemonSet": (
        "Spec to control the desired behavior of daemon set rolling update.", {
            "maxUnavailable": "intstr", "maxSurge": "intstr"}),
    "apps.DaemonSetStatus+": (
        "DaemonSetStatus represents the current status of a daemon set.", {
            "currentNumberScheduled": "integer", "numberMisscheduled": "integer",
            "desiredNumberScheduled": "integer", "numberReady": "integer",
            "observedGeneration": "integer", "updatedNumberScheduled": "integer",
            "numberAvailable": "integer", "numberUnavailable": "integer",
            "collisionCount": "integer", "conditions": "[]any"}),
    "core.PodTemplateSpec": (
        "PodTemplateSpec describes the data a pod should have when created from a template", {
            "metadata": "@meta.ObjectMeta", "spec": "@core.PodSpec"}),
    "core.Pod": (
        "Pod is a collection of containers that can run on a host.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@core.PodSpec", "status": "any"}),
    "core.PodSpec": (
        "PodSpec is a description of a pod.", {
            "volumes": "[]@core.Volume+", "initContainers": "[]@core.Container",
            "containers": "[]@core.Container", "ephemeralContainers": "[]any",
            "restartPolicy": "string", "terminationGracePeriodSeconds": "integer",
            "activeDeadlineSeconds": "integer", "dnsPolicy": "string", "nodeSelector": "map",
            "serviceAccountName": "string", "serviceAccount": "string",
            "automountServiceAccountToken": "boolean", "nodeName": "string",
            "hostNetwork": "boolean", "hostPID": "boolean", "hostIPC": "boolean",
            "shareProcessNamespace": "boolean", "securityContext": "any",
            "imagePullSecrets": "[]any", "hostname": "string", "subdomain": "string",
            "affinity": "any", "schedulerName": "string", "tolerations": "[]@core.Toleration",
            "hostAliases": "[]any", "priorityClassName": "string", "priority": "integer",
            "dnsConfig": "any", "readinessGates": "[]any", "runtimeClassName": "string",
            "enableServiceLinks": "boolean", "preemptionPolicy": "string", "overhead": "qmap",
            "topologySpreadConstraints": "[]any", "setHostnameAsFQDN": "boolean",
            "os": "any", "hostUsers": "boolean", "schedulingGates": "[]any",
            "resourceClaims": "[]@core.PodResourceClaim",
            "resources": "@core.ResourceRequirements"}),
    "core.Container": (
        "A single application container that you want to run within a pod.", {
            "name": "string", "image": "string", "command": "[]string", "args": "[]string",
            "workingDir": "string", "ports": "[]@core.ContainerPort", "envFrom": "[]any",
            "env": "[]@core.EnvVar", "resources": "@core.ResourceRequirements",
            "resizePolicy": "[]any", "restartPolicy": "string",
            "volumeMounts": "[]@core.VolumeMount", "volumeDevices": "[]any",
            "livenessProbe": "any", "readinessProbe": "any", "startupProbe": "any",
            "lifecycle": "any", "terminationMessagePath": "string",
            "terminationMessagePolicy": "string", "imagePullPolicy": "string",
            "securityContext": "any", "stdin": "boolean", "stdinOnce": "boolean",
            "tty": "boolean"}),
    "core.ContainerPort": (
        "ContainerPort represents a network port in a single container.", {
            "name": "string", "hostPort": "integer", "containerPort": "integer",
            "protocol": "string", "hostIP": "string"}),
    "core.EnvVar": (
        "EnvVar represents an environment variable present in a Container.", {
            "name": "string", "value": "string", "valueFrom": "any"}),
    "core.ResourceRequirements": (
        "ResourceRequirements describes the compute resource requirements.", {
            "limits": "qmap", "requests": "qmap", "claims": "[]@core.ResourceClaim"}),
    "core.ResourceClaim": (
        "ResourceClaim references one entry in PodSpec.ResourceClaims.", {
            "name": "string", "request": "string"}),
    "core.PodResourceClaim": (
        "PodResourceClaim references exactly one ResourceClaim, either directly or by naming "
        "a ResourceClaimTemplate.", {
            "name": "string", "resourceClaimName": "string",
            "resourceClaimTemplateName": "string"}),
    "core.VolumeMount": (
        "VolumeMount describes a mounting of a Volume within a container.", {
            "name": "string", "readOnly": "boolean", "recursiveReadOnly": "string",
            "mountPath": "string", "subPath": "string", "mountPropagation": "string",
            "subPathExpr": "string"}),
    "core.Volume+": (
        "Volume represents a named volume in a pod that may be accessed by any container in "
        "the pod.", {"name": "string", "hostPath": "any", "configMap": "any",
                     "secret": "any", "emptyDir": "any", "projected": "any"}),
    "core.Toleration": (
        "The pod this Toleration is attached to tolerates any taint that matches the triple "
        "<key,value,effect> using the matching operator <operator>.", {
            "key": "string", "operator": "string", "value": "string", "effect": "string",
            "tolerationSeconds": "integer"}),
    "core.Service": (
        "Service is a named abstraction of software service (for example, mysql) consisting "
        "of local port (for example 3306) that the proxy listens on, and the selector that "
        "determines which pods will answer requests sent through the proxy.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@core.ServiceSpec", "status": "any"}),
    "core.ServiceSpec": (
        "ServiceSpec describes the attributes that a user creates on a service.", {
            "ports": "[]@core.ServicePort", "selector": "map", "clusterIP": "string",
            "clusterIPs": "[]string", "type": "string", "externalIPs": "[]string",
            "sessionAffinity": "string", "loadBalancerIP": "string",
            "loadBalancerSourceRanges": "[]string", "externalName": "string",
            "externalTrafficPolicy": "string", "healthCheckNodePort": "integer",
            "publishNotReadyAddresses": "boolean", "sessionAffinityConfig": "any",
            "ipFamilies": "[]string", "ipFamilyPolicy": "string",
            "allocateLoadBalancerNodePorts": "boolean", "loadBalancerClass": "string",
            "internalTrafficPolicy": "string", "trafficDistribution": "string"}),
    "core.ServicePort": (
        "ServicePort contains information on service's port.", {
            "name": "string", "protocol": "string", "appProtocol": "string",
            "port": "integer", "targetPort": "intstr", "nodePort": "integer"}),
    "core.ConfigMap": (
        "ConfigMap holds configuration data for pods to consume.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "data": "map", "binaryData": "map", "immutable": "boolean"}),
    "core.Namespace": (
        "Namespace provides a scope for Names. Use of multiple namespaces is optional.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@core.NamespaceSpec", "status": "any"}),
    "core.NamespaceSpec": (
        "NamespaceSpec describes the attributes on a Namespace.", {"finalizers": "[]string"}),
    "apps.Deployment": (
        "Deployment enables declarative updates for Pods and ReplicaSets.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@apps.DeploymentSpec", "status": "@apps.DeploymentStatus+"}),
    "apps.DeploymentSpec": (
        "DeploymentSpec is the specification of the desired behavior of the Deployment.", {
            "replicas": "integer", "selector": "@meta.LabelSelector",
            "template": "@core.PodTemplateSpec", "strategy": "@apps.DeploymentStrategy",
            "minReadySeconds": "integer", "revisionHistoryLimit": "integer",
            "paused": "boolean", "progressDeadlineSeconds": "integer"}),
    "apps.DeploymentStrategy": (
        "DeploymentStrategy describes how to replace existing pods with new ones.", {
            "type": "string", "rollingUpdate": "@apps.RollingUpdateDeployment"}),
    "apps.RollingUpdateDeployment": (
        "Spec to control the desired behavior of rolling update.", {
            "maxUnavailable": "intstr", "maxSurge": "intstr"}),
    "apps.DeploymentStatus+": (
        "DeploymentStatus is the most recently observed status of the Deployment.", {
            "observedGeneration": "integer", "replicas": "integer",
            "updatedReplicas": "integer", "readyReplicas": "integer",
            "availableReplicas": "integer", "unavailableReplicas": "integer",
            "conditions": "[]any", "collisionCount": "integer"}),
    "batch.Job": (
        "Job represents the configuration of a single job.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@batch.JobSpec", "status": "@batch.JobStatus+"}),
    "batch.JobSpec": (
        "JobSpec describes how the job execution will look like.", {
            "parallelism": "integer", "completions": "integer",
            "activeDeadlineSeconds": "integer", "podFailurePolicy": "@batch.PodFailurePolicy",
            "successPolicy": "any", "backoffLimit": "integer",
            "backoffLimitPerIndex": "integer", "maxFailedIndexes": "integer",
            "selector": "@meta.LabelSelector", "manualSelector": "boolean",
            "template": "@core.PodTemplateSpec", "ttlSecondsAfterFinished": "integer",
            "completionMode": "string", "suspend": "boolean",
            "podReplacementPolicy": "string", "managedBy": "string"}),
    "batch.PodFailurePolicy": (
        "PodFailurePolicy describes how failed pods influence the backoffLimit.", {
            "rules": "[]@batch.PodFailurePolicyRule"}),
    "batch.PodFailurePolicyRule": (
        "PodFailurePolicyRule describes how a pod failure is handled when the requirements "
        "are met. One of onExitCodes and onPodConditions, but not both, can be used in each "
        "rule.", {
            "action": "string", "onExitCodes": "@batch.PodFailurePolicyOnExitCodesRequirement",
            "onPodConditions": "[]@batch.PodFailurePolicyOnPodConditionsPattern"}),
    "batch.PodFailurePolicyOnExitCodesRequirement": (
        "PodFailurePolicyOnExitCodesRequirement describes the requirement for handling a "
        "failed pod based on its container exit codes.", {
            "containerName": "string", "operator": "string", "values": "[]integer"}),
    "batch.PodFailurePolicyOnPodConditionsPattern": (
        "PodFailurePolicyOnPodConditionsPattern describes a pattern for matching an actual pod "
        "condition type.", {"type": "string", "status": "string"}),
    "batch.JobStatus+": (
        "JobStatus represents the current state of a Job.", {
            "conditions": "[]any", "startTime": "string", "completionTime": "string",
            "active": "integer", "succeeded": "integer", "failed": "integer",
            "terminating": "integer", "completedIndexes": "string",
            "failedIndexes": "string", "uncountedTerminatedPods": "any", "ready": "integer"}),
    "batch.CronJob": (
        "CronJob represents the configuration of a single cron job.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "spec": "@batch.CronJobSpec", "status": "@batch.CronJobStatus+"}),
    "batch.CronJobSpec": (
        "CronJobSpec describes how the job execution will look like and when it will "
        "actually run.", {
            "schedule": "string", "timeZone": "string", "startingDeadlineSeconds": "integer",
            "concurrencyPolicy": "string", "suspend": "boolean",
            "jobTemplate": "@batch.JobTemplateSpec", "successfulJobsHistoryLimit": "integer",
            "failedJobsHistoryLimit": "integer"}),
    "batch.JobTemplateSpec": (
        "JobTemplateSpec describes the data a Job should have when created from a template", {
            "metadata": "@meta.ObjectMeta", "spec": "@batch.JobSpec"}),
    "batch.CronJobStatus+": (
        "CronJobStatus represents the current state of a cron job.", {
            "active": "[]any", "lastScheduleTime": "string", "lastSuccessfulTime": "string"}),
    "core.ServiceAccount": (
        "ServiceAccount binds together: * a name, understood by users, and perhaps by "
        "peripheral systems, for an identity * a principal that can be authenticated and "
        "authorized * a set of secrets", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "secrets": "[]any", "imagePullSecrets": "[]any",
            "automountServiceAccountToken": "boolean"}),
    "rbac.Role": (
        "Role is a namespaced, logical grouping of PolicyRules that can be referenced as a "
        "unit by a RoleBinding.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "rules": "[]@rbac.PolicyRule"}),
    "rbac.ClusterRole": (
        "ClusterRole is a cluster level, logical grouping of PolicyRules that can be "
        "referenced as a unit by a RoleBinding or ClusterRoleBinding.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "rules": "[]@rbac.PolicyRule", "aggregationRule": "@rbac.AggregationRule"}),
    "rbac.AggregationRule": (
        "AggregationRule describes how to locate ClusterRoles to aggregate into the "
        "ClusterRole", {"clusterRoleSelectors": "[]@meta.LabelSelector"}),
    "rbac.PolicyRule": (
        "PolicyRule holds information that describes a policy rule, but does not contain "
        "information about who the rule applies to or which namespace the rule applies to.", {
            "verbs": "[]string", "apiGroups": "[]string", "resources": "[]string",
            "resourceNames": "[]string", "nonResourceURLs": "[]string"}),
    "rbac.RoleBinding": (
        "RoleBinding references a role, but does not contain it.  It can reference a Role in "
        "the same namespace or a ClusterRole in the global namespace. It adds who information "
        "via Subjects and namespace information by which namespace it exists in.  "
        "RoleBindings in a given namespace only have effect in that namespace.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "subjects": "[]@rbac.Subject", "roleRef": "@rbac.RoleRef"}),
    "rbac.ClusterRoleBinding": (
        "ClusterRoleBinding references a ClusterRole, but not contain it.  It can reference a "
        "ClusterRole in the global namespace, and adds who information via Subject.", {
            "apiVersion": "string", "kind": "string", "metadata": "@meta.ObjectMeta",
            "subjects": "[]@rbac.Subject", "roleRef": "@rbac.RoleRef"}),
    "rbac.RoleRef": (
        "RoleRef contains information that points to the role being used", {
            "apiGroup": "string", "kind": "string", "name": "string"}),
    "rbac.Subject": (
        "Subject contains a reference to the object or user identities a role binding applies "
        "to.  This can either hold a direct API object reference, or a value for non-objects "
        "such as user and group names.", {
            "kind": "string", "apiGroup": "string", "name": "string", "namespace": "string"}),
}
_MODELLED = {kinds.DAEMONSET: "apps.DaemonSet", kinds.POD: "core.Pod",
             kinds.SERVICE: "core.Service", kinds.CONFIGMAP: "core.ConfigMap",
             kinds.NAMESPACE: "core.Namespace", kinds.DEPLOYMENT: "apps.Deployment",
             kinds.JOB: "batch.Job", kinds.CRON_JOB: "batch.CronJob",
             kinds.SERVICE_ACCOUNT: "core.ServiceAccount", kinds.ROLE: "rbac.Role",
             kinds.ROLE_BINDING: "rbac.RoleBinding", kinds.CLUSTER_ROLE: "rbac.ClusterRole",
             kinds.CLUSTER_ROLE_BINDING: "rbac.ClusterRoleBinding"}
_GROUP_PACKAGES = {"": "io.k8s.api.core", "apiextensions.k8s.io":
                   "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions"}


def _expand(short: str) -> str:
    short = short.rstrip("+")
    for prefix, full in _PREFIXES.items():
        if short.startswith(prefix):
            return full + short[len(prefix):]
    return short


_TABLE: dict[str, tuple[str, dict[str, str], bool]] = {
    _expand(name): (doc, fields, name.endswith("+")) for name, (doc, fields) in _DEFS.items()}


def definition_name(kind: Kind) -> str:
    """`io.k8s.api.apps.v1.DaemonSet`; a custom resource's reversed group, as upstream names a
    CRD's schema (`com.nvidia.v1.ClusterPolicy`)."""
    if kind in _MODELLED:
        return _expand(_MODELLED[kind])
    package = _GROUP_PACKAGES.get(kind.group)
    if package is None:
        if kind.group.endswith(".k8s.io"):
            package = "io.k8s.api." + kind.group.removesuffix(".k8s.io")
        else:
            package = ".".join(reversed(kind.group.split(".")))
    return f"{package}.{kind.version}.{kind.kind}"


def _gvk(kind: Kind) -> Obj:
    return {"group": kind.group, "kind": kind.kind, "version": kind.version}


def _type(spec: str, ref_prefix: str) -> Obj:
    if spec.startswith("[]"):
        return {"type": "array", "items": _type(spec[2:], ref_prefix)}
    if spec.startswith("@"):
        return {"$ref": ref_prefix + _expand(spec[1:])}
    if spec == "any":
        return dict(_PRESERVE)
    if spec == "intstr":
        return {"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True}
    if spec == "map":
        return {"type": "object", "additionalProperties": {"type": "string"}}
    if spec == "qmap":
        return {"type": "object", "additionalProperties": {
            "type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True}}
    return {"type": spec}


def _schema(name: str, ref_prefix: str) -> Obj:
    doc, fields, preserve = _TABLE[name]
    out: Obj = {"description": doc, "type": "object",
                "properties": {f: _type(t, ref_prefix) for f, t in fields.items()}}
    if preserve:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _root_schema(kind: Kind, ref_prefix: str) -> Obj:
    name = definition_name(kind)
    if name in _TABLE:
        out = _schema(name, ref_prefix)
    else:
        out = {"description": f"{kind.kind} (fields beyond apiVersion, kind and metadata are "
                              "not described by this server).", "type": "object",
               "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                              "metadata": _type("@meta.ObjectMeta", ref_prefix)},
               "x-kubernetes-preserve-unknown-fields": True}
    out["x-kubernetes-group-version-kind"] = [_gvk(kind)]
    return out


def _refs(schema: Any) -> Iterator[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[-1]
            else:
                yield from _refs(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _refs(value)


def _schemas(served: list[Kind], ref_prefix: str) -> dict[str, Obj]:
    """The served kinds' schemas and every definition they reference."""
    out = {definition_name(k): _root_schema(k, ref_prefix) for k in served}
    pending = [r for s in list(out.values()) for r in _refs(s)]
    while pending:
        name = pending.pop()
        if name not in out:
            out[name] = _schema(name, ref_prefix)
            pending.extend(_refs(out[name]))
    return dict(sorted(out.items()))


_QUERY_PARAMS = {
    "dryRun": "When present, indicates that modifications should not be persisted.",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making "
                    "these changes.",
    "fieldValidation": "fieldValidation instructs the server on how to handle objects in the "
                       "request containing unknown or duplicate fields: Ignore, Warn or "
                       "Strict.",
}
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")


def _operation(kind: Kind, action: str, ref: Obj, body: Collection[str] = (),
               writes: bool = False) -> Obj:
    op: Obj = {"operationId": f"{action}{kind.kind}", "responses": {
        "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}},
        "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _gvk(kind)}
    if body:
        op["requestBody"] = {"content": {media: {"schema": ref} for media in body},
                             "required": True}
    if writes:
        op["parameters"] = [{"name": name, "in": "query", "description": text,
                             "schema": {"type": "string", "uniqueItems": True}}
                            for name, text in _QUERY_PARAMS.items()]
    return op


def _paths(kind: Kind, ref: Obj, v3: bool) -> dict[str, Obj]:
    base = kind.collection_path("{namespace}" if kind.namespaced else None)
    if kind in kinds.ACCESS_REVIEWS:
        return {base: {"post": _operation(kind, "post", ref, ["*/*"], True)}}
    patch_types = _PATCH_TYPES if v3 else ("application/json",)
    item = {"get": _operation(kind, "get", ref),
            "put": _operation(kind, "put", ref, ["*/*"], True),
            "patch": _operation(kind, "patch", ref, patch_types, True),
            "delete": _operation(kind, "delete", {"type": "object"})}
    return {base: {"get": _operation(kind, "list", {"type": "object"}),
                   "post": _operation(kind, "post", ref, ["*/*"], True)},
            base + "/{name}": item}


def _served(group: str, version: str) -> list[Kind]:
    return [k for k in kinds.ALL if k.group == group and k.version == version]


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _group_versions(disabled: Collection[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k in kinds.ALL:
        if (k.group, k.version) not in out and k.group not in disabled:
            out.append((k.group, k.version))
    return out


@functools.lru_cache(maxsize=64)
def _v3_bytes(group: str, version: str) -> bytes | None:
    served = _served(group, version)
    if not served:
        return None
    prefix = "#/components/schemas/"
    paths: Obj = {}
    for k in served:
        paths.update(_paths(k, {"$ref": prefix + definition_name(k)}, True))
    doc = {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0-sim"},
           "paths": paths, "components": {"schemas": _schemas(served, prefix)}}
    return dumps(doc)


def _hash(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest().upper()


def v3_document(group: str, version: str, disabled: Collection[str] = ()) -> bytes | None:
    """The `/openapi/v3/apis/<group>/<version>` (or `api/v1`) document, None when not served."""
    if group in disabled:
        return None
    return _v3_bytes(group, version)


def v3_discovery(disabled: Collection[str] = ()) -> Obj:
    """`/openapi/v3`: each served group version's document, named with its content hash."""
    paths: Obj = {}
    for group, version in _group_versions(disabled):
        data = _v3_bytes(group, version)
        assert data is not None
        path = _gv_path(group, version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={_hash(data)}"}
    return {"paths": paths}


def v3_target(parts: tuple[str, ...]) -> tuple[str, str] | None:
    """(group, version) of `/openapi/v3/api/v1` or `/openapi/v3/apis/<g>/<v>` path parts."""
    rest = parts[2:]
    if len(rest) == 2 and rest[0] == "api":
        return "", rest[1]
    if len(rest) == 3 and rest[0] == "apis":
        return rest[1], rest[2]
    return None


@functools.lru_cache(maxsize=8)
def _v2_bytes(disabled: frozenset[str]) -> bytes:
    served = [k for k in kinds.ALL if k.group not in disabled]
    prefix = "#/definitions/"
    paths: Obj = {}
    for k in served:
        for path, item in _paths(k, {"$ref": prefix + definition_name(k)}, False).items():
            for op in item.values():
                _to_v2(op)
            paths[path] = item
    doc = {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0-sim"},
           "paths": paths, "definitions": _schemas(served, prefix)}
    return dumps(doc)


def _to_v2(op: Obj) -> None:
    """A v3 operation in v2's shape: body parameter, produces/consumes, typed parameters."""
    body = op.pop("requestBody", None)
    params = [{"name": p["name"], "in": "query", "description": p["description"],
               "type": "string", "uniqueItems": True} for p in op.get("parameters", [])]
    if body is not None:
        op["consumes"] = list(body["content"])
        params.insert(0, {"name": "body", "in": "body", "required": True,
                          "schema": clone(next(iter(body["content"].values()))["schema"])})
    if params:
        op["parameters"] = params
    op["produces"] = ["application/json"]
    op["responses"] = {"200": {"description": "OK",
                               "schema": op["responses"]["200"]["content"][
                                   "application/json"]["schema"]}}


def v2_document(disabled: Collection[str] = ()) -> bytes:
    return _v2_bytes(frozenset(disabled))


def accepts_json(accept: str) -> bool:
    """Whether an Accept header admits JSON (no header, `*/*` and `application/*` do)."""
    if not accept.strip():
        return True
    for part in accept.split(","):
        media = part.split(";")[0].strip().lower()
        if media in ("*/*", "application/*", "application/json"):
            return True
    return False


# ---- fieldValidation ------------------------------------------------------------------------

def unknown_fields(kind: ResourceName, body: Any, *, patch: bool = False) -> list[str]:
    """Paths of the fields of `body` this kind's schema does not declare, as upstream's strict
    decoder names them (`spec.template.spec.containers[0].foo`). A patch's directives (`$patch`,
    `$setElementOrder/...`) and deletions (null) are not fields."""
    kind = kinds.resolve(kind)
    if not isinstance(body, dict):
        return []
    out: list[str] = []
    _walk(_root_schema(kind, ""), body, "", out, patch)
    return out


def _walk(schema: Obj, value: Any, path: str, out: list[str], patch: bool) -> None:
    ref = schema.get("$ref")
    if ref is not None:
        schema = _schema(ref, "")
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _walk(items, item, f"{path}[{i}]", out, patch)
        return
    if not isinstance(value, dict) or "properties" not in schema:
        return
    properties = schema["properties"]
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, item in value.items():
        if patch and (key.startswith("$") or item is None):
            continue
        where = f"{path}.{key}" if path else key
        if key in properties:
            _walk(properties[key], item, where, out, patch)
        elif not preserve:
            out.append(where)


def strict_message(kind: Kind, fields: list[str], *, patch: bool = False) -> str:
    """The 400 of `fieldValidation=Strict` (create/update: the decoder's wording)."""
    detail = "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in fields)
    if patch:
        return detail
    return f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: {detail}'


def warning_header(fields: list[str]) -> str:
    """The `Warning` header of `fieldValidation=Warn` (one warn-code 299 entry per field)."""
    return ", ".join('299 - "unknown field \\"' + f + '\\""' for f in fields)
