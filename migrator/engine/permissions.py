"""The exact permissions a migration needs (`preflight` checks them, `docs/rbac.yaml` grants
them: a test keeps the two in step), and the guard's EndpointSlice writes, checked for its
ServiceAccount (docs/guard.yaml) by SubjectAccessReview."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator.engine.locate import daemonset_names, namespace_check
from migrator.errors import APIForbidden
from migrator.model import kinds, stackchange
from migrator.model.gates import GateResult
from migrator.model.kinds import Kind
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, load_catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube


@dataclass(frozen=True)
class Permission:
    verb: str
    kind: Kind
    name: str | None = None  # None: any object (list/watch/create cannot be narrowed by name)
    namespaced: bool = True
    subresource: str | None = None

    def __str__(self) -> str:
        target = self.kind.key + (f"/{self.subresource}" if self.subresource else "") + (
            f"/{self.name}" if self.name else "")
        return f"{self.verb} {target}"


# The CR names `change-stack --delete-cr` may delete: the Helm chart's (`cluster-policy`,
# `gpu-cluster`, deployments/gpu-operator/templates at a22dbf671) and the samples'.
STACK_CHANGE_NAMES = {"ClusterPolicy": ("cluster-policy", "gpu-cluster-policy"),
                      "GPUCluster": ("gpu-cluster",)}


# whether a node was deleted meanwhile (names only): change-stack's waits, and the gates and
# verdict where a Service's slices leave out a Ready pod (engine/reads.py `with_nodes`)
NODES_LISTED = Permission("list", kinds.NODE, namespaced=False)


def grants(verbs: str, of: Iterable[Kind], names: Iterable[str | None] = (None,), *,
           namespaced: bool = True) -> list[Permission]:
    """Each of `verbs` (space-separated) on each kind `of` and each of its `names`."""
    return [Permission(v, k, n, namespaced) for k in of for n in names for v in verbs.split()]


def required() -> tuple[Permission, ...]:
    """Everything a migration does, and nothing more: writes name their objects wherever RBAC
    can (not create, nor --roll-on-delete's pods); monitors are listed cluster-wide (one in a
    monitoring namespace may scrape these pods)."""
    catalog = load_catalog()
    svc_names = sorted({n for c in catalog.components for n in (c.service, c.alias) if n})
    aliases = sorted({c.alias for c in catalog.components if c.alias})
    crs = (kinds.CLUSTER_POLICY, kinds.GPU_CLUSTER)
    return (
        # The namespace's GET is authorised in that namespace (k8s.io/apiserver requestinfo.go
        # `NewRequestInfo`), so the Role grants it, reaching no other namespace.
        *grants("get", [kinds.NAMESPACE]),
        *grants("list", [*crs, kinds.SERVICE_MONITOR, kinds.POD_MONITOR, kinds.PROMETHEUS],
                namespaced=False),  # Prometheus: its discovery role
        *grants("get list watch", [kinds.DAEMONSET, kinds.POD, kinds.SERVICE,
                                   kinds.ENDPOINTSLICE]),
        *grants("list", [kinds.LEASE]),  # the verdict's guard-live check
        NODES_LISTED,
        *grants("patch", [kinds.DAEMONSET], daemonset_names(catalog)),
        *grants("create", [kinds.SERVICE]),
        *grants("patch", [kinds.SERVICE], svc_names),
        *grants("delete", [kinds.SERVICE], aliases),
        *grants("list watch", [kinds.CONTROLLER_REVISION]),  # phase 1 in place: the proof
        *grants("patch delete", [kinds.POD]),  # phase 1 in place: labels and revision hash
        *grants("create", [kinds.CONFIGMAP]),
        # change-stack: the new CR created, the old one deleted by name (the Helm chart's
        # names and the samples'; docs/rbac.yaml says to add yours)
        *grants("create", crs, namespaced=False),
        *(p for k in crs
          for p in grants("delete", [k], STACK_CHANGE_NAMES[k.kind], namespaced=False)),
        *grants("get update", [kinds.CONFIGMAP], [catalog.common.state_configmap]),
    )


REQUIRED: tuple[Permission, ...] = required()  # what docs/rbac.yaml grants
REVIEWS_IN_FLIGHT = 8  # access reviews asked at once
# What an `apply` or a `rollback` asks before its lock: every write it may make (a stack change
# adds its CRs', stackcommands.py) and the one read it makes only after writing (phase 1 in place's
# ControllerRevisions); its other reads come before its first write and fail there anyway.
RUN_REQUIRED = tuple(p for p in REQUIRED if (
    p.kind == kinds.CONTROLLER_REVISION or p.verb in ("create", "update", "patch", "delete"))
    and p.kind not in (kinds.CLUSTER_POLICY, kinds.GPU_CLUSTER))

GUARD_SERVICE_ACCOUNT = "dcgm-migrate-guard"  # docs/guard.yaml
# OpenShift refuses an EndpointSlice with addresses in the cluster or service network unless
# its writer may `create` `endpointslices/restricted` (restrictedendpoints admission,
# `sliceCheckAccess`); elsewhere it is granted and means nothing.
RESTRICTED_ENDPOINTSLICES = Permission("create", kinds.ENDPOINTSLICE, subresource="restricted")
# What the guard's shared EndpointSlices need (the rest of docs/guard.yaml's Role are reads and
# its own Lease, which `kubectl auth can-i --as` checks as well).
GUARD_WRITES = (*grants("create update delete", [kinds.ENDPOINTSLICE]), RESTRICTED_ENDPOINTSLICES)


def missing(kube: Kube, namespace: str,
            needed: Iterable[Permission] = REQUIRED) -> list[Permission]:
    """The permissions of `needed` the current user lacks: a SelfSubjectAccessReview each,
    `REVIEWS_IN_FLIGHT` at a time (a run asks 17, a stack change 20, `preflight` all of
    `REQUIRED`)."""
    def allowed(p: Permission) -> bool:
        return kube.can_i(p.verb, p.kind, namespace if p.namespaced else None, p.name,
                          p.subresource)[0]

    wanted = list(needed)
    with ThreadPoolExecutor(REVIEWS_IN_FLIGHT) as pool:
        return [p for p, ok in zip(wanted, pool.map(allowed, wanted), strict=True) if not ok]


def require_for_run(kube: Kube, namespace: str, also: Iterable[Permission] = ()) -> None:
    """Refused before the lock and the first write, naming every permission a run (and `also`,
    a stack change's CR writes) may use that the user lacks: found at the write that needs it
    instead, a run would stop half done (a DaemonSet held on OnDelete, phase 1 in place; a
    stack change with its Services kept and its old CR not deleted)."""
    lacking = missing(kube, namespace, [*RUN_REQUIRED, *also])
    if lacking:
        raise APIForbidden(
            f"The kubeconfig's user may not {'; '.join(map(str, lacking))} in namespace "
            f"{namespace}: the run would be refused at the write that needs it, so it writes "
            "nothing.", "ask a cluster admin to apply docs/rbac.yaml (`dcgm-migrate preflight` "
            "lists every permission it needs)", status=403, reason="Forbidden")


def service_account_review(namespace: str, p: Permission) -> dict[str, Any]:
    """A SubjectAccessReview's spec: may the guard's ServiceAccount in `namespace` do `p`?"""
    scope = {"namespace": namespace if p.namespaced else None, "name": p.name,
             "subresource": p.subresource}
    attributes = {"verb": p.verb, "group": p.kind.group, "resource": p.kind.plural,
                  **{k: v for k, v in scope.items() if v}}
    return {"user": f"system:serviceaccount:{namespace}:{GUARD_SERVICE_ACCOUNT}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                       "system:authenticated"],
            "resourceAttributes": attributes}


def guard_checks(kube: Kube, namespace: str) -> list[GateResult]:
    """`preflight`'s lines for the guard's ServiceAccount: fine when it holds all of its
    writes, or none (not deployed yet); a failure when it lacks some (an older guard.yaml on
    OpenShift lacks `endpointslices/restricted`). Not checked when this caller may not ask
    (`create subjectaccessreviews` is a cluster admin's: asked first, no refused request)."""
    who = f"ServiceAccount {namespace}/{GUARD_SERVICE_ACCOUNT}"
    missing: list[str] | None = None
    if kube.can_i("create", kinds.SUBJECT_ACCESS_REVIEW)[0]:
        with contextlib.suppress(APIForbidden):
            missing = [str(p) for p in GUARD_WRITES
                       if not kube.can_they(service_account_review(namespace, p))]
    if missing is None:
        return [GateResult("rbac/guard", True, (
            f"not checked (asking about {who} needs `create subjectaccessreviews`): "
            f"kubectl auth can-i create {RESTRICTED_ENDPOINTSLICES.kind.plural}."
            f"{RESTRICTED_ENDPOINTSLICES.kind.group}/restricted -n {namespace} "
            f"--as system:serviceaccount:{namespace}:{GUARD_SERVICE_ACCOUNT}"))]
    total = len(GUARD_WRITES)
    if len(missing) == total:
        return [GateResult("rbac/guard", True,
                           f"{who} holds none of the guard's writes: not deployed yet "
                           "(docs/guard.yaml)")]
    return [*(GateResult(f"rbac/guard/{p}", False, f"not allowed to {who} (docs/guard.yaml)")
              for p in missing),
            GateResult("rbac/guard", not missing,
                       f"{who}: {total - len(missing)}/{total} of the guard's writes")]


def operator_cr_checks(kube: Kube, apis: dict[str, bool]) -> list[GateResult]:
    """Red when a ClusterPolicy and a GPUCluster both exist and the operator refuses them."""
    if not all(v for k, v in apis.items() if "nvidia" in k):
        return []
    snap = Snapshot("", cluster_policies=tuple(kube.list(kinds.CLUSTER_POLICY).items),
                    gpu_clusters=tuple(kube.list(kinds.GPU_CLUSTER).items))
    found = stackchange.findings(snap)
    if not found:
        return [GateResult(stackchange.CHECK, True, "at most one kind of GPU Operator CR, or "
                           "a release that reconciles both")]
    return [f.gate() for f in found]


def preflight_checks(kube: Kube, namespace: str, catalog: Catalog) -> tuple[GateResult, ...]:
    """`preflight`: the API, CRDs, DaemonSets, permissions and the guard's writes."""
    kube.ping()
    apis = {
        "nvidia.com/v1 (ClusterPolicy)": kube.has_api("nvidia.com", "v1"),
        "nvidia.com/v1alpha1 (GPUCluster)": kube.has_api("nvidia.com", "v1alpha1"),
        "monitoring.coreos.com/v1 (ServiceMonitor, optional)":
            kube.has_api("monitoring.coreos.com", "v1"),
    }
    lacking = [str(p) for p in missing(kube, namespace)]
    checks = [GateResult(f"api/{k}", True, "served" if v else
                         "not served (fine if the cluster does not use it)")
              for k, v in apis.items()]
    checks.append(GateResult("api/any-gpu-operator-crd",
                             any(v for k, v in apis.items() if "nvidia" in k),
                             "ClusterPolicy or GPUCluster CRD present"))
    checks.append(namespace_check(kube, namespace, catalog))
    checks += operator_cr_checks(kube, apis)
    checks += [GateResult(f"rbac/{p}", False, "not allowed") for p in lacking]
    checks.append(GateResult("rbac", not lacking,
                             f"{len(REQUIRED) - len(lacking)}/{len(REQUIRED)} permissions"))
    checks += guard_checks(kube, namespace)
    return tuple(checks)
