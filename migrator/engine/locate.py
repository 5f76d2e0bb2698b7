"""Where the GPU Operator's DCGM DaemonSets run, for a namespace that holds none of them.

A ClusterPolicy or GPUCluster is cluster-scoped, so finding one says nothing about the
namespace the tool was pointed at: the namespace is right only when it holds the DaemonSets
the catalog (`plans/*.yaml`) names. When it does not, one cluster-wide list of DaemonSets by
their `app` labels (printed rows with their metadata: a few hundred bytes each) finds where
they do run, so the refusal can say which `-n` to pass. An identity that may not list
DaemonSets cluster-wide (a namespaced Role, as `docs/rbac.yaml` grants) looks in the
namespaces the GPU Operator is usually installed in and in its own (a pod's service account):
a Role bound there finds them, so a typo'd `-n` (a 403 there) is still answered with the
namespace to pass; only when none of those holds them is it told where it cannot look.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from migrator.errors import APIForbidden, APINotFound, UsageError
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube


# Where the GPU Operator is installed by its Helm chart's docs and by OperatorHub (OpenShift):
# looked in one by one when the identity may not list DaemonSets cluster-wide.
USUAL_NAMESPACES = ("gpu-operator", "nvidia-gpu-operator")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Whereabouts:
    """The catalog's DaemonSets found cluster-wide: namespace → their names (sorted)."""

    found: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    forbidden: bool = False  # the identity may not list DaemonSets cluster-wide

    @property
    def namespaces(self) -> list[str]:
        return sorted(self.found)


def daemonset_names(catalog: Catalog) -> list[str]:
    return sorted({c.daemonset for c in catalog.components})


def selector(catalog: Catalog) -> str:
    """The label selector of the catalog's DaemonSets (each carries its `app` label)."""
    return f"app in ({','.join(sorted({c.app_label for c in catalog.components}))})"


def _listed(kube: Kube, catalog: Catalog, namespace: str | None) -> list[tuple[str, str]]:
    """(namespace, name) of the DaemonSets with the catalog's app labels, as printed rows."""
    def keep(ds: Mapping[str, Any]) -> tuple[str, str]:
        return str(o.meta(ds).get("namespace") or namespace or ""), o.name(ds)

    rows, _ = kube.collect(kinds.DAEMONSET, namespace, label_selector=selector(catalog),
                           keep=keep, printed=True)
    return rows


def candidates(asked: str | None = None,
               service_account: Path = SERVICE_ACCOUNT_NAMESPACE) -> list[str]:
    """The namespaces to look in one by one: the usual ones, and this pod's own."""
    own = os.environ.get("POD_NAMESPACE")
    if not own:
        try:
            own = service_account.read_text().strip()
        except OSError:
            own = None
    out = [n for n in (*USUAL_NAMESPACES, own) if n and n != asked]
    return list(dict.fromkeys(out))


def _probe(kube: Kube, catalog: Catalog, asked: str | None) -> Whereabouts:
    """Without the right to list DaemonSets cluster-wide: each candidate namespace's own
    list (what a Role bound there allows); forbidden ones are skipped."""
    names = set(daemonset_names(catalog))
    found: dict[str, tuple[str, ...]] = {}
    for namespace in candidates(asked):
        try:
            held = sorted({n for _, n in _listed(kube, catalog, namespace)} & names)
        except (APIForbidden, APINotFound):
            continue
        if held:
            found[namespace] = tuple(held)
    return Whereabouts(found, forbidden=not found)


def locate(kube: Kube, catalog: Catalog, asked: str | None = None) -> Whereabouts:
    """One cluster-wide list (printed rows, metadata only) of the catalog's DaemonSets; when
    that is forbidden, the candidate namespaces one by one (`asked`: the namespace already
    tried)."""
    names = set(daemonset_names(catalog))
    try:
        rows = _listed(kube, catalog, None)
    except APIForbidden:
        return _probe(kube, catalog, asked)
    found: dict[str, set[str]] = {}
    for namespace, name in rows:
        if name in names and namespace:
            found.setdefault(namespace, set()).add(name)
    return Whereabouts({ns: tuple(sorted(n)) for ns, n in found.items()})


def _quoted(items: list[str]) -> str:
    shown = [repr(i) for i in items]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def wrong_namespace(namespace: str, where: Whereabouts, catalog: Catalog, *, server: str,
                    exists: bool = True, denied: bool = False) -> tuple[str, str]:
    """(the one-sentence refusal, the fix) for a namespace that does not exist, holds none
    of the catalog's DaemonSets, or may not be read (`denied`) while they run elsewhere,
    naming where they run. The fix names the option to pass in backticks (`-n NS`): the CLI
    shows it as the whole command line with that option."""
    if denied:
        head = (f"No GPU Operator DCGM found in namespace {namespace!r}: this identity may "
                "not read it (403 Forbidden)")
        they, them = "the GPU Operator's DCGM DaemonSets", "none of them"
    elif exists:
        head = (f"No GPU Operator DCGM found in namespace {namespace!r}: none of the "
                "DaemonSets this tool migrates runs there")
        they, them = "they", "none of them"
    else:
        head = f"Namespace {namespace!r} does not exist on {server}"
        they = "the GPU Operator's DCGM DaemonSets"
        them = "none of the DaemonSets this tool migrates"
    others = [n for n in where.namespaces if n != namespace]
    if where.forbidden:
        return (f"{head}; where {they} run cannot be looked up, because this identity may not "
                "list DaemonSets cluster-wide (403 Forbidden).",
                "pass the namespace the GPU Operator runs in with -n (someone who may list "
                f"DaemonSets finds it with `kubectl get daemonsets -A -l '{selector(catalog)}'`)")
    if others:
        plural = "namespace" if len(others) == 1 else "namespaces"
        hint = f"pass `-n {others[0]}`" + "".join(f" (or -n {n})" for n in others[1:])
        return f"{head}; {they} run in {plural} {_quoted(others)}.", hint
    return (f"{head}; {them} ({', '.join(daemonset_names(catalog))}) runs in any namespace "
            "of this cluster.",
            "check that the GPU Operator is installed and has rendered its DCGM DaemonSets, "
            "then pass its namespace with -n")


def namespace_check(kube: Kube, namespace: str, catalog: Catalog) -> GateResult:
    """`preflight`'s namespace line: it exists and holds some of the catalog's DaemonSets.
    The namespace's own list answers when it does (what `docs/rbac.yaml` grants); only a
    namespace that does not is looked up cluster-wide, to say where they run."""
    name = f"namespace/{namespace}"
    denied = "(403 Forbidden); the rbac/ lines name the permission"
    try:
        exists = kube.get(kinds.NAMESPACE, namespace) is not None
        listed = _listed(kube, catalog, namespace) if exists else []
    except APIForbidden:
        where = locate(kube, catalog, namespace)
        if [n for n in where.namespaces if n != namespace]:  # a typo'd -n, not a permission
            message, hint = wrong_namespace(namespace, where, catalog, server=kube.server,
                                            denied=True)
            return GateResult(name, False, f"{message} Fix: {hint.replace('`', '')}.")
        return GateResult(name, False, f"namespace {namespace!r} or its DaemonSets cannot be "
                          f"read {denied}")
    held = sorted({n for _, n in listed} & set(daemonset_names(catalog)))
    if held:
        return GateResult(name, True, f"holds DaemonSet{'s' if len(held) > 1 else ''} "
                          f"{', '.join(held)}")
    message, hint = wrong_namespace(namespace, locate(kube, catalog, namespace), catalog,
                                    server=kube.server, exists=exists)
    return GateResult(name, False, f"{message} Fix: {hint.replace('`', '')}.")


def require_dcgm(kube: Kube, namespace: str, catalog: Catalog) -> None:
    """The guard's check before it starts, as `plan`/`apply`/`status` refuse such a
    namespace: it holds some of the catalog's DaemonSets (the namespace's own list, which
    docs/guard.yaml's Role grants), or a state ConfigMap (a migration was made there: what
    the guard keeps may outlive the DaemonSets, as `status` answers for such a namespace);
    else a UsageError naming where they run."""
    listed = _listed(kube, catalog, namespace)
    if {n for _, n in listed} & set(daemonset_names(catalog)):
        return
    try:
        if kube.get(kinds.CONFIGMAP, catalog.common.state_configmap, namespace) is not None:
            return
    except APIForbidden:
        pass  # may not read it: judged by the DaemonSets alone
    message, hint = wrong_namespace(namespace, locate(kube, catalog, namespace), catalog,
                                    server=kube.server)
    raise UsageError(message, hint)


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
    """Aliases are owned by the CR and drift is judged against the operator: without its API
    the migration would run half-blind, so it does not start."""
    if not served:
        raise UsageError(
            f"The GPU Operator API (nvidia.com ClusterPolicy/GPUCluster CRDs) is not served by "
            f"{server}, so the operator that owns these DaemonSets cannot be checked.",
            "install or repair the GPU Operator CRDs (kubectl get crd | grep nvidia.com), then "
            "run `dcgm-migrate preflight`")
