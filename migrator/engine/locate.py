"""Where the GPU Operator's DCGM DaemonSets run, for a namespace that holds none of them.

A ClusterPolicy or GPUCluster is cluster-scoped, so finding one says nothing about the
namespace the tool was pointed at: the namespace is right only when it holds the DaemonSets
the catalog (`plans/*.yaml`) names. When it does not, one cluster-wide list of DaemonSets by
their `app` labels (printed rows with their metadata: a few hundred bytes each) finds where
they do run, so the refusal can say which `-n` to pass. An identity that may not list
DaemonSets cluster-wide (a namespaced Role, as `docs/rbac.yaml` grants) is told so instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migrator.errors import APIForbidden
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube


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


def locate(kube: Kube, catalog: Catalog) -> Whereabouts:
    """One cluster-wide list (printed rows, metadata only) of the catalog's DaemonSets."""
    names = set(daemonset_names(catalog))
    try:
        rows = _listed(kube, catalog, None)
    except APIForbidden:
        return Whereabouts(forbidden=True)
    found: dict[str, set[str]] = {}
    for namespace, name in rows:
        if name in names and namespace:
            found.setdefault(namespace, set()).add(name)
    return Whereabouts({ns: tuple(sorted(n)) for ns, n in found.items()})


def _quoted(items: list[str]) -> str:
    shown = [repr(i) for i in items]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def wrong_namespace(namespace: str, where: Whereabouts, catalog: Catalog, *, server: str,
                    exists: bool = True) -> tuple[str, str]:
    """(the one-sentence refusal, the fix) for a namespace that does not exist or holds none
    of the catalog's DaemonSets, naming where they run."""
    if exists:
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
        hint = f"pass -n {others[0]}" + "".join(f" (or -n {n})" for n in others[1:])
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
        return GateResult(name, False, f"namespace {namespace!r} or its DaemonSets cannot be "
                          f"read {denied}")
    held = sorted({n for _, n in listed} & set(daemonset_names(catalog)))
    if held:
        return GateResult(name, True, f"holds DaemonSet{'s' if len(held) > 1 else ''} "
                          f"{', '.join(held)}")
    message, hint = wrong_namespace(namespace, locate(kube, catalog), catalog,
                                    server=kube.server, exists=exists)
    return GateResult(name, False, f"{message} Fix: {hint}.")
