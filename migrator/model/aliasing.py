"""The tool's alias Services, as pure data: what an alias of a source Service is, and the one
answer to "does this alias still match its source?" that phase 2's verify and the guard share."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from migrator.model import objects as o
from migrator.model.monitoring import SCRAPE
from migrator.model.stacks import Common, Component

# Every core/v1 ServiceSpec field but the selector (tests/planning/test_alias_fields.py): copied,
# so the alias is reached as the source is, or never (the API's, one Service's, externalName).
COPIED_SPEC_FIELDS = ("type", "internalTrafficPolicy", "externalTrafficPolicy", "sessionAffinity",
                      "sessionAffinityConfig", "ipFamilyPolicy", "ipFamilies",
                      "publishNotReadyAddresses", "allocateLoadBalancerNodePorts",
                      "loadBalancerClass", "loadBalancerSourceRanges", "trafficDistribution")
NEVER_COPIED_SPEC_FIELDS = ("clusterIP", "clusterIPs", "healthCheckNodePort", "externalIPs",
                            "loadBalancerIP", "externalName")
COPIED_PORT_FIELDS = ("name", "port", "targetPort", "protocol", "appProtocol")

# Source annotations an alias does not copy besides the scrape annotation (a copy would scrape
# every exporter pod twice, docs/design.md): the tool's markers and other tools' bookkeeping.
NOT_COPIED_ANNOTATION_PREFIXES = ("dcgm-migrate/", "kubectl.kubernetes.io/last-applied-",
                                  "meta.helm.sh/", "argocd.argoproj.io/", "nvidia.com/")


def alias_body(namespace: str, common: Common, comp: Component, source: Mapping[str, Any],
               owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The alias Service: the source's supported configuration, the DRA app selector, marked
    as the tool's, with a non-controller ownerReference to the GPUCluster."""
    assert comp.alias
    src_spec = source.get("spec") or {}
    copied = {k: v for k, v in o.annotations_of(source).items()  # e.g. an internal-LB's
              if k != SCRAPE and not k.startswith(NOT_COPIED_ANNOTATION_PREFIXES)}
    spec: dict[str, Any] = {k: copy.deepcopy(src_spec[k]) for k in COPIED_SPEC_FIELDS
                            if k in src_spec}
    spec["ports"] = [{k: p[k] for k in COPIED_PORT_FIELDS if k in p}
                     for p in src_spec.get("ports") or []]
    spec["selector"] = comp.app_selector
    if comp.local_traffic:
        spec["internalTrafficPolicy"] = "Local"
    meta: dict[str, Any] = {
        "name": comp.alias,
        "namespace": namespace,
        "labels": {common.managed_by.key: common.managed_by.value,
                   "app.kubernetes.io/name": comp.alias},
        "annotations": {**copied, common.alias_of_annotation: comp.service},
    }
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": str(owner.get("apiVersion", "nvidia.com/v1alpha1")),
            "kind": str(owner.get("kind", "GPUCluster")), "name": o.name(owner),
            "uid": str(o.meta(owner).get("uid", "")), "controller": False,
            "blockOwnerDeletion": False}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def owner_of(crs: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The CR an alias belongs to: the oldest (creationTimestamp, then name), as the operator
    picks its singleton; one being deleted only when no other remains."""
    live = [c for c in crs if not o.meta(c).get("deletionTimestamp")] or list(crs)
    return min(live, key=lambda c: (str(o.meta(c).get("creationTimestamp") or ""), o.name(c)),
               default=None)


def _ports(value: Any) -> list[dict[str, Any]]:
    """Ports as compared: the fields the alias copies, in order (nodePort is the API's)."""
    return [{k: p.get(k) for k in COPIED_PORT_FIELDS if k in p} for p in value or []]


def _same(key: str, live: Any, wanted: Any) -> bool:
    if key == "ports":
        # The API server defaults fields (protocol, targetPort): compare what was asked for.
        want, have = _ports(wanted), _ports(live)
        return len(want) == len(have) and all(
            all(h.get(k) == v for k, v in w.items()) for w, h in zip(want, have, strict=True))
    return bool(live == wanted)


def differences(live: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """Spec field → wanted value, and `annotations` → the copied ones, where a live alias differs
    from `alias_body`; never the selector (phase 3 and the guard own it)."""
    spec = live.get("spec") or {}
    out: dict[str, Any] = {
        k: v for k, v in (desired.get("spec") or {}).items()
        if k != "selector" and not _same(k, spec.get(k), v)}
    have = o.annotations_of(live)
    wrong = {k: v for k, v in o.annotations_of(desired).items() if have.get(k) != v}
    if wrong:
        out["annotations"] = wrong
    return out


def describe(diff: Mapping[str, Any]) -> str:
    """The differences as a reader wants them: spec fields, then each annotation by key."""
    fields = sorted(k for k in diff if k != "annotations")
    return ", ".join(fields + [f"annotation {k}" for k in sorted(diff.get("annotations") or {})])
