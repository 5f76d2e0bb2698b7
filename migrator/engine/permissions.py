"""The exact permissions a migration needs — one list that `preflight` checks with
SelfSubjectAccessReview and `docs/rbac.yaml` grants (a test keeps the two in step)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from migrator.engine.locate import namespace_check
from migrator.model import kinds
from migrator.model.gates import GateResult
from migrator.model.kinds import Kind
from migrator.model.stacks import Catalog, load_catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube


@dataclass(frozen=True)
class Permission:
    verb: str
    kind: Kind
    name: str | None = None  # None: any object (list/watch/create cannot be narrowed by name)
    namespaced: bool = True

    def __str__(self) -> str:
        target = self.kind.key + (f"/{self.name}" if self.name else "")
        return f"{self.verb} {target}"


DEFAULT_NAMESPACE = "gpu-operator"


def required(namespace: str = DEFAULT_NAMESPACE) -> tuple[Permission, ...]:
    """Everything a migration in `namespace` does, and nothing more: writes name their objects
    wherever RBAC can check a name (create cannot be narrowed; pods are deleted only with
    --roll-on-delete and have generated names). ServiceMonitors and PodMonitors are listed
    cluster-wide, since one in another namespace (a monitoring stack's) may scrape these pods."""
    catalog = load_catalog()
    ds_names = sorted({c.daemonset for c in catalog.components})
    svc_names = sorted({n for c in catalog.components for n in (c.service, c.alias) if n})
    aliases = sorted({c.alias for c in catalog.components if c.alias})
    reads = [Permission(v, k) for k in (kinds.DAEMONSET, kinds.POD, kinds.SERVICE,
                                        kinds.ENDPOINTSLICE) for v in ("get", "list", "watch")]
    return (
        Permission("get", kinds.NAMESPACE, namespace, namespaced=False),
        Permission("list", kinds.CLUSTER_POLICY, namespaced=False),
        Permission("list", kinds.GPU_CLUSTER, namespaced=False),
        Permission("list", kinds.SERVICE_MONITOR, namespaced=False),
        Permission("list", kinds.POD_MONITOR, namespaced=False),
        Permission("list", kinds.PROMETHEUS, namespaced=False),  # their discovery role
        *reads,
        Permission("list", kinds.LEASE),  # the verdict's guard-live check
        *(Permission("patch", kinds.DAEMONSET, n) for n in ds_names),
        Permission("create", kinds.SERVICE),
        *(Permission("patch", kinds.SERVICE, n) for n in svc_names),
        *(Permission("delete", kinds.SERVICE, n) for n in aliases),
        Permission("list", kinds.CONTROLLER_REVISION),  # phase 1 in place: the proof
        Permission("watch", kinds.CONTROLLER_REVISION),
        Permission("patch", kinds.POD),  # phase 1 in place: labels and revision hash
        Permission("delete", kinds.POD),
        Permission("create", kinds.CONFIGMAP),
        *(Permission(v, kinds.CONFIGMAP, catalog.common.state_configmap)
          for v in ("get", "update")),
    )


REQUIRED: tuple[Permission, ...] = required()  # for the default namespace (docs/rbac.yaml)


def missing_permissions(kube: Kube, namespace: str,
                        wanted: Iterable[Permission]) -> list[str]:
    out = []
    for p in wanted:
        allowed, _ = kube.can_i(p.verb, p.kind, namespace if p.namespaced else None, p.name)
        if not allowed:
            out.append(str(p))
    return out


def preflight_checks(kube: Kube, namespace: str, catalog: Catalog) -> tuple[GateResult, ...]:
    """`preflight`: API reachable, CRDs present, the namespace holds the GPU Operator's DCGM
    DaemonSets, and every permission the migration needs (SSAR)."""
    kube.ping()
    apis = {
        "nvidia.com/v1 (ClusterPolicy)": kube.has_api("nvidia.com", "v1"),
        "nvidia.com/v1alpha1 (GPUCluster)": kube.has_api("nvidia.com", "v1alpha1"),
        "monitoring.coreos.com/v1 (ServiceMonitor, optional)":
            kube.has_api("monitoring.coreos.com", "v1"),
    }
    wanted = required(namespace)
    missing = missing_permissions(kube, namespace, wanted)
    checks = [GateResult(f"api/{k}", True, "served" if v else
                         "not served (fine if the cluster does not use it)")
              for k, v in apis.items()]
    checks.append(GateResult("api/any-gpu-operator-crd",
                             any(v for k, v in apis.items() if "nvidia" in k),
                             "ClusterPolicy or GPUCluster CRD present"))
    checks.append(namespace_check(kube, namespace, catalog))
    checks += [GateResult(f"rbac/{p}", False, "not allowed") for p in missing]
    checks.append(GateResult("rbac", not missing,
                             f"{len(wanted) - len(missing)}/{len(wanted)} permissions"))
    return tuple(checks)
