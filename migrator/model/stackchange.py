"""A stack change (ClusterPolicy ↔ GPUCluster) planned purely: snapshot and request in, steps out,
or a UsageError. The released operator refuses both CRs at once (read from their Error conditions,
NVIDIA/gpu-operator 9654928ac; `findings` is the verdict's check of it), so it is delete-then-
create (docs/runbook.md, "Changing stack"), the stable Services first kept from the garbage
collector; towards the GPUCluster they become the tool's aliases (`retarget`). Also where a CR
sets a DaemonSet's reserved label otherwise, which the operator's next re-render writes back over
phase 1's (`cr_overrides`: phase 1 warns, naming the CR field)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migrator.errors import UsageError
from migrator.model import objects as o
from migrator.model.findings import Finding
from migrator.model.phasestatus import PhaseStatus
from migrator.model.planning import PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component

STACKS = ("gpucluster", "clusterpolicy")
KEEP, DELETE, GONE, RETARGET, CREATE, SERVING, PHASES = (
    "keep-service", "delete-cr", "await-gone", "retarget", "create-cr", "await-serving",
    "run-phases")
# Server-set metadata a recorded CR body drops, so rollback can create it again.
SERVER_META = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
               "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "finalizers",
               "ownerReferences")
CHECK = "one-operator-cr"
STALLED = ("the GPU Operator stops reconciling every operand while both ClusterPolicy and "
           "GPUCluster exist")
REASONS = ("PrerequisiteNotMet", "ReconcileFailed")  # internal/conditions/consts.go
REFUSED_WORDS = ("may not exist at the same time", "cannot co-exist")


@dataclass(frozen=True)
class ChangePlan:
    source: str  # the stack running now ("none" once the old CR is gone)
    target: str
    new_cr: Mapping[str, Any]
    old_cr: Mapping[str, Any] | None
    steps: tuple[StackStep, ...]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class StackStep:
    """One step of the change; `id` is its key in the state."""

    action: str
    kind: str
    name: str
    detail: str = ""

    @property
    def id(self) -> str:
        return f"{self.action}/{self.kind}/{self.name}"


def source_of(target: str) -> str:
    """The stack a change to `target` leaves."""
    return "clusterpolicy" if target == "gpucluster" else "gpucluster"


def stable_names(catalog: Catalog) -> list[str]:
    """`nvidia-dcgm`, `nvidia-dcgm-exporter`: the Service names both stacks serve."""
    return sorted({c.alias for c in catalog.stack("gpucluster").components if c.alias})


def component_for(catalog: Catalog, stack: str, stable: str) -> Component:
    return next(c for c in catalog.stack(stack).components if (c.alias or c.service) == stable)


def clean_cr(cr: Mapping[str, Any]) -> dict[str, Any]:
    """A CR as it can be created again: no status, no server-set metadata."""
    meta = {k: v for k, v in o.meta(cr).items() if k not in SERVER_META}
    return {**{k: v for k, v in cr.items() if k not in ("status", "metadata")}, "metadata": meta}


def plan(snapshot: Snapshot, catalog: Catalog, target: str, new_cr: Mapping[str, Any],
         delete: str | None, *, flag: str = "--delete-cr") -> ChangePlan:
    """The steps from the cluster as it is to `target` running `new_cr`; a UsageError before any
    write for a wrong -f, a second CR the operator would refuse, a wrong `--delete-cr`."""
    if target not in STACKS:
        raise UsageError(f"--to {target!r} is not a stack.", f"pass one of: {', '.join(STACKS)}")
    want = catalog.stack(target).cr
    if new_cr.get("kind") != want.kind or new_cr.get("apiVersion") != want.api_version:
        raise UsageError(
            f"-f holds {new_cr.get('apiVersion')}/{new_cr.get('kind')}, not the "
            f"{want.api_version} {want.kind} that --to {target} creates.",
            f"pass the {want.kind} manifest you want the GPU Operator to run")
    if not o.meta(new_cr).get("name"):
        raise UsageError(f"the {want.kind} in -f has no metadata.name.", "give it a name")
    if target == "gpucluster" and not exporter_enabled(new_cr):
        raise UsageError(
            "The GPUCluster in -f runs no DCGM Exporter (it has no enabled spec.dcgmExporter), "
            "so nvidia-dcgm-exporter would lose every endpoint.",
            "add `dcgmExporter: {}` (or your exporter settings) under the GPUCluster's spec, "
            "as the operator's sample GPUCluster has")
    source = source_of(target)
    old_kind, new_kind = catalog.stack(source).cr.kind, want.kind
    olds, news = list(snapshot.crs(old_kind)), list(snapshot.crs(new_kind))
    new_name = o.name(new_cr)
    if len(olds) > 1:
        raise UsageError(f"{len(olds)} {old_kind}s exist ({', '.join(o.name(c) for c in olds)})"
                         "; the GPU Operator reconciles only the oldest.",
                         "delete the others by hand, then run change-stack again")
    other = [c for c in news if o.name(c) != new_name]
    if other:
        raise UsageError(f"{new_kind}/{o.name(other[0])} exists already; -f names "
                         f"{new_kind}/{new_name}.", "pass the manifest of the one that exists, "
                         "or delete it first")
    old = olds[0] if olds else None
    steps: list[StackStep] = []
    warnings: list[str] = []
    if old is not None:
        old_name = o.name(old)
        # Only a release seen reconciling both (each CR Ready, none refused) allows both.
        if news and any(refusal(cr) or not _ready(cr) for cr in [*olds, *news]):
            raise UsageError(
                f"{old_kind}/{old_name} and {new_kind}/{new_name} both exist: "
                f"{STALLED}.",
                f"delete {new_kind}/{new_name}, which the operator refused and which rendered "
                f"nothing (`kubectl delete {want.plural} {new_name}`), "
                f"then run change-stack again with {flag} {old_name}")
        if delete is not None and delete != old_name:
            raise UsageError(f"{flag} {delete} names no {old_kind}; {old_kind}/{old_name} "
                             "is the one that exists.", f"pass {flag} {old_name}")
        if delete is None:
            raise UsageError(
                f"Creating {new_kind}/{new_name} while {old_kind}/{old_name} exists would make "
                "the GPU Operator stop reconciling every operand: the released operator refuses "
                "a ClusterPolicy and a GPUCluster at once.",
                f"pass {flag} {old_name} to have change-stack delete {old_kind}/{old_name} first "
                "(the stable Services nvidia-dcgm and nvidia-dcgm-exporter are kept, with their "
                "ClusterIPs); see docs/runbook.md, 'Changing stack'")
        for name in stable_names(catalog):
            if snapshot.services.get(name) is None:
                warnings.append(f"Service/{name} does not exist now: there is no ClusterIP to "
                                "keep; it is created as the tool's alias by phase 2")
                continue
            steps.append(StackStep(KEEP, "Service", name,
                                   f"remove the ownerReference to {old_kind}/{old_name}, so "
                                   "garbage collection keeps it (clusterIP, ports, traffic "
                                   "policy unchanged)"))
        steps.append(StackStep(DELETE, old_kind, old_name,
                               "delete it (you asked for exactly that); the garbage collector "
                               "removes its DaemonSets and their pods"))
        steps.append(StackStep(GONE, old_kind, old_name, "wait until it is gone"))
    steps.append(StackStep(CREATE, new_kind, new_name,
                           "create it: its create event makes its controller reconcile at "
                           "once"))
    if target == "gpucluster":
        for name in stable_names(catalog):
            comp = component_for(catalog, target, name)
            live = snapshot.services.get(name)
            if live is not None and not retargeted(live, catalog, comp):
                steps.append(StackStep(RETARGET, "Service", name,
                                       f"once Service/{comp.service} is rendered, make it "
                                       f"the tool's alias of it, selecting "
                                       f"app={comp.app_label}"))
    steps.append(StackStep(SERVING, new_kind, new_name,
                           "wait until every node has a Ready DCGM and exporter endpoint "
                           "behind the stable names again (the per-node gap is measured)"))
    steps.append(StackStep(PHASES, new_kind, new_name,
                           "apply --phase 3 for the new stack: label its DaemonSets, the "
                           "aliases, the switch"))
    return ChangePlan(source if old is not None else "none", target, dict(new_cr),
                      clean_cr(old) if old is not None else None, tuple(steps),
                      tuple(warnings))


def undoing(record: Mapping[str, Any] | None) -> bool:
    """An undo (`change-stack --rollback`, its start recorded as `rollback`) begun and not
    ended. The steps it undid are still recorded done, so only the undo may go on."""
    return bool((record or {}).get("rollback")) and (
        (record or {}).get("status") != PhaseStatus.ROLLED_BACK.value)


def unfinished(record: Mapping[str, Any] | None) -> bool:
    """A change (or its undo) recorded as begun and not ended: running now, or stopped
    (killed, a gate, a timeout). Only `change-stack` goes on with it."""
    return (record or {}).get("status") == PhaseStatus.IN_PROGRESS.value or undoing(record)


def recorded_cr(record: Mapping[str, Any] | None, target: str) -> dict[str, Any]:
    """The new CR an unfinished change to `target` recorded, so that resuming it needs no -f
    (the manifest may be on another machine); a UsageError when there is none."""
    if not unfinished(record) or (record or {}).get("to") != target:
        raise UsageError("change-stack needs the new CR's manifest.", "pass -f <cr.yaml>")
    return dict((record or {})["newCr"])


def resume_command(record: Mapping[str, Any], namespace: str) -> str:
    """The command that goes on with an unfinished change (or its undo), from its record."""
    if undoing(record):
        return undo_command(namespace)
    old = (record.get("oldCr") or {}).get("metadata", {}).get("name")
    return " ".join(["dcgm-migrate change-stack --to", str(record.get("to")),
                     *(["--delete-cr", str(old)] if old else []), "-n", namespace])


def undo_command(namespace: str) -> str:
    """The command that undoes an unfinished (or completed) change."""
    return f"dcgm-migrate change-stack --rollback -n {namespace}"


# What a change waits for: a step whose intent is its newest record, by that record.
_WRITING = {KEEP: "{kind}/{name} kept from the garbage collector",
            DELETE: "the delete of {kind}/{name}",
            CREATE: "the create of {kind}/{name}",
            RETARGET: "{kind}/{name} made the alias of the GPUCluster's Service"}
# ... and after a step recorded done, the next, named by the old CR (`oldCr`) or the new one.
_SERVED = "every node served again by the stable names (the new stack's pods Ready)"
_NEXT = {KEEP: ("oldCr", "the delete of {kind}/{name}"),
         DELETE: ("oldCr", "{kind}/{name} gone: its DaemonSets and pods removed"),
         GONE: ("newCr", "the create of {kind}/{name}"),
         CREATE: ("newCr", _SERVED),
         RETARGET: ("newCr", _SERVED),
         SERVING: ("newCr", "the new stack's phases (apply --phase 3)")}


def waits_for(record: Mapping[str, Any]) -> str:
    """What a running change waits for, from its newest step record (steps run in `plan`'s
    order, each recorded before its write and done after)."""
    if undoing(record):
        return f"the undo of the change to the {record.get('to')} stack"
    steps = list((record.get("steps") or {}).values())
    if not steps and record.get("oldCr"):
        return "the stable Services kept from the garbage collector"
    last = steps[-1] if steps else {"action": GONE, "status": "done"}  # none yet: the create
    if last.get("status") != "done":
        return _WRITING[last["action"]].format(kind=last["kind"], name=last["name"])
    if last["action"] == CREATE and record.get("to") == "gpucluster":
        return "the stable Services made the aliases of the Services the GPUCluster renders"
    which, text = _NEXT.get(last["action"], _NEXT[SERVING])
    cr = record.get(which) or {}
    return text.format(kind=cr.get("kind"), name=(cr.get("metadata") or {}).get("name"))


def exporter_enabled(gpucluster: Mapping[str, Any]) -> bool:
    """The GPUCluster renders DCGM Exporter: its state runs only for a `dcgmExporter` section
    that is not disabled (GPU Operator internal/state/dcgm_exporter.go, `isEnabled`:
    `cr.Spec.DCGMExporter != nil && cr.Spec.DCGMExporter.IsEnabled()`)."""
    section = (gpucluster.get("spec") or {}).get("dcgmExporter")
    return isinstance(section, Mapping) and section.get("enabled") is not False


def _ready(cr: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (cr.get("status") or {}).get("conditions") or [])


def selector_patch(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, Any]:
    """A merge patch's selector: `wanted`, with every other key of `current` removed."""
    return {**{k: None for k in current if k not in wanted}, **wanted}


def kept(svc: Mapping[str, Any], old_kind: str) -> bool:
    """The Service holds no ownerReference to a CR of `old_kind`."""
    return not any(r.get("kind") == old_kind for r in o.meta(svc).get("ownerReferences") or [])


def retargeted(svc: Mapping[str, Any], catalog: Catalog, comp: Component) -> bool:
    """The Service is the tool's alias of `comp`'s Service already (phase 3 owns its selector)."""
    common = catalog.common
    return (common.tool_owned(svc)
            and o.annotations_of(svc).get(common.alias_of_annotation) == comp.service
            and any(r.get("kind") == "GPUCluster"
                    for r in o.meta(svc).get("ownerReferences") or []))


def refusal(cr: Mapping[str, Any]) -> str | None:
    """The operator's refusal of the other CR, as written in this CR's Error condition."""
    for cond in (cr.get("status") or {}).get("conditions") or []:
        if (cond.get("type") == "Error" and cond.get("status") == "True"
                and cond.get("reason") in REASONS
                and any(w in str(cond.get("message") or "") for w in REFUSED_WORDS)):
            return f"{cond.get('reason')}: {cond.get('message')}"
    return None


def findings(snapshot: Snapshot) -> list[Finding]:
    """Red when a ClusterPolicy and a GPUCluster both exist and the operator refuses the pair
    (nothing when only one kind exists, or the release reconciles both)."""
    if not snapshot.cluster_policies or not snapshot.gpu_clusters:
        return []
    crs = [("ClusterPolicy", c) for c in snapshot.cluster_policies] + [
        ("GPUCluster", c) for c in snapshot.gpu_clusters]
    said = [f"{kind}/{o.name(cr)}: {r}" for kind, cr in crs if (r := refusal(cr))]
    if not said:
        return []
    kind, newest = max(crs, key=lambda kc: (o.meta(kc[1]).get("creationTimestamp") or "", kc[0]))
    names = ", ".join(f"{k}/{o.name(c)}" for k, c in crs)
    older = next(c for k, c in crs if k != kind)
    plural, target = (("gpuclusters", "gpucluster") if kind == "GPUCluster"
                      else ("clusterpolicies", "clusterpolicy"))
    fix = (f"delete {kind}/{o.name(newest)}, created last, which the operator refused "
           f"(`kubectl delete {plural} {o.name(newest)}`); to change stack to it instead, "
           f"delete it all the same, then run change-stack --to {target} with its manifest and "
           f"--delete-cr {o.name(older)} (docs/runbook.md, 'Changing stack')")
    return [Finding(CHECK, f"{kind}/{o.name(newest)}", False,
                    f"{STALLED}: {names} ({'; '.join(said)})", fix)]


def cr_overrides(ctx: PlanContext, comp: Component,
                 ds: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(CR field path, value) where the owning CR sets the reserved label otherwise: its
    `spec.daemonsets.labels`, which the operator renders onto every operand's pod template
    (the per-component sections have no labels field: the CRD would prune one)."""
    kind, _, name = (ctx.operator_owner(ds) or "").partition("/")
    cr = next((cr for cr in ctx.snapshot.crs(kind) if name and o.name(cr) == name), None)
    if cr is None:
        return []
    key, want = comp.common_label.key, comp.common_label.value
    labels = o.dig(cr, "spec", "daemonsets", "labels")
    if not isinstance(labels, Mapping) or key not in labels or str(labels[key]) == want:
        return []
    return [(f"{cr.get('kind')}/{o.name(cr)} spec.daemonsets.labels[{key!r}]", str(labels[key]))]
