"""The Kubernetes resource types dcgm-migrate reads or writes. tests/sim/test_catalog_discovery.py
checks each against the simulator's own catalog (from upstream's discovery documents and CRDs)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """One API resource type."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    has_status: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """`plural` for core, `plural.group` otherwise (as RBAC and kubectl name them)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def collection_path(self, namespace: str | None = None) -> str:
        """REST path of the collection, namespaced when the kind is and a namespace is given."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{base}/namespaces/{namespace}/{self.plural}"
        return f"{base}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection_path(namespace)}/{name}"


_MONITORING = "monitoring.coreos.com"
_AUTHZ = "authorization.k8s.io"
NAMESPACE = Kind("", "v1", "namespaces", "Namespace", False, ("ns",), True)
NODE = Kind("", "v1", "nodes", "Node", False, ("no",), True)
POD = Kind("", "v1", "pods", "Pod", True, ("po",), True)
SERVICE = Kind("", "v1", "services", "Service", True, ("svc",), True)
CONFIGMAP = Kind("", "v1", "configmaps", "ConfigMap", True, ("cm",))
EVENT = Kind("", "v1", "events", "Event", True, ("ev",))
DAEMONSET = Kind("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), True)
CONTROLLER_REVISION = Kind("apps", "v1", "controllerrevisions", "ControllerRevision", True)
ENDPOINTSLICE = Kind("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
CLUSTER_POLICY = Kind("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False, (), True)
# Short name `gc`: NVIDIA/gpu-operator deployments/gpu-operator/crds/nvidia.com_gpuclusters.yaml
GPU_CLUSTER = Kind("nvidia.com", "v1alpha1", "gpuclusters", "GPUCluster", False, ("gc",), True)
SERVICE_MONITOR = Kind(_MONITORING, "v1", "servicemonitors", "ServiceMonitor", True, ("smon",))
POD_MONITOR = Kind(_MONITORING, "v1", "podmonitors", "PodMonitor", True, ("pmon",))
# Read only for its ServiceMonitor discovery role (`model/monitoring.py`).
PROMETHEUS = Kind(_MONITORING, "v1", "prometheuses", "Prometheus", True, ("prom",), True)
CRD = Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
           False, ("crd", "crds"), True)
SELF_SUBJECT_ACCESS_REVIEW = Kind(_AUTHZ, "v1", "selfsubjectaccessreviews",
                                  "SelfSubjectAccessReview", False)
# Another user's rights: preflight asks about the guard's account.
SUBJECT_ACCESS_REVIEW = Kind(_AUTHZ, "v1", "subjectaccessreviews", "SubjectAccessReview", False)
LEASE = Kind("coordination.k8s.io", "v1", "leases", "Lease", True)
# Dynamic Resource Allocation: the GPUCluster stack's DCGM pods claim their GPUs (admin access).
RESOURCE_CLAIM_TEMPLATE = Kind("resource.k8s.io", "v1", "resourceclaimtemplates",
                               "ResourceClaimTemplate", True)
RESOURCE_CLAIM = Kind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, (), True)

ALL: tuple[Kind, ...] = (
    NAMESPACE, NODE, POD, SERVICE, CONFIGMAP, EVENT, DAEMONSET, CONTROLLER_REVISION,
    ENDPOINTSLICE, CLUSTER_POLICY, GPU_CLUSTER, SERVICE_MONITOR, POD_MONITOR, PROMETHEUS, CRD,
    SELF_SUBJECT_ACCESS_REVIEW, SUBJECT_ACCESS_REVIEW, LEASE, RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_CLAIM,
)
BY_KEY: dict[str, Kind] = {k.key: k for k in ALL}
BY_KIND: dict[str, Kind] = {k.kind: k for k in ALL}
