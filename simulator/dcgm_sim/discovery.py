"""Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`.

Built from the sim's own catalog (`kinds`): each resource's scope, verbs, short names,
categories and subresources as kube-apiserver lists them. Legacy (unaggregated) discovery only:
kubectl asks for the aggregated form first and falls back when the answer is plain
`application/json`. Groups disabled by a fault are left out, as a CRD that is not installed
would be. Pure.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.kinds import Kind

Obj = dict[str, Any]

_PREFERRED = {"nvidia.com": "v1"}


def version_info(release: str = "v1.32") -> Obj:
    """`/version` of the API server `release` (encoding.RELEASES)."""
    return {
        "major": "1", "minor": release.rsplit(".", 1)[1], "gitVersion": f"{release}.0-sim",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.4", "compiler": "gc",
        "platform": "linux/amd64",
    }


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                        "serverAddress": server_address}],
    }


def _groups(disabled: Collection[str]) -> dict[str, list[str]]:
    """group -> versions, in Kind-table order, core excluded."""
    out: dict[str, list[str]] = {}
    for k in kinds.ALL:
        if k.group and k.group not in disabled:
            versions = out.setdefault(k.group, [])
            if k.version not in versions:
                versions.append(k.version)
    return out


def _group_doc(name: str, versions: list[str]) -> Obj:
    preferred = _PREFERRED.get(name, versions[0])
    ordered = [preferred] + [v for v in versions if v != preferred]
    return {
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in ordered],
        "preferredVersion": {"groupVersion": f"{name}/{preferred}", "version": preferred},
    }


def api_group_list(disabled: Collection[str] = ()) -> Obj:
    groups = [_group_doc(g, v) for g, v in _groups(disabled).items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str, disabled: Collection[str] = ()) -> Obj | None:
    versions = _groups(disabled).get(group)
    if not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, versions)}


def _resource_entries(kind: Kind) -> list[Obj]:
    main: Obj = {
        "name": kind.plural, "singularName": kind.singular, "namespaced": kind.namespaced,
        "kind": kind.kind, "verbs": list(kind.verbs),
    }
    if kind.short_names:
        main["shortNames"] = list(kind.short_names)
    if kind.categories:
        main["categories"] = list(kind.categories)
    return [main, *({"name": f"{kind.plural}/{sub}", "singularName": "",
                     "namespaced": kind.namespaced, "kind": kind.kind,
                     "verbs": list(kinds.SUBRESOURCE_VERBS[sub])}
                    for sub in sorted(kind.subresources))]


def resource_list(group: str, version: str, disabled: Collection[str] = ()) -> Obj | None:
    """The APIResourceList of one group version, or None when it is not served."""
    if group in disabled:
        return None
    served = [k for k in kinds.ALL if k.group == group and k.version == version]
    if not served:
        return None
    resources = [entry for k in served for entry in _resource_entries(k)]
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
