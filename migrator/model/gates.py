"""The gates (docs/design.md, "Gates") as pure functions over a Snapshot or a DaemonSet: each
a GateResult whose one-line detail names what is wrong, and whose kind the loop acts on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from migrator.model import objects as o
from migrator.model.selectors import for_service
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.wording import counted

Obj = dict[str, Any]
MAX_NAMED = 5


class GateKind(Enum):
    """What a gate is, where engine/afterwrite's wait or engine/loop's hint treats it apart."""

    CHECK = "check"  # any other gate: waited for until it passes, within --timeout
    ENDPOINTS = "endpoints"  # lost by the write just made: stop, undo a selector change
    ENDPOINTS_DIP = "endpoints-dip"  # a loss a selector switch did not cause: waited out, noted
    NODES_REPORTING = "nodes-reporting"  # a node stopped reporting: waiting cannot heal it
    CHANGED_MEANWHILE = "changed-meanwhile"  # `selector-unchanged/<svc>`: moved by someone else


@dataclass(frozen=True)
class GateResult:
    name: str
    ok: bool
    detail: str = ""
    # A failure that heals by itself (garbage collection is about to remove an object): the
    # run waits for it within --timeout. Neither this nor `kind` is part of the report.
    wait: bool = False
    kind: GateKind = GateKind.CHECK

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def failed(results: Iterable[GateResult]) -> list[GateResult]:
    return [r for r in results if not r.ok]


def describe(results: Iterable[GateResult]) -> str:
    """The failed gates as one line: `name: detail; ...`."""
    return "; ".join(f"{r.name}: {r.detail}" for r in failed(results))


def named(items: Iterable[str]) -> str:
    """The first few of `items`, sorted, and how many more."""
    items = sorted(set(items))
    shown = ", ".join(items[:MAX_NAMED])
    return shown + (f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else "")


def rollout_counts(ds: Obj) -> tuple[int, int, int]:
    st = ds.get("status") or {}
    return (int(st.get("updatedNumberScheduled") or 0), int(st.get("numberAvailable") or 0),
            int(st.get("desiredNumberScheduled") or 0))


def rollout_complete(ds: Obj) -> GateResult:
    """`kubectl rollout status` for a DaemonSet; zero desired is complete."""
    name = f"rollout-complete/{o.name(ds)}"
    if not o.observed(ds):
        return GateResult(name, False, "controller has not observed generation "
                          f"{o.meta(ds).get('generation')} yet")
    updated, available, desired = rollout_counts(ds)
    return GateResult(name, updated == desired == available,
                      f"updated {updated}/{desired}, available {available}/{desired}")


def not_ready_where(pods: Iterable[PodView]) -> list[str]:
    """The nodes with a pod that is not Ready, each with why ("node-2 (Pending: …)")."""
    why: dict[str, set[str]] = {}
    for p in pods:
        if not p.ready:
            why.setdefault(p.node or "(unscheduled)", set()).add(p.why or "not Ready")
    return [f"{node} ({', '.join(sorted(reasons))})" for node, reasons in sorted(why.items())]


def daemonset_healthy(snapshot: Snapshot, ds: Obj) -> GateResult:
    """Rollout complete now, naming the nodes whose pods are not Ready when it is not."""
    result = rollout_complete(ds)
    if result.ok:
        return result
    nodes = not_ready_where(snapshot.pods_of(o.name(ds)))
    detail = result.detail + (f"; pods not ready on nodes {named(nodes)}" if nodes else "")
    return GateResult(result.name, False, detail)


def pods_carry(snapshot: Snapshot, daemonset: str, labels: Mapping[str, str | None],
               gate: str = "pods-labelled") -> GateResult:
    """Every live pod of the DaemonSet has these labels (None: lacks the key)."""
    pods = [p for p in snapshot.pods_of(daemonset) if not p.deleting]
    off = [p for p in pods if any(p.labels.get(k) != v for k, v in labels.items())]
    name = f"{gate}/{daemonset}"
    if not off:
        return GateResult(name, True, counted(len(pods), "pod"))
    return GateResult(name, False, f"{len(off)} of {counted(len(pods), 'pod')} lack it: "
                      f"{named(p.name for p in off)} on nodes {named(p.node for p in off)}")


@dataclass(frozen=True)
class ServiceBaseline:
    service: str
    total: int
    by_node: Mapping[str, int] = field(default_factory=dict)
    local: bool = False

    def as_dict(self) -> dict[str, Any]:
        """As the state keeps it: per-node counts only for Local (elsewhere they only excuse a
        node deleted during the run that took them; at 5,000 nodes they would add about
        110 kB to every save of the state)."""
        return {**asdict(self), "by_node": dict(self.by_node) if self.local else {}}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> ServiceBaseline:
        return ServiceBaseline(str(d["service"]), int(d["total"]), dict(d.get("by_node") or {}),
                               bool(d.get("local")))


def baseline(snapshot: Snapshot, service: str, local: bool) -> ServiceBaseline:
    """The Service's Ready endpoints now, per node too: held per node for Local, else in total,
    where the per-node counts only say what a node deleted since took along (`as_dict`)."""
    eps = snapshot.endpoints_of(service)
    return ServiceBaseline(service, eps.ready_total, eps.ready_by_node(), local)


def endpoints_hold(snapshot: Snapshot, base: ServiceBaseline, tolerance: int = 0) -> GateResult:
    """Ready endpoints not below the baseline (per node for Local), `tolerance` nodes/endpoints
    missing allowed (phase 1: the DaemonSet's maxUnavailable). Once the Nodes were read, the
    nodes deleted since the baseline are left aside, with what they had: no run can keep those
    endpoints (`endpoints_are`)."""
    name = f"endpoints/{base.service}"
    eps = snapshot.endpoints_of(base.service)
    now = eps.ready_by_node()
    gone = sorted(n for n in base.by_node if snapshot.nodes is not None
                  and n not in snapshot.nodes)
    detail = f"{eps.ready_total}/{base.total} ready"
    missing = base.total - eps.ready_total - sum(base.by_node[n] - now.get(n, 0) for n in gone)
    if base.local:
        short = [n for n, c in base.by_node.items() if now.get(n, 0) < c and n not in gone]
        detail += ", per node" + (f"; below baseline on {named(short)}" if short else "")
        missing = len(short)
    if gone:
        detail += f"; deleted since, left aside: {named(gone)}"
    return GateResult(name, missing <= tolerance, detail, kind=GateKind.ENDPOINTS)


def endpoints_are(snapshot: Snapshot, service: str, pods: frozenset[str]) -> GateResult:
    """The Service's ready endpoints are exactly these pods (EndpointSlices caught up), but for
    pods on a deleted node, in or out: the EndpointSlice controller leaves them out at the
    Service's next sync, and keeps them until their own next event (pkg/controller/endpointslice
    `reconcileByAddressType` skips a pod whose Node it cannot get)."""
    listed = snapshot.endpoints_of(service).ready_pods()
    ghosts = snapshot.on_deleted_nodes() & (listed | pods)  # this Service's
    have, pods = listed - ghosts, pods - ghosts
    name = f"endpointslices/{service}"
    if have == pods:
        aside = f", {counted(len(ghosts), 'pod')} on deleted nodes left aside" if ghosts else ""
        return GateResult(name, True, f"{len(have)} ready endpoints{aside}")
    nodes = {p.name: p.node for p in snapshot.pods if p.node}
    parts = [f"{word} {named(f'{n} on {nodes[n]}' if n in nodes else n for n in names)}"
             for word, names in (("missing", pods - have), ("unexpected", have - pods)) if names]
    return GateResult(name, False, "; ".join(parts))


def _ready(snapshot: Snapshot, selector: Mapping[str, str]) -> list[PodView]:
    return [p for p in snapshot.pods_matching(selector) if p.ready]


def _dropped(old_ready: list[PodView], new_ready: list[PodView], local: bool) -> list[PodView]:
    """The Ready pods the old selector selects and the new one does not (Local: only on nodes
    where the new one has fewer Ready pods)."""
    names = {p.name for p in new_ready}
    dropped = [p for p in old_ready if p.name not in names]
    if local and dropped:
        before, after = Counter(p.node for p in old_ready), Counter(p.node for p in new_ready)
        dropped = [p for p in dropped if after[p.node] < before[p.node]]
    return dropped


def selector_superset(snapshot: Snapshot, service: str, old: Mapping[str, str],
                      new: Mapping[str, str], local: bool,
                      owned_by: Iterable[str]) -> tuple[GateResult, list[str]]:
    """New selector's Ready pods ⊇ old selector's (per node for Local). Also returns the pods
    outside the given DaemonSets that the new selector would pick up (a warning, not a veto)."""
    name = f"selector-superset/{service}"
    old_ready, new_ready = _ready(snapshot, old), _ready(snapshot, new)
    dropped = _dropped(old_ready, new_ready, local)
    detail = f"new {len(new_ready)} ⊇ old {len(old_ready)} ready pods" + (
        ", per node" if local else "")
    why = (f"nodes that would lose their local endpoint: {named(p.node for p in dropped)}"
           if local else f"pods the new selector would drop: {named(p.name for p in dropped)}")
    gate = GateResult(name, not dropped, why if dropped else detail)
    return gate, pods_outside(snapshot, new, owned_by)


def pods_outside(snapshot: Snapshot, selector: Mapping[str, str],
                 owned_by: Iterable[str]) -> list[str]:
    """Pods this selector matches that none of these DaemonSets owns."""
    owners = set(owned_by)
    return sorted(p.name for p in snapshot.pods_matching(selector)
                  if p.daemonset not in owners)


def foreign_pods(service: str, strays: list[str], owned_by: Iterable[str], allowed: bool,
                 gate: str = "no-foreign-pods", leaving: Mapping[str, str] | None = None
                 ) -> GateResult:
    """Refuse a selector that picks up pods outside the DaemonSets (they would become endpoints
    of the stable name) unless `--allow-foreign-pods`. `leaving`: strays garbage collection is
    removing (pod → why); when only those remain, the gate fails with `wait`."""
    name, leaving = f"{gate}/{service}", leaving or {}
    if not strays:
        return GateResult(name, True, "selects only pods of the DaemonSets")
    staying = [p for p in strays if p not in leaving]
    what = (f"{counted(len(strays), 'pod')} outside DaemonSets {named(owned_by)}: "
            f"{named(strays)}")
    if allowed:
        return GateResult(name, True, f"{what} (allowed by --allow-foreign-pods)")
    if not staying:
        why = sorted({leaving[p] for p in strays})
        return GateResult(name, False, f"{counted(len(strays), 'pod')} that garbage collection is "
                          f"removing ({'; '.join(why)}): {named(strays)}; the switch waits "
                          "until they are gone", wait=True)
    return GateResult(name, False, "the common selector would also select "
                      f"{counted(len(staying), 'pod')} outside DaemonSets {named(owned_by)}: "
                      f"{named(staying)}; remove the common label from them, or rerun with "
                      "--allow-foreign-pods if they belong behind this Service")


def services_selecting(snapshot: Snapshot, label_key: str) -> list[str]:
    """Services whose selector uses this label key (rollback of labels waits for none)."""
    return sorted(n for n, s in snapshot.services.items()
                  if label_key in (o.dig(s, "spec", "selector") or {}))


def serves(snapshot: Snapshot, service: str, daemonsets: Iterable[str], *,
           gate: str) -> GateResult:
    """The Service exists and selects ready pods, or none is expected (zero desired pods)."""
    name = f"{gate}/{service}"
    svc = snapshot.services.get(service)
    if svc is None:
        return GateResult(name, False, f"Service/{service} does not exist")
    ready = snapshot.endpoints_of(service).ready_total
    if ready:
        return GateResult(name, True, f"{ready} ready endpoints")
    present = [d for d in daemonsets if d in snapshot.daemonsets]
    desired = sum(rollout_counts(snapshot.daemonsets[d])[2] for d in present)
    selects = for_service(o.dig(svc, "spec", "selector")).matches
    matching = [p for p in snapshot.pods if p.ready and not p.deleting and selects(p.labels)]
    if desired == 0 and not matching:
        return GateResult(name, True, f"0 desired pods (no node is labelled for "
                          f"{named(present) or 'its DaemonSets'}): no endpoints is the steady "
                          "state")
    return GateResult(name, False, f"0 ready endpoints while {desired} pods are desired and "
                      f"{len(matching)} ready pods match its selector")


def lost_nodes(pods: Iterable[PodView]) -> list[str]:
    """Nodes whose pods the node lifecycle controller marked not Ready (stopped reporting)."""
    return sorted({p.node for p in pods if p.node_lost and p.node})


def node_trouble(node: Obj | None) -> str:
    """Why a Node is not healthy, from its Ready condition ("" when Ready or unknown to us)."""
    for cond in o.dig(node or {}, "status", "conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            why = cond.get("message") or cond.get("reason") or ""
            return f"Ready={cond.get('status')}" + (f" ({why})" if why else "")
    return ""


def nodes_reporting(daemonset: str, pods: Iterable[PodView],
                    nodes: Mapping[str, Obj | None] | None = None) -> GateResult:
    """Every node running the DaemonSet's pods still reports (a rollout cannot pass one that
    stopped); `nodes` adds each node's Ready condition to the detail."""
    name = f"nodes-reporting/{daemonset}"
    lost = lost_nodes(pods)
    if not lost:
        return GateResult(name, True, "every node reports", kind=GateKind.NODES_REPORTING)
    notes = named(f"{n} {node_trouble((nodes or {}).get(n))}".strip() for n in lost)
    return GateResult(name, False, f"node{'s' if len(lost) > 1 else ''} not reporting "
                      f"(its pods were marked not Ready by the node controller): {notes}",
                      kind=GateKind.NODES_REPORTING)


def switch_loss(snapshot: Snapshot, base: ServiceBaseline, old: Mapping[str, str],
                new: Mapping[str, str]) -> GateResult:
    """The zero-tolerance endpoints gate after a selector switch, the loss attributed: to it
    (`endpoints/<svc>`: restore the old selector at once) when it drops Ready pods, else
    (`endpoints-dip/<svc>`: wait, never restore) to pods both select or to slices lagging."""
    old_pods, new_pods = snapshot.pods_matching(old), snapshot.pods_matching(new)
    dropped = _dropped([p for p in old_pods if p.ready], [p for p in new_pods if p.ready],
                       base.local)
    if dropped:
        return GateResult(f"endpoints/{base.service}", False,
                          "the new selector drops Ready pods the old one selected: "
                          f"{named(p.name for p in dropped)} on nodes "
                          f"{named(p.node for p in dropped)}", kind=GateKind.ENDPOINTS)
    held = endpoints_hold(snapshot, base)
    if held.ok:
        return held
    unready = {p.name for p in new_pods if not p.ready} & {p.name for p in old_pods}
    cause = (f"pods both selectors select are not Ready: {named(unready)}" if unready
             else "the EndpointSlices have not caught up yet")
    return GateResult(f"endpoints-dip/{base.service}", False,
                      f"{held.detail}; not caused by the selector switch: {cause}",
                      kind=GateKind.ENDPOINTS_DIP)
