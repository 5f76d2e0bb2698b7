"""The `shared-services-fork` operator release (the seed author's fork): its
SharedServiceReconciler, as its code behaves.

Source: rahulait/gpu-operator@5746d4405523f81159909edfb9d8198df7c3170a,
`controllers/shared_service_controller.go` (and its test), `manifests/shared/`, the DaemonSet
manifests, `cmd/gpu-operator/main.go`. What the code does, and so the imitation:

- **Which CR needs which Service** (`Reconcile`): the ClusterPolicy and the GPUCluster of
  `resolveActiveConfig`, each only while not being deleted (`DeletionTimestamp.IsZero()`).
  `nvidia-dcgm`: the ClusterPolicy when `spec.dcgm` is enabled (`DCGMSpec.IsEnabled`: on when
  unset), the GPUCluster only when `spec.dcgm.enabled` is explicitly true. `nvidia-dcgm-exporter`:
  the ClusterPolicy when `spec.dcgmExporter` is enabled (on when unset), the GPUCluster when
  `spec.dcgmExporter` is present and enabled (absent: not needed).
- **Desired Service** (`manifests/shared/state-dcgm*/service.yaml`, `rendering.shared_service`):
  `nvidia-dcgm` ClusterIP, internalTrafficPolicy Local, port `dcgm` 5555; `nvidia-dcgm-exporter`
  port `gpu-metrics` 9400, annotation `prometheus.io/scrape: "true"`, type and
  internalTrafficPolicy from the CRs' `dcgmExporter.service` (`normalizedExporterService`:
  ClusterIP and Cluster when unset). Both select `app.kubernetes.io/component: <name>` and carry
  the labels `app: <name>` and `app.kubernetes.io/component: <name>`.
- **Conflict:** when both CRs need the exporter Service and their normalized settings (type,
  internalTrafficPolicy) differ, the exporter is skipped (neither written nor its `-dra`
  deleted) and the reconcile returns "conflicting DCGM Exporter Service settings in
  ClusterPolicy and GPUCluster"; `nvidia-dcgm` is still reconciled. Logged here (warning).
- **Write** (`syncService`, `controllerutil.CreateOrUpdate`): Get; the mutate function runs
  on the live object (so `clusterIP(s)`, `ipFamilies`, `ipFamilyPolicy` and every other field
  it does not set are kept); the Update is sent only when the mutated object differs
  (semantically: nil and empty maps equal), so a steady state writes nothing. The mutation:
  - refuses an existing Service that is not managed (`managedDCGMService`: label
    `nvidia.com/shared-service: "true"`, or any ownerReference to a `nvidia.com/v1`
    ClusterPolicy or `nvidia.com/v1alpha1` GPUCluster, controller or not) — "refusing to adopt
    unmanaged Service"; and one being deleted;
  - labels and annotations: the desired ones merged over the live ones, plus
    `nvidia.com/shared-service: "true"`, minus `nvidia.com/gpu-operator.state`;
  - ownerReferences: every ClusterPolicy/GPUCluster reference dropped (a controller one too),
    any other kept (another *controller* reference: error, no write), then one non-controller
    reference (`SetOwnerReference`: apiVersion, kind, name, uid; no `controller`, no
    `blockOwnerDeletion`) per CR that needs the Service, ClusterPolicy first;
  - selector, type, internalTrafficPolicy and ports replaced; for NodePort/LoadBalancer each
    port keeps the live `nodePort` of the port with the same name and protocol;
    `healthCheckNodePort` / `allocateLoadBalancerNodePorts` cleared unless LoadBalancer,
    `externalTrafficPolicy` cleared for ClusterIP.
  Then `<name>-dra` is deleted (`deleteService`).
- **Delete** (`deleteService`): when no CR needs `<name>`, it and `<name>-dra` are deleted —
  only if managed (a same-named Service it does not manage is never removed), not while being
  deleted (error), with preconditions on uid and resourceVersion, NotFound ignored.
- **Triggers** (`SetupWithManager`): any ClusterPolicy or GPUCluster event (metadata too), any
  event of a Service named `nvidia-dcgm`, `nvidia-dcgm-exporter` or their `-dra` in the operator
  namespace, and `RequeueAfter: time.Minute` (`SHARED_RESYNC_SECONDS`, simulated).

So the dcgm-migrate aliases (a non-controller GPUCluster ownerReference, label
`app.kubernetes.io/managed-by: dcgm-migrate`) are adopted: the label merge keeps the tool's
label, the ownerReferences are rebuilt, and the selector becomes the component label at once.

**The stack controllers in that release** (`rendering.render(..., release=
"shared-services-fork")`):
both stacks' DCGM / Exporter DaemonSets and pod templates carry `app.kubernetes.io/component:
nvidia-dcgm` / `nvidia-dcgm-exporter` (the same value on both stacks; the `-dra` DaemonSets too)
and a pod anti-affinity on it, so the upgrade changes every DaemonSet's hash and template and
rolls each pod once. The GPUCluster golden files at that commit render no Service any more (the
`-dra` Services are gone from `manifests/state-dcgm*`); its ServiceMonitor
(`manifests/state-dcgm-exporter/0600_service_monitor.yaml`) selects `app: nvidia-dcgm-exporter`,
the shared Service's label. The disabled-state cleanup (`deleteStateRelatedObjects`) still skips
the two shared names, and the shared Services lose the state label anyway.

**Not determined, and chosen here:**
- Whether that release's ClusterPolicy controller still renders its own `nvidia-dcgm` /
  `nvidia-dcgm-exporter` Services: `assets/state-dcgm/0500_service.yaml` and
  `assets/state-dcgm-exporter/0400_service.yaml` are not in the stored copy of that commit (nor
  is `object_controls.go` at it), so neither their presence nor their absence could be read.
  Chosen: they are gone (the ClusterPolicy imitation renders, updates and deletes no Service in
  this release). Reasons: the GPUCluster side dropped its Services in the same change; the
  shared reconciler strips the ClusterPolicy's controller reference and replaces the selector,
  which the ClusterPolicy `Service` function (whole-object Update with a controller reference
  and `app:` selector) would revert every few seconds, a fight the change's tests could not
  pass on a real cluster; and `dcgm_exporter.go` calls `nvidia-dcgm` "the shared standalone
  nvidia-dcgm hostengine Service (manifests/shared/state-dcgm/service.yaml)".
- The scrape annotation and ServiceMonitor of the shared exporter Service: the shared template
  carries `prometheus.io/scrape: "true"` (read). The ClusterPolicy exporter ServiceMonitor asset
  at that commit could not be read; the imitation keeps rendering the one it renders today
  (`nvidia-dcgm-exporter`, selecting `app: nvidia-dcgm-exporter`, which the shared Service still
  carries). The GPUCluster ServiceMonitor is not rendered by the sim (as today).
- `resolveActiveConfig` is not in the stored copy: taken as the sim's singleton rule (the oldest
  CR of each kind, by creationTimestamp then name), including one being deleted (which then
  needs nothing, as `Reconcile` checks the deletionTimestamp after it).
- `RequeueAfter` errors/backoff of controller-runtime are not modelled: a failed reconcile is
  retried at the next trigger or the one-minute requeue.
- The sim's GPUCluster stack keeps its own (older) rule that an absent `dcgmExporter` section
  enables the exporter state; only this reconciler follows the release's nil-is-off rule.

Writes go through the store after `admission.admit` (the API server's defaulting and
allocation, so an Update that leaves clusterIP(s) unset keeps them), not HTTP, like the rest of
the imitation: the request log shows only what clients did.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim import admission, allocation, kinds, writes
from dcgm_sim.controllers import rendering as R
from dcgm_sim.jsoncopy import clone
from dcgm_sim.statuses import ApiError
from dcgm_sim.store import Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# SetupWithManager's RequeueAfter (simulated seconds).
SHARED_RESYNC_SECONDS = 60.0
SHARED_NAMES = (R.DCGM_COMPONENT, R.EXPORTER_COMPONENT)
WATCHED_NAMES = frozenset({*SHARED_NAMES, *(f"{n}-dra" for n in SHARED_NAMES)})
CONFLICT = "conflicting DCGM Exporter Service settings in ClusterPolicy and GPUCluster"
_STACK_OWNERS = frozenset({("nvidia.com/v1", "ClusterPolicy"),
                           ("nvidia.com/v1alpha1", "GPUCluster")})


class SharedServiceError(Exception):
    """What `syncService` returns as an error: nothing more is written for that Service."""


@dataclass
class SharedResult:
    """One reconcile: the writes it made and the errors it returned (upstream: one error)."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def writes(self) -> int:
        return len(self.created) + len(self.updated) + len(self.deleted)


def stack_owner(ref: Mapping[str, Any]) -> bool:
    """`stackServiceOwner`: a reference to a ClusterPolicy or GPUCluster (by apiVersion/kind)."""
    return (ref.get("apiVersion"), ref.get("kind")) in _STACK_OWNERS


def managed(svc: Mapping[str, Any]) -> bool:
    """`managedDCGMService`: the shared-service label, or any stack ownerReference."""
    meta = svc.get("metadata") or {}
    if (meta.get("labels") or {}).get(R.SHARED_SERVICE_LABEL) == "true":
        return True
    return any(stack_owner(ref) for ref in meta.get("ownerReferences") or [])


def _active(store: Store, kind: kinds.Kind) -> Obj | None:
    crs, _ = store.list(kind)
    if not crs:
        return None
    return min(crs, key=lambda c: (c["metadata"].get("creationTimestamp", ""),
                                   c["metadata"]["name"]))


def _exporter_settings(cr: Mapping[str, Any]) -> tuple[str, str]:
    """`normalizedExporterService`: (type, internalTrafficPolicy), ClusterIP/Cluster when unset."""
    exporter = (cr.get("spec") or {}).get("dcgmExporter") or {}
    service = exporter.get("service") or {}
    return (str(service.get("type") or "ClusterIP"),
            str(service.get("internalTrafficPolicy") or "Cluster"))


def _gpucluster_needs(cr: Mapping[str, Any], section: str) -> bool:
    spec = cr.get("spec") or {}
    value = spec.get(section)
    if not isinstance(value, Mapping):
        return False  # a nil pointer
    if section == "dcgm":
        return value.get("enabled") is True  # explicitly enabled only
    return value.get("enabled") is None or bool(value["enabled"])


@dataclass
class _State:
    name: str
    owners: list[Obj] = field(default_factory=list)
    service_type: str = "ClusterIP"
    traffic_policy: str = "Cluster"


def desired_states(store: Store) -> tuple[list[_State], list[tuple[str, str]]]:
    """Which CR needs which shared Service, and the exporter settings of each that does."""
    dcgm = _State(R.DCGM_COMPONENT, traffic_policy="Local")
    exporter = _State(R.EXPORTER_COMPONENT)
    settings: list[tuple[str, str]] = []
    cp = _active(store, kinds.CLUSTER_POLICY)
    if cp is not None and not cp["metadata"].get("deletionTimestamp"):
        if R.state_enabled(cp, "state-dcgm"):
            dcgm.owners.append(cp)
        if R.state_enabled(cp, "state-dcgm-exporter"):
            exporter.owners.append(cp)
            settings.append(_exporter_settings(cp))
    gc = _active(store, kinds.GPU_CLUSTER)
    if gc is not None and not gc["metadata"].get("deletionTimestamp"):
        if _gpucluster_needs(gc, "dcgm"):
            dcgm.owners.append(gc)
        if _gpucluster_needs(gc, "dcgmExporter"):
            exporter.owners.append(gc)
            settings.append(_exporter_settings(gc))
    return [dcgm, exporter], settings


def reconcile(store: Store, namespace: str) -> SharedResult:
    """One `SharedServiceReconciler.Reconcile`."""
    result = SharedResult()
    states, settings = desired_states(store)
    for state in states:
        if state.name == R.EXPORTER_COMPONENT and settings:
            state.service_type, state.traffic_policy = settings[0]
            if len(settings) > 1 and settings[0] != settings[1]:
                result.errors.append(CONFLICT)
                continue
        try:
            _sync(store, namespace, state, result)
        except (SharedServiceError, StoreError, ApiError) as err:
            result.errors.append(f"failed to reconcile shared Service {state.name}: {err}")
    for error in result.errors:
        log.warning("operator (shared-services): %s", error)
    return result


def _sync(store: Store, namespace: str, state: _State, result: SharedResult) -> None:
    if not state.owners:
        _delete(store, namespace, state.name, result)
        _delete(store, namespace, f"{state.name}-dra", result)
        return
    desired = R.shared_service(state.name, namespace, state.service_type, state.traffic_policy)
    live = store.find(kinds.SERVICE, namespace, state.name)
    if live is None:
        obj = mutate({"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": state.name, "namespace": namespace}},
                     desired, state.owners, existing=False)
        allocated = allocation.allocated_by(store.list(kinds.SERVICE)[0],
                                            network=store.network)
        store.create(kinds.SERVICE, admission.admit(kinds.SERVICE, obj, allocated=allocated))
        result.created.append(state.name)
    else:
        obj = mutate(live, desired, state.owners, existing=True)
        if _normalized(obj) != _normalized(live):
            allocated = allocation.allocated_by(store.list(kinds.SERVICE)[0],
                                                excluding_uid=live["metadata"]["uid"],
                                                network=store.network)
            new = admission.admit(kinds.SERVICE, obj, live, allocated=allocated)
            new["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            if store.update(kinds.SERVICE, new) is not live:
                result.updated.append(state.name)
    # "The common endpoint replaces operator-owned DRA aliases."
    _delete(store, namespace, f"{state.name}-dra", result)


def mutate(live: Mapping[str, Any], desired: Mapping[str, Any], owners: Sequence[Mapping[str, Any]],
           *, existing: bool) -> Obj:
    """`syncService`'s mutate function on a copy of `live`; SharedServiceError as upstream's."""
    svc = clone(dict(live))
    meta = svc.setdefault("metadata", {})
    name = meta.get("name", "")
    if existing and not managed(svc):
        raise SharedServiceError(f"refusing to adopt unmanaged Service {name}")
    if meta.get("deletionTimestamp"):
        raise SharedServiceError(f"Service {name} is still terminating")
    want_meta = desired["metadata"]
    labels = dict(meta.get("labels") or {})
    labels.update(want_meta.get("labels") or {})
    labels[R.SHARED_SERVICE_LABEL] = "true"
    labels.pop(R.STATE_LABEL, None)  # "Stack state cleanup must never include shared Services."
    meta["labels"] = labels
    annotations = dict(meta.get("annotations") or {})
    annotations.update(want_meta.get("annotations") or {})
    meta["annotations"] = annotations
    refs = []
    for ref in meta.get("ownerReferences") or []:
        if stack_owner(ref):
            continue
        if ref.get("controller"):
            raise SharedServiceError(f"Service {name} has another controller owner")
        refs.append(ref)
    for owner in owners:
        ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"],
               "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
        refs = _upsert(refs, ref)
    meta["ownerReferences"] = refs
    spec = svc.setdefault("spec", {})
    want = desired["spec"]
    spec["selector"] = clone(want["selector"])
    spec["type"] = want["type"]
    if want.get("internalTrafficPolicy"):
        spec["internalTrafficPolicy"] = want["internalTrafficPolicy"]
    else:
        spec.pop("internalTrafficPolicy", None)
    ports = clone(want["ports"])
    if want["type"] in ("NodePort", "LoadBalancer"):
        for port in ports:
            for old in spec.get("ports") or []:
                if (old.get("name") == port.get("name")
                        and old.get("protocol", "TCP") == port.get("protocol", "TCP")
                        and old.get("nodePort")):
                    port["nodePort"] = old["nodePort"]
    spec["ports"] = ports
    if want["type"] != "LoadBalancer":
        spec.pop("healthCheckNodePort", None)
        spec.pop("allocateLoadBalancerNodePorts", None)
    if want["type"] == "ClusterIP":
        spec.pop("externalTrafficPolicy", None)
    return svc


def _upsert(refs: list[Obj], ref: Obj) -> list[Obj]:
    """`upsertOwnerRef`: replace the reference to the same object (group, kind, name), or add."""
    group = str(ref["apiVersion"]).split("/")[0]
    for i, old in enumerate(refs):
        if (str(old.get("apiVersion", "")).split("/")[0] == group
                and old.get("kind") == ref["kind"] and old.get("name") == ref["name"]):
            refs[i] = ref
            return refs
    refs.append(ref)
    return refs


def _normalized(obj: Mapping[str, Any]) -> Obj:
    """For `equality.Semantic.DeepEqual`: empty and absent maps/lists compare equal."""
    out = clone(dict(obj))
    meta = out.get("metadata") or {}
    for key in ("labels", "annotations", "ownerReferences", "finalizers"):
        if not meta.get(key):
            meta.pop(key, None)
    return out


def _delete(store: Store, namespace: str, name: str, result: SharedResult) -> None:
    """`deleteService`: only a managed Service, not one being deleted (error), with uid and
    resourceVersion preconditions; NotFound ignored."""
    live = store.find(kinds.SERVICE, namespace, name)
    if live is None or not managed(live):
        return
    meta = live["metadata"]
    if meta.get("deletionTimestamp"):
        raise SharedServiceError(f"Service {name} is still terminating")
    options = writes.DeleteOptions(uid=meta["uid"], resource_version=meta["resourceVersion"])
    try:
        writes.delete(store, kinds.SERVICE, namespace=namespace, name=name, options=options)
    except (ApiError, StoreError) as err:
        if err.code == 404:
            return
        raise
    result.deleted.append(name)
