"""Phase 2 — alias: the established DNS names (`nvidia-dcgm`, `nvidia-dcgm-exporter`) for the
GPUCluster/DRA stack, as tool-owned Services that select the DRA app label at first. The legacy
stack gets nothing. A Service of an alias name that the tool does not own is never touched."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from migrator.model import gates as g
from migrator.model import monitoring
from migrator.model import objects as o
from migrator.model.discovery import collected
from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan, PlanContext
from migrator.model.stacks import Component
from migrator.model.steps import CreateAlias, DeleteAlias, Step

NUMBER = 2
NAME = "alias"

# Every core/v1 ServiceSpec field, and what an alias does with it (the table-driven test in
# tests/planning/test_alias_fields.py holds this list against the API's field list).
# Copied: the source's configuration, so the alias is reachable exactly as the source is (a
# LoadBalancer alias keeps its class, source ranges and node-port allocation; dropping them would
# publish an internal Service). Never copied: what the API server assigns (clusterIP(s),
# healthCheckNodePort, each port's nodePort) and what only one Service may hold (externalIPs,
# the requested loadBalancerIP: a second claimant conflicts with the source). Replaced: the
# selector (the DRA app label). externalName: an alias selects pods, so never an ExternalName.
COPIED_SPEC_FIELDS = ("type", "internalTrafficPolicy", "externalTrafficPolicy", "sessionAffinity",
                      "sessionAffinityConfig", "ipFamilyPolicy", "ipFamilies",
                      "publishNotReadyAddresses", "allocateLoadBalancerNodePorts",
                      "loadBalancerClass", "loadBalancerSourceRanges", "trafficDistribution")
NEVER_COPIED_SPEC_FIELDS = ("clusterIP", "clusterIPs", "healthCheckNodePort", "externalIPs",
                            "loadBalancerIP", "externalName")
COPIED_PORT_FIELDS = ("name", "port", "targetPort", "protocol", "appProtocol")

# Source annotations an alias does not copy: the scrape annotation (SPEC §4: the source keeps
# the one annotation-discovery path the operator renders; a copy would scrape every exporter pod
# twice), the tool's own markers, and other tools' bookkeeping that would make them treat the
# alias as theirs (kubectl apply's base, Helm release ownership, Argo CD tracking, the operator's
# hashes).
SCRAPE_ANNOTATION = "prometheus.io/scrape"
NOT_COPIED_ANNOTATION_PREFIXES = ("dcgm-migrate/", "kubectl.kubernetes.io/last-applied-",
                                  "meta.helm.sh/", "argocd.argoproj.io/", "nvidia.com/")


def copied_annotations(source: Mapping[str, Any]) -> dict[str, str]:
    """The source's annotations an alias carries too (e.g. a cloud's internal-load-balancer
    annotation, without which the alias's load balancer would be public)."""
    return {k: v for k, v in o.annotations_of(source).items()
            if k != SCRAPE_ANNOTATION and not k.startswith(NOT_COPIED_ANNOTATION_PREFIXES)}


def alias_body(ctx: PlanContext, comp: Component, source: Mapping[str, Any],
               owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The alias Service: the source's supported configuration, the DRA app selector, marked
    as the tool's, with a non-controller ownerReference to the GPUCluster."""
    assert comp.alias
    common = ctx.catalog.common
    src_spec = source.get("spec") or {}
    spec: dict[str, Any] = {k: copy.deepcopy(src_spec[k]) for k in COPIED_SPEC_FIELDS
                            if k in src_spec}
    spec["ports"] = [{k: p[k] for k in COPIED_PORT_FIELDS if k in p}
                     for p in src_spec.get("ports") or []]
    spec["selector"] = comp.app_selector
    if comp.local_traffic:
        spec["internalTrafficPolicy"] = "Local"
    meta: dict[str, Any] = {
        "name": comp.alias,
        "namespace": ctx.snapshot.namespace,
        "labels": {common.managed_by.key: common.managed_by.value,
                   "app.kubernetes.io/name": comp.alias},
        "annotations": {**copied_annotations(source), common.alias_of_annotation: comp.service},
    }
    if owner is not None:
        meta["ownerReferences"] = [{
            "apiVersion": str(owner.get("apiVersion", "nvidia.com/v1alpha1")),
            "kind": str(owner.get("kind", "GPUCluster")),
            "name": o.name(owner),
            "uid": str(o.meta(owner).get("uid", "")),
            "controller": False,
            "blockOwnerDeletion": False,
        }]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def _candidates(ctx: PlanContext) -> list[Component]:
    return [c for c in ctx.components if c.alias and c.daemonset in ctx.snapshot.daemonsets]


def _exporter_daemonsets(ctx: PlanContext) -> list[str]:
    return [c.daemonset for c in ctx.components if c.exporter]


def _taken_by(ctx: PlanContext, alias: str, source: str) -> str | None:
    """Why an existing Service of the alias name must not be touched, or None if it is ours."""
    live = ctx.service(alias)
    if live is None:
        return None
    ann = o.annotations_of(live).get(ctx.catalog.common.alias_of_annotation)
    if ctx.is_tool_owned(live) and ann == source:
        return None
    owner = ctx.operator_owner(live) or "no dcgm-migrate marker"
    return (f"Service/{alias} already exists and is not the tool's ({owner}); it is never "
            "overwritten or adopted — with ClusterPolicy and GPUCluster coexisting, shared "
            "ownership of the stable names belongs to the operator")


def _leaving(ctx: PlanContext, live: Mapping[str, Any]) -> str | None:
    """Why a Service holding an alias name is about to go away by itself (its operator CR was
    deleted: the moment of a ClusterPolicy → GPUCluster change), or None if it stays."""
    owner = collected(ctx.snapshot, live)
    if owner is None:
        return None
    return (f"Service/{o.name(live)} belongs to {owner}, which is deleted: garbage collection "
            "removes it, and the alias is created as soon as it is gone")


def _name_gate(ctx: PlanContext, alias: str, source: str) -> GateResult:
    """alias-name-free: free, already the tool's, or about to be freed (the runner waits)."""
    name = f"alias-name-free/{alias}"
    taken = _taken_by(ctx, alias, source)
    live = ctx.service(alias)
    leaving = _leaving(ctx, live) if taken and live is not None else None
    if leaving:
        return GateResult(name, False, leaving, wait=True)
    return GateResult(name, taken is None, taken or "free or already the tool's")


def _still_terminating(ctx: PlanContext, alias: str) -> str | None:
    """Why the alias cannot be created (again) now: the old one is Terminating."""
    why = o.terminating(ctx.service(alias))
    if why is None:
        return None
    ns = ctx.snapshot.namespace
    return (f"Service/{alias} is being deleted ({why}); it cannot be created again until it is "
            f"gone: wait for its finalizers, or remove them if nothing needs them (kubectl -n "
            f"{ns} patch service {alias} --type=merge -p "
            "'{\"metadata\":{\"finalizers\":null}}'), then run again")


def plan(ctx: PlanContext) -> PhasePlan:
    steps: list[Step] = []
    gates: list[GateResult] = []
    notes: list[str] = []
    blocked = None
    checks: list[Step] = []
    owner = ctx.snapshot.gpu_clusters[0] if ctx.snapshot.gpu_clusters else None
    comps = _candidates(ctx)
    if not comps:
        notes.append("no GPUCluster (DRA) components: the legacy stack keeps its names and "
                     "gets no aliases; phase 2 completes with no writes")
    what_if = ctx.snapshot
    for comp in comps:
        assert comp.alias
        source = ctx.service(comp.service)
        if source is None:
            notes.append(f"Service/{comp.service} does not exist: no alias {comp.alias}")
            continue
        free = _name_gate(ctx, comp.alias, comp.service)
        freeing = free.wait  # garbage collection frees it: the runner waits before writing
        if freeing:
            notes.append(free.detail)
            free = GateResult(free.name, True, free.detail)
        gates.append(free)
        if not free.ok:
            blocked = blocked or free.detail
            continue
        leaving = None if freeing else _still_terminating(ctx, comp.alias)
        if leaving:
            gates.append(GateResult(f"alias-not-terminating/{comp.alias}", False, leaving))
            blocked = blocked or leaving
            continue
        step = CreateAlias(comp.alias, comp.service, alias_body(ctx, comp, source, owner))
        if step.satisfied(ctx.service(comp.alias)):
            notes.append(f"Service/{comp.alias} already exists as the tool's alias")
            checks.append(step)
            continue
        steps.append(step)
        what_if = monitoring.with_service(what_if, step.body)
    if steps:
        gates.append(monitoring.duplicate_gate(what_if, _exporter_daemonsets(ctx),
                                               before=ctx.snapshot))
    guarded = [g.baseline(ctx.snapshot, c.service, c.local_traffic) for c in comps
               if ctx.service(c.service)]
    return PhasePlan(number=NUMBER, name=NAME, steps=tuple(steps), gates=tuple(gates),
                     notes=tuple(notes), blocked=blocked, guarded=tuple(guarded),
                     checks=tuple(checks))


def before_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    if isinstance(step, CreateAlias):
        out = [_name_gate(ctx, step.service, step.source)]
        leaving = None if out[0].wait else _still_terminating(ctx, step.service)
        if leaving:
            out.append(GateResult(f"alias-not-terminating/{step.service}", False, leaving))
        what_if = monitoring.with_service(ctx.snapshot, step.body)
        out.append(monitoring.duplicate_gate(what_if, _exporter_daemonsets(ctx),
                                             before=ctx.snapshot))
        return out
    if isinstance(step, DeleteAlias):
        live = ctx.service(step.service)
        if live is not None and _taken_by(ctx, step.service, step.source):
            return [GateResult(f"alias-still-ours/{step.service}", False,
                               f"Service/{step.service} is no longer the tool's; not deleting")]
    return []


def after_write(ctx: PlanContext, step: Step) -> list[GateResult]:
    """The alias's EndpointSlices hold exactly the source's ready pods."""
    if not isinstance(step, CreateAlias):
        return []
    source_pods = ctx.snapshot.endpoints_of(step.source).ready_pods()
    return [g.endpoints_are(ctx.snapshot, step.service, source_pods)]


def verify(ctx: PlanContext, steps: Sequence[Step]) -> list[GateResult]:
    out = []
    for step in steps:
        if not isinstance(step, CreateAlias):
            continue
        name = f"alias-holds/{step.service}"
        live = ctx.service(step.service)
        if live is None:
            out.append(GateResult(name, False, f"Service/{step.service} was deleted (by hand, or "
                                  "by garbage collection after its GPUCluster was deleted)"))
        elif _taken_by(ctx, step.service, step.source):
            out.append(GateResult(name, False, f"Service/{step.service} was replaced by an "
                                  "object that is not the tool's"))
        elif o.terminating(live):
            out.append(GateResult(name, False, f"Service/{step.service} is being deleted "
                                  f"({o.terminating(live)})"))
        else:
            want = step.body["spec"]
            spec = live.get("spec") or {}
            wrong = [k for k in ("ports", *COPIED_SPEC_FIELDS)
                     if k in want and _ports(spec.get(k)) != _ports(want[k])]
            ann = o.annotations_of(live)
            wrong += [f"annotation {k}" for k, v in o.annotations_of(step.body).items()
                      if ann.get(k) != v]
            out.append(GateResult(name, not wrong, f"differs from the source in {', '.join(wrong)}"
                                  if wrong else f"alias of {step.source}"))
    return out + stable_names(ctx)


def stable_names(ctx: PlanContext) -> list[GateResult]:
    """Every stable name the stack running *now* needs (its alias, or for the legacy stack its
    own Service) exists and selects ready pods, whatever the state recorded: after a stack
    change the recorded steps describe the old stack, not what consumers resolve today."""
    out = []
    seen = set()
    for comp in ctx.components:
        stable = comp.alias or comp.service
        if stable in seen or ctx.service(comp.service) is None:
            continue  # no source Service: nothing to alias (plan notes it), nothing to check
        seen.add(stable)
        label = comp.common_label.key
        result = g.serves(ctx.snapshot, stable, ctx.daemonsets_with_label(label),
                          gate="stable-name")
        live = ctx.service(stable)
        leaving = _leaving(ctx, live) if live is not None else None
        if leaving and comp.alias:
            result = GateResult(result.name, False, f"{leaving}; `apply --phase 2` waits for "
                                "that and creates it")
        elif live is None and comp.alias:
            result = GateResult(result.name, False, f"Service/{stable} does not exist: the "
                                f"{comp.stack} stack needs it as the alias of {comp.service} "
                                "(a stack change?); `apply --phase 2` creates it")
        out.append(result)
    return out


def _ports(value: Any) -> Any:
    if isinstance(value, list):
        return [{k: p.get(k) for k in COPIED_PORT_FIELDS if k in p} for p in value]
    return value


def rollback(ctx: PlanContext, steps: Sequence[Step]) -> PhasePlan:
    inverse: list[Step] = []
    warnings = []
    notes = []
    for step in reversed(steps):
        if isinstance(step, CreateAlias):
            live = ctx.service(step.service)
            if live is None:
                continue
            if _taken_by(ctx, step.service, step.source):
                owner = ctx.operator_owner(live) or "without the dcgm-migrate marker"
                warnings.append(f"Service/{step.service} is no longer the tool's alias (now "
                                f"{owner}); left in place, skipped")
                continue
            if o.terminating(live):
                notes.append(f"Service/{step.service} is already being deleted "
                             f"({o.terminating(live)}); it goes once those finalizers are "
                             "removed")
                continue
            inverse.append(step.inverse())
    return PhasePlan(number=NUMBER, name=NAME, steps=tuple(inverse), warnings=tuple(warnings),
                     notes=tuple(notes))
