"""OpenShift's admission where it differs from Kubernetes for a workload like the guard: the
restricted-endpoints check on EndpointSlices and the restricted-v2 SCC's UID range for pods.
Only on a cluster started with `platform="openshift"` (`store.platform`).

Restricted endpoints, after openshift/kubernetes
`openshift-kube-apiserver/admission/network/restrictedendpoints/endpoint_admission.go`
(`sliceValidate`, `endpointsValidate`): on create and update (an update that leaves the
endpoints and ports as they were is not judged), an address inside a restricted network (the
cluster network and the service network, which OpenShift configures the plugin with, plus the
default link-local 169.254.0.0/16) or a port of the machine-config server (TCP 22623, 22624) is
refused unless the writer may `create` the pseudo-subresource `endpointslices/restricted`
(`endpoints/restricted` for core Endpoints) in the object's namespace, asked of the
authorizer (here the store's RBAC through the request's `Policy`). The refusal is
`admission.NewForbidden`: `endpointslices.discovery.k8s.io "<name>" is forbidden: endpoint
address <ip> is not allowed`. openshift/origin `test/extended/networking/endpoint_admission.go`
shows the contract: a project admin with endpointslice create/update may write an external
address, never a pod or service IP; the endpointslice controller's account may.

The restricted-v2 SCC's `runAsUser: MustRunAsRange`, after openshift/apiserver-library-go
`pkg/securitycontextconstraints/user/mustrunasrange.go` (`Generate` answers the range's first
UID; `ValidateContainer` refuses a UID outside `[min, max]` with "must be in the ranges: [min,
max]") and `sccadmission/admission.go` `Admit` (the first usable SCC that validates the pod
wins, with mutation; none: `unable to validate against any security context constraint: [...]`
listing each provider's errors). The range is the namespace's `openshift.io/sa.scc.uid-range`
annotation (`<first>/<size>`), which OpenShift's namespace-security-allocation controller
writes on every namespace; here a namespace created through the API gets the next free block
at once. Every authenticated user may use restricted-v2; a pod whose creator or whose
ServiceAccount may `use` a wider SCC (`nonroot-v2`, `anyuid`, `privileged`: verb `use` on
`securitycontextconstraints.security.openshift.io/<name>`, as `sccmatching.ConstraintAppliesTo`
asks) is admitted as it is, as `system:masters` always is. The GPU Operator grants its
operands `privileged` that way (NVIDIA/gpu-operator `assets/state-dcgm/0200_role.yaml`), so
the DaemonSet controller's pods are not judged here; the ReplicaSet and Job controllers'
pods (the guard's, the Job's) are.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.access import Attributes, Policy
from dcgm_sim.network import IPV4, IPV6, SERVICE_CIDRS, IPNetwork, Network
from dcgm_sim.rbac import SA_PREFIX, StoreAuthorizer
from dcgm_sim.statuses import forbidden
from dcgm_sim.store import Store

Obj = dict[str, Any]
KUBERNETES, OPENSHIFT = "kubernetes", "openshift"
PLATFORMS = (KUBERNETES, OPENSHIFT)

UID_RANGE_ANNOTATION = "openshift.io/sa.scc.uid-range"
FIRST_UID, BLOCK_SIZE = 1000680000, 10000  # an example first block; real clusters vary
WIDER_SCCS = ("nonroot-v2", "anyuid", "privileged")
SCC_GROUP, SCC_RESOURCE = "security.openshift.io", "securitycontextconstraints"

# The cluster network the pods' addresses come from (network.pod_cidr_for hands out /24s of
# 10.128.0.0/9 and /64s of fd00:10:244::/48); the service network is network.SERVICE_CIDRS.
CLUSTER_CIDRS: dict[str, IPNetwork] = {IPV4: ipaddress.ip_network("10.128.0.0/9"),
                                       IPV6: ipaddress.ip_network("fd00:10:244::/48")}
LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")  # defaultRestrictedNetworks
RESTRICTED_PORTS = (("TCP", 22623), ("TCP", 22624))  # defaultRestrictedPorts (MCS)


def enabled(store: Store) -> bool:
    return store.platform == OPENSHIFT


# ---- restricted endpoints --------------------------------------------------------------------

def restricted_networks(network: Network) -> list[IPNetwork]:
    """The plugin's `restrictedCIDRs` (cluster and service networks), then the default."""
    return ([CLUSTER_CIDRS[f] for f in network.families]
            + [SERVICE_CIDRS[f] for f in network.families] + [LINK_LOCAL])


def _addresses(kind: kinds.Kind, obj: Obj) -> list[str]:
    if kind == kinds.ENDPOINTSLICE:
        return [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    return [a.get("ip", "") for s in obj.get("subsets") or []
            for a in [*(s.get("addresses") or []), *(s.get("notReadyAddresses") or [])]]


def _ports(kind: kinds.Kind, obj: Obj) -> list[tuple[str, int]]:
    ports = (obj.get("ports") or [] if kind == kinds.ENDPOINTSLICE
             else [p for s in obj.get("subsets") or [] for p in s.get("ports") or []])
    return [(str(p.get("protocol") or "TCP"), int(p["port"])) for p in ports
            if p.get("port") is not None]


def restricted_reason(kind: kinds.Kind, obj: Obj, network: Network) -> str:
    """The plugin's error for the first restricted address or port, "" when there is none."""
    nets = restricted_networks(network)
    for address in _addresses(kind, obj):
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue  # checkRestrictedIP: an unparsable address is not judged here
        if any(ip.version == n.version and ip in n for n in nets):
            return f"endpoint address {address} is not allowed"
    for protocol, port in _ports(kind, obj):
        if (protocol, port) in RESTRICTED_PORTS:
            return f"endpoint port {protocol}:{port} is not allowed"
    return ""


def _unchanged(kind: kinds.Kind, new: Obj, old: Obj | None) -> bool:
    if old is None:
        return False
    if kind == kinds.ENDPOINTSLICE:
        return (new.get("endpoints") == old.get("endpoints")
                and new.get("ports") == old.get("ports"))
    return bool(new.get("subsets") == old.get("subsets"))


def check_endpoints(store: Store, policy: Policy, kind: kinds.Kind, new: Obj,
                    old: Obj | None) -> None:
    """403 when `policy`'s user writes a restricted address without `<resource>/restricted`."""
    if kind not in (kinds.ENDPOINTSLICE, kinds.ENDPOINTS) or _unchanged(kind, new, old):
        return
    reason = restricted_reason(kind, new, store.network)
    if not reason:
        return
    meta = new.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    ask = Attributes(policy.user, "create", kind.group, kind.plural, "restricted", namespace,
                     name)
    if not policy.decide(ask).allowed:
        raise forbidden(kind, kind.plural, name, reason)


# ---- restricted-v2: the namespace's UID range ------------------------------------------------

def uid_range(namespace: Obj | None) -> tuple[int, int] | None:
    """`[first, last]` of the namespace's `openshift.io/sa.scc.uid-range` (`first/size`)."""
    annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    raw = str(annotations.get(UID_RANGE_ANNOTATION) or "")
    first, sep, size = raw.partition("/")
    if not sep or not first.isdigit() or not size.isdigit() or int(size) < 1:
        return None
    return int(first), int(first) + int(size) - 1


def allocate_block(store: Store, namespace: Obj) -> None:
    """Give a new namespace the next free UID block, as the namespace-security-allocation
    controller does (here at once, on create)."""
    annotations = namespace.setdefault("metadata", {}).setdefault("annotations", {})
    if UID_RANGE_ANNOTATION in annotations:
        return
    existing, _ = store.list(kinds.NAMESPACE)
    taken = [r[0] for r in (uid_range(n) for n in existing) if r is not None]
    first = max(taken) + BLOCK_SIZE if taken else FIRST_UID
    annotations[UID_RANGE_ANNOTATION] = f"{first}/{BLOCK_SIZE}"


def allocate_blocks(store: Store, first: str) -> None:
    """Annotate every namespace without a UID block (a seeded cluster turned OpenShift),
    `first` (the operator's) first, so that it holds the first block."""
    for namespace in sorted(store.list(kinds.NAMESPACE)[0],
                            key=lambda n: (n["metadata"]["name"] != first, n["metadata"]["name"])):
        if uid_range(namespace) is None:
            body = {"metadata": {**namespace["metadata"],
                                 "annotations": dict(namespace["metadata"].get("annotations")
                                                     or {})}}
            allocate_block(store, body)
            store.update(kinds.NAMESPACE, {**namespace, **body})


def _may_use_wider_scc(store: Store, namespace: str,
                       users: Iterable[tuple[str, tuple[str, ...]]]) -> bool:
    authorizer = StoreAuthorizer(store)
    return any(authorizer.reason_allowed(user, groups, verb="use", namespace=namespace,
                                         group=SCC_GROUP, resource=SCC_RESOURCE, name=scc)
               for user, groups in users for scc in WIDER_SCCS)


def service_account_user(namespace: str, pod: Obj) -> tuple[str, tuple[str, ...]]:
    sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    return (f"{SA_PREFIX}{namespace}:{sa}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
             "system:authenticated"))


def _restricted_v2(pod: Obj, first: int, last: int) -> list[str]:
    """`AssignSecurityContext` under restricted-v2's user strategy: every container without a
    UID (its own or the pod's) gets `first`; the errors for UIDs outside the range."""
    spec = pod.setdefault("spec", {})
    errors = []
    pod_uid = (spec.get("securityContext") or {}).get("runAsUser")
    detail = f"must be in the ranges: [{first}, {last}]"
    if pod_uid is not None and not first <= int(pod_uid) <= last:
        errors.append(f"provider restricted-v2: .spec.securityContext.runAsUser: Invalid value: "
                      f"{pod_uid}: {detail}")
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            context = container.setdefault("securityContext", {})
            uid = context.get("runAsUser", pod_uid)
            if uid is None:
                context["runAsUser"] = first
            elif not first <= int(uid) <= last:
                errors.append(f"provider restricted-v2: .{field}[{i}].runAsUser: Invalid value: "
                              f"{uid}: {detail}")
    return errors


def admit_pod(store: Store, pod: Obj, creator: Policy | None = None) -> Obj:
    """The pod as SCC admission leaves it, or 403 (`creator` None: a controller, whose own
    account may use nothing wider than restricted-v2)."""
    namespace = str(pod["metadata"].get("namespace", ""))
    users = [service_account_user(namespace, pod)]
    if creator is not None:
        if creator.superuser:
            return pod
        users.append((creator.user, tuple(creator.groups)))
    if _may_use_wider_scc(store, namespace, users):
        return pod
    span = uid_range(store.find(kinds.NAMESPACE, None, namespace))
    if span is None:
        errors = [f"provider restricted-v2: unable to find annotation {UID_RANGE_ANNOTATION}"]
    else:
        errors = _restricted_v2(pod, *span)
    if errors:
        denied = [f'provider "{scc}": Forbidden: not usable by user or serviceaccount'
                  for scc in WIDER_SCCS]
        raise forbidden(kinds.POD, "pods", str(pod["metadata"].get("name", "")),
                        "unable to validate against any security context constraint: "
                        f"[{', '.join([*denied, *errors])}]")
    annotations = pod["metadata"].setdefault("annotations", {})
    annotations["openshift.io/scc"] = "restricted-v2"  # securityv1.ValidatedSCCAnnotation
    return pod


def plugins(store: Store, policy: Policy) -> Callable[[kinds.Kind, Obj, Obj | None], Obj] | None:
    """`writes`' plugins for one request of `policy`'s user: None on Kubernetes."""
    if not enabled(store):
        return None
    return lambda kind, new, old: admit_request(store, policy, kind, new, old)


def admit_request(store: Store, policy: Policy, kind: kinds.Kind, new: Obj,
                  old: Obj | None) -> Obj:
    """The OpenShift plugins for one API write of `policy`'s user (after Kubernetes'
    admission): `new` as admitted, or an `ApiError`."""
    if not enabled(store):
        return new
    if kind == kinds.NAMESPACE and old is None:
        allocate_block(store, new)
    elif kind == kinds.POD and old is None:
        new = admit_pod(store, new, policy)
    else:
        check_endpoints(store, policy, kind, new, old)
    return new

