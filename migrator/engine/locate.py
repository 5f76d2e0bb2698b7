"""Where the GPU Operator's DCGM DaemonSets run, for a namespace that holds none of them: one
cluster-wide list by their `app` labels, so a refusal can say which `-n` to pass (an identity
that may not list cluster-wide looks in the usual namespaces and its own)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator.engine.state.lock import pod_namespace
from migrator.errors import APIForbidden, APINotFound, UsageError
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube

# Where the Helm chart's docs and OperatorHub (OpenShift) install the GPU Operator.
USUAL_NAMESPACES = ("gpu-operator", "nvidia-gpu-operator")


@dataclass(frozen=True)
class Whereabouts:
    """The catalog's DaemonSets found cluster-wide: namespace → their names (sorted)."""

    found: Mapping[str, tuple[str, ...]]
    forbidden: bool = False  # the identity may not list DaemonSets cluster-wide

    def besides(self, namespace: str) -> list[str]:
        """The namespaces they run in other than `namespace`, sorted."""
        return sorted(n for n in self.found if n != namespace)


def daemonset_names(catalog: Catalog) -> list[str]:
    return sorted({c.daemonset for c in catalog.components})


def selector(catalog: Catalog) -> str:
    """The label selector of the catalog's DaemonSets (by their `app` labels)."""
    return f"app in ({','.join(sorted({c.app_label for c in catalog.components}))})"


def _listed(kube: Kube, catalog: Catalog, namespace: str | None) -> list[tuple[str, str]]:
    """(namespace, name) of the catalog's DaemonSets, listed by their app labels."""
    def keep(ds: Mapping[str, Any]) -> tuple[str, str]:
        return str(o.meta(ds).get("namespace") or namespace or ""), o.name(ds)

    rows, _ = kube.collect(kinds.DAEMONSET, namespace, label_selector=selector(catalog),
                           keep=keep, printed=True)
    names = set(daemonset_names(catalog))
    return [(where, name) for where, name in rows if name in names]


def _held(kube: Kube, catalog: Catalog, namespace: str) -> list[str]:
    return sorted({n for _, n in _listed(kube, catalog, namespace)})


def candidates(asked: str) -> list[str]:
    """The namespaces to look in one by one: the usual ones, and this pod's own."""
    own = pod_namespace()
    out = [n for n in (*USUAL_NAMESPACES, own) if n and n != asked]
    return list(dict.fromkeys(out))


def locate(kube: Kube, catalog: Catalog, asked: str) -> Whereabouts:
    """One cluster-wide list; when forbidden, each candidate's own (`asked`: already tried)."""
    try:
        rows = _listed(kube, catalog, None)
    except APIForbidden:
        probed: dict[str, tuple[str, ...]] = {}
        for namespace in candidates(asked):
            try:
                held = _held(kube, catalog, namespace)
            except (APIForbidden, APINotFound):
                continue
            if held:
                probed[namespace] = tuple(held)
        return Whereabouts(probed, forbidden=not probed)
    found: dict[str, set[str]] = {}
    for namespace, name in rows:
        if namespace:
            found.setdefault(namespace, set()).add(name)
    return Whereabouts({ns: tuple(sorted(n)) for ns, n in found.items()})


def wrong_namespace(kube: Kube, namespace: str, catalog: Catalog, *, exists: bool = True,
                    denied: bool = False, where: Whereabouts | None = None) -> tuple[str, str]:
    """(the refusal, the fix) for a namespace that does not exist, holds none of the catalog's
    DaemonSets, or may not be read (`denied`), naming where they run (`where`, else looked up).
    The fix's `-n NS` in backticks: the CLI shows it as the whole command line with that option."""
    where = where or locate(kube, catalog, namespace)
    they, them = "the GPU Operator's DCGM DaemonSets", "none of them"
    if denied:
        head = (f"No GPU Operator DCGM found in namespace {namespace!r}: this identity may "
                "not read it (403 Forbidden)")
    elif exists:
        head = (f"No GPU Operator DCGM found in namespace {namespace!r}: none of the "
                "DaemonSets this tool migrates runs there")
        they = "they"
    else:
        head = f"Namespace {namespace!r} does not exist on {kube.server}"
        them = "none of the DaemonSets this tool migrates"
    others = where.besides(namespace)
    if where.forbidden:
        return (f"{head}; where {they} run cannot be looked up, because this identity may not "
                "list DaemonSets cluster-wide (403 Forbidden).",
                "pass the namespace the GPU Operator runs in with -n (someone who may list "
                f"DaemonSets finds it with `kubectl get daemonsets -A -l '{selector(catalog)}'`)")
    if others:
        plural = "namespace" if len(others) == 1 else "namespaces"
        quoted = [repr(n) for n in others]
        listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
        hint = f"pass `-n {others[0]}`" + "".join(f" (or -n {n})" for n in others[1:])
        return f"{head}; {they} run in {plural} {listed}.", hint
    return (f"{head}; {them} ({', '.join(daemonset_names(catalog))}) runs in any namespace "
            "of this cluster.",
            "check that the GPU Operator is installed and has rendered its DCGM DaemonSets, "
            "then pass its namespace with -n")


def denied_namespace(kube: Kube, namespace: str, catalog: Catalog) -> tuple[str, str] | None:
    """After a 403 reading `namespace`: `wrong_namespace`'s answer when the DaemonSets run in
    another namespace (a typo), None when they run nowhere else (a missing permission)."""
    where = locate(kube, catalog, namespace)
    if not where.besides(namespace):
        return None
    return wrong_namespace(kube, namespace, catalog, where=where, denied=True)


def namespace_check(kube: Kube, namespace: str, catalog: Catalog) -> GateResult:
    """`preflight`'s namespace line: it exists and holds some of the catalog's DaemonSets."""
    name = f"namespace/{namespace}"
    try:
        exists = kube.get(kinds.NAMESPACE, namespace) is not None
        held = _held(kube, catalog, namespace) if exists else []
    except APIForbidden:
        found = denied_namespace(kube, namespace, catalog)
        if found is None:
            return GateResult(name, False, f"namespace {namespace!r} or its DaemonSets cannot "
                              "be read (403 Forbidden); the rbac/ lines name the permission")
    else:
        if held:
            return GateResult(name, True, f"holds DaemonSet{'s' if len(held) > 1 else ''} "
                              f"{', '.join(held)}")
        found = wrong_namespace(kube, namespace, catalog, exists=exists)
    message, hint = found
    return GateResult(name, False, f"{message} Fix: {hint.replace('`', '')}.")


def require_dcgm(kube: Kube, namespace: str, catalog: Catalog) -> None:
    """The guard's check before it starts: the namespace holds some of the catalog's DaemonSets,
    or a state ConfigMap (it may outlive them); else a UsageError naming where they run."""
    if _held(kube, catalog, namespace):
        return
    try:
        if kube.get(kinds.CONFIGMAP, catalog.common.state_configmap, namespace) is not None:
            return
    except APIForbidden:
        pass  # may not read it: judged by the DaemonSets alone
    raise UsageError(*wrong_namespace(kube, namespace, catalog))


def require_stack(stack: str, found: bool, namespace: str) -> None:
    """A namespace where none of the DCGM DaemonSets the tool migrates runs: refused."""
    if stack == "none" or not found:
        raise UsageError(
            f"No GPU Operator DCGM found in namespace {namespace!r}: none of the DCGM "
            "DaemonSets this tool migrates runs there (any left belong to a deleted "
            "ClusterPolicy or GPUCluster).",
            "pass the GPU Operator's namespace with -n, or check that the operator is installed "
            "and has rendered its DaemonSets")


def require_operator_api(served: bool, server: str) -> None:
    """Without the operator's API (it owns the aliases, drift is judged against it) the
    migration would run half-blind, so it does not start."""
    if not served:
        raise UsageError(
            f"The GPU Operator API (nvidia.com ClusterPolicy/GPUCluster CRDs) is not served by "
            f"{server}, so the operator that owns these DaemonSets cannot be checked.",
            "install or repair the GPU Operator CRDs (kubectl get crd | grep nvidia.com), then "
            "run `dcgm-migrate preflight`")
