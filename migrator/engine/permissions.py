"""The exact permissions a migration needs — one list that `preflight` checks with
SelfSubjectAccessReview and `docs/rbac.yaml` grants (a test keeps the two in step)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from migrator.model import kinds
from migrator.model.kinds import Kind
from migrator.model.stacks import load_catalog

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


def _required() -> tuple[Permission, ...]:
    catalog = load_catalog()
    ds_names = sorted({c.daemonset for c in catalog.components})
    svc_names = sorted({n for c in catalog.components for n in (c.service, c.alias) if n})
    reads = [Permission(v, k) for k in (kinds.DAEMONSET, kinds.POD, kinds.SERVICE,
                                        kinds.ENDPOINTSLICE) for v in ("get", "list", "watch")]
    return (
        Permission("get", kinds.NAMESPACE, None, namespaced=False),
        Permission("list", kinds.CLUSTER_POLICY, namespaced=False),
        Permission("list", kinds.GPU_CLUSTER, namespaced=False),
        Permission("list", kinds.SERVICE_MONITOR),
        *reads,
        *(Permission("patch", kinds.DAEMONSET, n) for n in ds_names),
        Permission("create", kinds.SERVICE),
        *(Permission(v, kinds.SERVICE, n) for n in svc_names for v in ("patch", "delete")),
        Permission("delete", kinds.POD),
        Permission("create", kinds.CONFIGMAP),
        *(Permission(v, kinds.CONFIGMAP, catalog.common.state_configmap)
          for v in ("get", "update")),
    )


REQUIRED: tuple[Permission, ...] = _required()


def missing_permissions(kube: Kube, namespace: str,
                        wanted: Iterable[Permission]) -> list[str]:
    out = []
    for p in wanted:
        allowed, _ = kube.can_i(p.verb, p.kind, namespace if p.namespaced else None, p.name)
        if not allowed:
            out.append(str(p))
    return out
