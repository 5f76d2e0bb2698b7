"""The tool's resource table (`migrator.model.kinds`) against the discovery the sim serves.

The sim keeps its own catalog (`dcgm_sim/kinds.py`, from kube-apiserver's discovery documents
and the CRDs); here the official client walks the served discovery (`/api`, `/apis`, every
`/api/v1` and `/apis/{group}/{version}` they name) and every Kind the tool defines must be
served with the same group, version, plural, kind, scope and short names, and a status
subresource exactly when the tool expects one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from dcgm_sim import kinds as catalog
from migrator.model import kinds


@dataclass(frozen=True)
class Served:
    """One resource entry of a served APIResourceList."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    verbs: tuple[str, ...]
    categories: tuple[str, ...]


def _resources(api: client.ApiClient, path: str) -> Any:
    """GET an APIResourceList through the client's own serializer (as CoreV1Api's
    `get_api_resources` does for `/api/v1/`): custom groups have no generated API class."""
    request = api.param_serialize("GET", path, header_params={"Accept": "application/json"},
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request)
    response.read()
    return api.response_deserialize(response, {"200": "V1APIResourceList"}).data


def served_discovery(api: client.ApiClient) -> dict[str, Served | str]:
    """`plural[.group]` -> its served entry, and `plural[.group]/sub` -> the subresource's kind,
    walking discovery the way a client does: /api and /apis name the group versions."""
    paths: list[tuple[str, str, str]] = [
        ("", v, f"/api/{v}") for v in client.CoreApi(api).get_api_versions().versions]
    for doc in client.ApisApi(api).get_api_versions().groups:
        assert doc.preferred_version is not None
        assert doc.preferred_version.group_version in {v.group_version for v in doc.versions}
        paths += [(doc.name, v.version, f"/apis/{v.group_version}") for v in doc.versions]
    out: dict[str, Served | str] = {}
    for group, version, path in paths:
        body = _resources(api, path)
        assert body.group_version == (f"{group}/{version}" if group else version)
        for r in body.resources:
            plural, _, sub = r.name.partition("/")
            key = catalog.resource_key(group, plural)
            if sub:
                out[f"{key}/{sub}"] = r.kind
                continue
            assert key not in out, f"{key} served twice ({path})"
            out[key] = Served(group, version, plural, r.kind, r.namespaced,
                              tuple(r.short_names or ()), tuple(r.verbs),
                              tuple(r.categories or ()))
    return out


def test_every_kind_the_tool_defines_is_served_as_the_tool_names_it(
        api: client.ApiClient) -> None:
    served = served_discovery(api)
    wrong = []
    for k in kinds.ALL:
        entry = served.get(k.key)
        want = (k.group, k.version, k.plural, k.kind, k.namespaced, k.short_names)
        got = entry if not isinstance(entry, Served) else (
            entry.group, entry.version, entry.plural, entry.kind, entry.namespaced,
            entry.short_names)
        if got != want:
            wrong.append(f"{k.key}: the tool says {want}, the sim serves {got}")
        if (f"{k.key}/status" in served) != k.has_status:
            wrong.append(f"{k.key}: the tool expects a status subresource: {k.has_status}")
    assert wrong == []
    assert len(kinds.ALL) == len({k.key for k in kinds.ALL})


def test_served_discovery_is_the_sims_catalog(api: client.ApiClient) -> None:
    """Every catalog row is served as written (verbs, categories, subresources), nothing more;
    spot checks against upstream's discovery documents pin the rows the tool does not have."""
    served = served_discovery(api)
    rows = {k: v for k, v in served.items() if isinstance(v, Served)}
    assert set(rows) == set(catalog.BY_KEY)
    for k in catalog.ALL:
        assert rows[k.key] == Served(k.group, k.version, k.plural, k.kind, k.namespaced,
                                     k.short_names, k.verbs, k.categories)
        subs = {key.rpartition("/")[2] for key in served if key.startswith(f"{k.key}/")}
        assert subs == set(k.subresources), k.key
    # api__v1.json: namespaces have no deletecollection; endpoints keep their plural singular
    assert "deletecollection" not in rows["namespaces"].verbs
    assert rows["endpoints"].short_names == ("ep",) and served["pods/log"] == "Pod"
    # apis__authorization.k8s.io__v1.json: reviews are create-only and cluster-scoped
    assert rows["selfsubjectaccessreviews.authorization.k8s.io"].verbs == ("create",)
    # apis__apiextensions.k8s.io__v1.json and the CRDs
    assert rows["customresourcedefinitions.apiextensions.k8s.io"].categories == (
        "api-extensions",)
    assert rows["gpuclusters.nvidia.com"].short_names == ("gc",)
    assert rows["clusterpolicies.nvidia.com"].short_names == ()
    assert rows["servicemonitors.monitoring.coreos.com"].categories == ("prometheus-operator",)
