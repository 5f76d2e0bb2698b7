"""A Service's `ipFamilyPolicy` and `ipFamilies`, defaulted and checked against the cluster's
families before any cluster IP is allocated.

After upstream `initIPFamilyFields` (pkg/registry/core/service/storage/alloc.go) and the part
of `ValidateServiceClusterIPsRelatedFields` (pkg/apis/core/validation/validation.go) it leans
on: no policy means the old one on an update, RequireDualStack for a headless Service without
a selector, SingleStack otherwise; families are inferred from explicit clusterIPs, default to
the cluster's primary one, and gain the other family when the policy asks for dual-stack on a
dual-stack cluster; RequireDualStack on a single-stack cluster, or a family the cluster lacks,
is 422. A PreferDualStack Service is neither upgraded nor downgraded by an update that keeps
its IPs and families. Pure.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from dcgm_sim.network import IPV4, IPV6, Network, family_of, other_family
from dcgm_sim.statuses import FieldErrors

Obj = dict[str, Any]

SINGLE, PREFER, REQUIRE = "SingleStack", "PreferDualStack", "RequireDualStack"
POLICIES = (PREFER, REQUIRE, SINGLE)  # sorted, as NotSupported lists them
_POLICY_PATH = "spec.ipFamilyPolicy"


@dataclass
class Families:
    """The outcome: the policy and families to store, or None for both when errors stop it."""

    policy: str | None
    families: list[str]


def _headless_selectorless(spec: Obj) -> bool:
    return spec.get("clusterIP") == "None" and not spec.get("selector")


def _default_policy(spec: Obj, old: Obj | None) -> str:
    if old is not None and old.get("ipFamilyPolicy"):
        return str(old["ipFamilyPolicy"])
    return REQUIRE if _headless_selectorless(spec) else SINGLE


def _valid_ip(ip: str) -> bool:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        return False
    return True


def _check_related_fields(spec: Obj, policy: str, errors: FieldErrors) -> None:
    """The shape checks `ValidateServiceClusterIPsRelatedFields` makes before allocation."""
    if policy not in POLICIES:
        errors.add("NotSupported", _POLICY_PATH,
                   "supported values: " + ", ".join(f'"{p}"' for p in POLICIES), policy)
    families = list(spec.get("ipFamilies") or [])
    if len(families) > 2:
        errors.add("Invalid", "spec.ipFamilies", "may specify no more than one IP for each IP "
                   "family, i.e 2 IPs", families)
    for i, fam in enumerate(families):
        if fam not in (IPV4, IPV6):
            errors.add("NotSupported", f"spec.ipFamilies[{i}]", 'supported values: "IPv4", '
                       '"IPv6"', fam)
        elif fam in families[:i]:
            errors.add("Duplicate", f"spec.ipFamilies[{i}]", value=fam)
    ips = [ip for ip in spec.get("clusterIPs") or [] if ip]
    if not ips or ips[0] == "None":
        return
    if len(ips) > 2:
        errors.add("Invalid", "spec.clusterIPs", "may only hold up to 2 values", ips)
    elif len(ips) == 2 and all(map(_valid_ip, ips)) and family_of(ips[0]) == family_of(ips[1]):
        errors.add("Invalid", "spec.clusterIPs", "may specify no more than one IP for each IP "
                   "family", ips)
    for i, ip in enumerate(ips[:2]):
        if i < len(families) and _valid_ip(ip) and family_of(ip) != families[i]:
            errors.add("Invalid", f"spec.clusterIPs[{i}]", f"expected an {families[i]} value "
                       f"as indicated by `ipFamilies[{i}]`", ips)


def _update_prep(spec: Obj, old: Obj, policy: str, errors: FieldErrors) -> None:
    """SingleStack on an update releases the secondary IP and family; any other policy may
    not drop them."""
    ips, old_ips = spec.get("clusterIPs") or [], old.get("clusterIPs") or []
    fams, old_fams = spec.get("ipFamilies") or [], old.get("ipFamilies") or []
    if policy == SINGLE:
        if ips == old_ips and len(ips) > 1:
            spec["clusterIPs"] = ips[:1]
        if fams == old_fams and len(fams) > 1:
            spec["ipFamilies"] = fams[:1]
        return
    if len(ips) < len(old_ips) and ips:
        errors.add("Invalid", _POLICY_PATH, "must be 'SingleStack' to release the secondary "
                   "cluster IP", policy)
    if len(fams) < len(old_fams) and fams:
        errors.add("Invalid", _POLICY_PATH, "must be 'SingleStack' to release the secondary "
                   "IP family", policy)


def _unchanged_prefer_dual(spec: Obj, old: Obj | None) -> bool:
    """`isMatchingPreferDualStackClusterIPFields`: no upgrade or downgrade on a cluster
    change for a PreferDualStack Service whose IPs and families an update keeps."""
    if old is None or spec.get("ipFamilyPolicy") != PREFER:
        return False
    return (old.get("ipFamilyPolicy") == PREFER
            and (spec.get("clusterIPs") or []) == (old.get("clusterIPs") or [])
            and (spec.get("ipFamilies") or []) == (old.get("ipFamilies") or []))


def init_ip_families(spec: Obj, old: Obj | None, network: Network,
                     errors: FieldErrors) -> Families:
    """Default and check the policy and families (spec read, `clusterIPs` possibly trimmed on
    an update); the errors go to `errors`, and then `Families.policy` is None."""
    if _unchanged_prefer_dual(spec, old):
        return Families(PREFER, list(spec.get("ipFamilies") or []))
    policy = str(spec.get("ipFamilyPolicy") or _default_policy(spec, old))
    found = FieldErrors()
    _check_related_fields(spec, policy, found)
    if not found.errors and old is not None:
        _update_prep(spec, old, policy, found)
    families = list(spec.get("ipFamilies") or [])
    if not found.errors:
        if policy == SINGLE and len(spec.get("clusterIPs") or []) == 2:
            found.add("Invalid", _POLICY_PATH, "must be 'RequireDualStack' or "
                      "'PreferDualStack' when multiple cluster IPs are specified", policy)
        if policy == SINGLE and len(families) == 2:
            found.add("Invalid", _POLICY_PATH, "must be 'RequireDualStack' or "
                      "'PreferDualStack' when multiple IP families are specified", policy)
        _infer_from_cluster_ips(spec, families, network, found)
    if not found.errors:
        if _headless_selectorless(spec):
            families = families or [network.primary]
            if len(families) < 2 and policy != SINGLE:
                families.append(other_family(families[0]))
            return Families(policy, families)
        _check_configured(policy, families, network, found)
    if found.errors:
        errors.errors += found.errors
        return Families(None, families)
    families = families or [network.primary]
    if policy != SINGLE and len(families) == 1 and network.dual:
        families.append(other_family(families[0]))
    return Families(policy, families)


def _infer_from_cluster_ips(spec: Obj, families: list[str], network: Network,
                            errors: FieldErrors) -> None:
    ips = list(spec.get("clusterIPs") or [])
    for i, ip in enumerate(ips):
        if ip == "None" or not _valid_ip(ip):
            break
        if i >= len(families):
            fam = family_of(ip)
            if fam not in network.families:
                errors.add("Invalid", f"spec.clusterIPs[{i}]",
                           f"{fam} is not configured on this cluster", ips)
            else:
                families.append(fam)


def _check_configured(policy: str, families: list[str], network: Network,
                      errors: FieldErrors) -> None:
    if policy == REQUIRE and not network.dual:
        errors.add("Invalid", _POLICY_PATH, "this cluster is not configured for dual-stack "
                   "services", policy)
    for i, fam in enumerate(families):
        if fam not in network.families:
            errors.add("Invalid", f"spec.ipFamilies[{i}]", "not configured on this cluster", fam)
