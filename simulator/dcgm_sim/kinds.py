"""The simulated API server's own resource catalog: every kind it serves, as upstream lists it.

The sim is the judge of the tool, so it keeps its own answers: nothing here is taken from the
tool's table (`migrator.model.kinds`); tests/sim/test_catalog_discovery.py checks that table
against what this catalog serves. One row per served resource: group, version, plural, kind,
scope, short names, verbs, categories and subresources, as kube-apiserver's discovery lists them
(kubernetes/kubernetes `api/discovery/*.json`, the generated legacy discovery documents:
`api__v1.json` at 4d817e79, `apis__batch__v1.json` at 2e090810,
`apis__rbac.authorization.k8s.io__v1.json` at 025f2834, `apis__authorization.k8s.io__v1.json`
at 95f08499, `apis__apiextensions.k8s.io__v1.json` at 6732d913,
`apis__discovery.k8s.io__v1.json` at 4a0608cb, `apis__events.k8s.io__v1.json` at 31d0821a,
`apis__resource.k8s.io__v1.json` at 4e592f6c), and for custom resources as their CRDs declare:
NVIDIA/gpu-operator a22dbf671 `deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml`
(cluster-scoped, no short name, v1, status) and `nvidia.com_gpuclusters.yaml` (cluster-scoped,
short name `gc`, v1alpha1, status); prometheus-operator
`example/prometheus-operator-crd/monitoring.coreos.com_*.yaml` (namespaced; `smon`, `pmon`,
`prom`, `promrule`; category `prometheus-operator`).

What the sim does with them: controllers run DaemonSets, Deployments, ReplicaSets, Jobs
(`WORKLOADS`), EndpointSlices and Endpoints; `STORED_ONLY` kinds are kept and served but no
controller acts on them (a CronJob makes no Job). `events.k8s.io/v1` events are the core
Events under another version, converted at the edge (`eventsapi`); `BY_KIND["Event"]` is the
core kind, the one the store files Events under. Subresources served: `status` where listed,
`pods/log`. Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

CRUD: tuple[str, ...] = (
    "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
CREATE_ONLY: tuple[str, ...] = ("create",)
# Subresource -> the verbs discovery lists for it (api__v1.json: `pods/status`, `pods/log`).
SUBRESOURCE_VERBS: dict[str, tuple[str, ...]] = {
    "status": ("get", "patch", "update"), "log": ("get",)}


@dataclass(frozen=True)
class Kind:
    """One served resource, as its discovery entry describes it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = CRUD
    categories: tuple[str, ...] = ()

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`plural` for core, `plural.group` otherwise (as RBAC and kubectl name them)."""
        return resource_key(self.group, self.plural)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def collection_path(self, namespace: str | None = None) -> str:
        """REST path of the collection, namespaced when the kind is and a namespace is given."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection_path(namespace)}/{name}"


def resource_key(group: str, plural: str) -> str:
    return f"{plural}.{group}" if group else plural


_STATUS = ("status",)
_ALL = ("all",)

# core/v1 (api__v1.json)
NAMESPACE = Kind("", "v1", "namespaces", "Namespace", False, ("ns",), _STATUS,
                 verbs=tuple(v for v in CRUD if v != "deletecollection"))
NODE = Kind("", "v1", "nodes", "Node", False, ("no",), _STATUS)
POD = Kind("", "v1", "pods", "Pod", True, ("po",), ("status", "log"), categories=_ALL)
SERVICE = Kind("", "v1", "services", "Service", True, ("svc",), _STATUS, categories=_ALL)
CONFIGMAP = Kind("", "v1", "configmaps", "ConfigMap", True, ("cm",))
EVENT = Kind("", "v1", "events", "Event", True, ("ev",))
ENDPOINTS = Kind("", "v1", "endpoints", "Endpoints", True, ("ep",))
SERVICE_ACCOUNT = Kind("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",))
# apps/v1
DAEMONSET = Kind("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), _STATUS, categories=_ALL)
CONTROLLER_REVISION = Kind("apps", "v1", "controllerrevisions", "ControllerRevision", True)
DEPLOYMENT = Kind("apps", "v1", "deployments", "Deployment", True, ("deploy",), _STATUS,
                  categories=_ALL)
REPLICA_SET = Kind("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), _STATUS,
                   categories=_ALL)
# batch/v1
JOB = Kind("batch", "v1", "jobs", "Job", True, (), _STATUS, categories=_ALL)
CRON_JOB = Kind("batch", "v1", "cronjobs", "CronJob", True, ("cj",), _STATUS, categories=_ALL)
# discovery.k8s.io/v1, events.k8s.io/v1, coordination.k8s.io/v1
ENDPOINTSLICE = Kind("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
EVENTS_V1 = Kind("events.k8s.io", "v1", "events", "Event", True, ("ev",))
LEASE = Kind("coordination.k8s.io", "v1", "leases", "Lease", True)
# rbac.authorization.k8s.io/v1
_RBAC = "rbac.authorization.k8s.io"
ROLE = Kind(_RBAC, "v1", "roles", "Role", True)
ROLE_BINDING = Kind(_RBAC, "v1", "rolebindings", "RoleBinding", True)
CLUSTER_ROLE = Kind(_RBAC, "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDING = Kind(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
# authorization.k8s.io/v1: create-only reviews
SELF_SUBJECT_ACCESS_REVIEW = Kind("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                                  "SelfSubjectAccessReview", False, verbs=CREATE_ONLY)
SUBJECT_ACCESS_REVIEW = Kind("authorization.k8s.io", "v1", "subjectaccessreviews",
                             "SubjectAccessReview", False, verbs=CREATE_ONLY)
ACCESS_REVIEWS: tuple[Kind, ...] = (SELF_SUBJECT_ACCESS_REVIEW, SUBJECT_ACCESS_REVIEW)
# apiextensions.k8s.io/v1, resource.k8s.io/v1
CRD = Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
           False, ("crd", "crds"), _STATUS, categories=("api-extensions",))
RESOURCE_CLAIM_TEMPLATE = Kind(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True)
RESOURCE_CLAIM = Kind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, (),
                      _STATUS)
# Custom resources (their CRDs, above)
CLUSTER_POLICY = Kind("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False, (), _STATUS)
GPU_CLUSTER = Kind("nvidia.com", "v1alpha1", "gpuclusters", "GPUCluster", False, ("gc",), _STATUS)
_PROM = "monitoring.coreos.com"
_PROM_CATEGORY = ("prometheus-operator",)
SERVICE_MONITOR = Kind(_PROM, "v1", "servicemonitors", "ServiceMonitor", True, ("smon",),
                       categories=_PROM_CATEGORY)
POD_MONITOR = Kind(_PROM, "v1", "podmonitors", "PodMonitor", True, ("pmon",),
                   categories=_PROM_CATEGORY)
PROMETHEUS = Kind(_PROM, "v1", "prometheuses", "Prometheus", True, ("prom",), _STATUS,
                  categories=_PROM_CATEGORY)
PROMETHEUS_RULE = Kind(_PROM, "v1", "prometheusrules", "PrometheusRule", True, ("promrule",),
                       categories=_PROM_CATEGORY)

WORKLOADS: tuple[Kind, ...] = (DEPLOYMENT, REPLICA_SET, JOB)
STORED_ONLY: tuple[Kind, ...] = (
    SERVICE_ACCOUNT, ROLE, ROLE_BINDING, CLUSTER_ROLE, CLUSTER_ROLE_BINDING, CRON_JOB,
    PROMETHEUS_RULE,
)
ALL: tuple[Kind, ...] = (
    NAMESPACE, NODE, POD, SERVICE, CONFIGMAP, EVENT, DAEMONSET, CONTROLLER_REVISION,
    ENDPOINTSLICE, CLUSTER_POLICY, GPU_CLUSTER, SERVICE_MONITOR, POD_MONITOR, PROMETHEUS, CRD,
    SELF_SUBJECT_ACCESS_REVIEW, SUBJECT_ACCESS_REVIEW, LEASE, RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_CLAIM, ENDPOINTS, *WORKLOADS, *STORED_ONLY, EVENTS_V1,
)
BY_KEY: dict[str, Kind] = {k.key: k for k in ALL}
BY_KIND: dict[str, Kind] = {k.kind: k for k in ALL if k.key != EVENTS_V1.key}


class ResourceName(Protocol):
    """What names a resource to the sim from outside it: a test may hand the store the tool's
    own Kind, and the sim answers from its catalog entry of the same group and plural."""

    @property
    def group(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def plural(self) -> str: ...


def resolve(name: ResourceName) -> Kind:
    """The catalog's entry for `name` (itself when it is one); KeyError when the sim does not
    serve that group, plural and version."""
    if isinstance(name, Kind):
        return name
    kind = BY_KEY[resource_key(name.group, name.plural)]
    if kind.version != name.version:
        raise KeyError(f"{kind.key}: the sim serves {kind.api_version}, not {name.version}")
    return kind
