"""The verdict: does the stable identity work for its consumers now? Pure: a Snapshot in, a
Verdict out (docs/design.md, "The verdict"). Each finding names the fix and the phase whose
`apply` makes it right (0: none), from the phases' `ANSWERS_FOR`: no phase number is written
here. State enters only the fixes' wording and `--allow-foreign-pods`."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from migrator.model import gates as g
from migrator.model import halfrolls, labelmarks, monitoring, scrapechecks, stackchange
from migrator.model import objects as o
from migrator.model.discovery import collected, discover
from migrator.model.findings import Answers, Finding, Fixes, Need, Remedy, Verdict, alive, named
from migrator.model.selectors import for_service
from migrator.model.snapshot import PodView, Snapshot
from migrator.model.stacks import Catalog, Component
from migrator.model.traffic import foreign_endpoints, lease_live, ports_served, shared_findings
from migrator.model.wording import counted

DRA_STACK = "gpucluster"
__all__ = ["Answers", "Finding", "Remedy", "Verdict", "lease_live", "tool_marks", "verdict"]


def _needs(snapshot: Snapshot, catalog: Catalog, present: Sequence[Component]) -> list[Need]:
    """The names the running stacks need: per component kind the stable name, reaching that
    kind's pods of every stack; and each `-dra` name, unless the release managing the stable
    name deletes it (`plans/releases.yaml`)."""
    out: list[Need] = []
    for kind in sorted({c.component for c in present}):
        comps = tuple(c for c in present if c.component == kind)
        stable = next(c.alias or c.service for c in comps)
        alias = all(c.alias for c in comps)
        release = catalog.managed_by_release(snapshot.services.get(stable))
        out.append(Need(stable, comps, alias and release is None))
        out += [Need(c.service, (c,), False) for c in comps if c.alias
                and not (release and c.service in release.deletes_services)]
    return out


def _node_reasons(snapshot: Snapshot, need: Need, svc: Mapping[str, Any], nodes: Iterable[str],
                  pods: Iterable[PodView], fixes: Fixes) -> tuple[str, str]:
    """Why these nodes have no ready endpoint (pod not Ready, or not selected), and the fix."""
    pods_by_node: dict[str, list[PodView]] = {}
    for p in pods:
        pods_by_node.setdefault(p.node, []).append(p)
    unready: list[PodView] = []
    unselected, other = [], []
    selects = for_service(o.dig(svc, "spec", "selector")).matches
    for node in nodes:
        here = pods_by_node.get(node, [])
        if here and not any(p.ready for p in here):
            unready += here
        elif here and not any(selects(p.labels) for p in here if p.ready):
            unselected.append(f"{node} ({'/'.join(sorted({p.owner_name or '' for p in here}))})")
        else:
            other.append(node)
    parts, fix = [], []
    ns = snapshot.namespace
    if unready:
        parts.append("pod not Ready on " + named(
            f"{p.node} ({p.name}: {p.why or 'not Ready'})" for p in unready))
        first = min(unready, key=lambda p: (not p.node_lost, p.node, p.name))
        lost = sorted({p.node for p in unready if p.node_lost})
        fix.append(("node " + named(lost) + " stopped reporting (its pods were marked not "
                    f"Ready by the node controller): `kubectl describe node {first.node}` says "
                    "why; bring it back, or drain and delete it") if lost else
                   (f"see why the pod is not Ready: `kubectl describe pod {first.name} -n {ns}` "
                    f"(its events and containers) and its node: `kubectl describe node "
                    f"{first.node}`"))
        fix.append("the name reaches the node again once its pod is Ready; no dcgm-migrate "
                   "command changes that")
    if unselected:
        sel = o.dig(svc, "spec", "selector") or {}
        parts.append(f"selector {sel} does not select the pod on {named(unselected)}")
        label = next((c.common_label for c in need.components
                      if sel == dict(c.common_selector)), None)
        if label is not None:
            fix.append(fixes.relabel(f"{label.key}={label.value}"))
        elif need.alias:
            fix.append(f"run {fixes.apply(Remedy.ALIASES)} (and keep `dcgm-migrate guard` "
                       "running)")
    if other:
        parts.append(f"EndpointSlices list no ready endpoint yet on {named(other)}")
        fix.append(f"the EndpointSlice controller has not listed Ready pods yet: check again "
                   f"with `dcgm-migrate verify`; if it persists, `kubectl get endpointslices "
                   f"-n {ns} -l kubernetes.io/service-name={need.service}` and the "
                   "kube-controller-manager")
    return "; ".join(parts), "; ".join(fix)


def _coverage(snapshot: Snapshot, need: Need, svc: Mapping[str, Any], fixes: Fixes,
              subject: str, phase: int) -> Finding:
    ghosts = snapshot.on_deleted_nodes()  # a deleted node is no node to cover
    pods = [p for c in need.components for p in alive(snapshot.pods_of(c.daemonset))
            if p.name not in ghosts]
    expected, names = {p.node for p in pods if p.node}, {p.name for p in pods}
    short, unscheduled = [], []
    for c in need.components:
        nodes = len({p.node for p in pods if p.node and p.owner_name == c.daemonset})
        desired = g.rollout_counts(snapshot.daemonsets.get(c.daemonset) or {})[2]
        if desired > nodes:
            short.append(f"{desired - nodes} of {desired} nodes that should run "
                         f"DaemonSet/{c.daemonset} have no pod of it")
            unscheduled.append(f"`kubectl describe daemonset {c.daemonset} -n "
                               f"{snapshot.namespace}` says why it has no pod there")
    covered = {e.node for e in snapshot.endpoints_of(need.service).endpoints
               if e.ready and e.node and e.pod in names}
    missing = sorted(expected - covered)
    if missing or short:
        reasons, fix = _node_reasons(snapshot, need, svc, missing, pods, fixes)
        why = [f"no ready endpoint on {len(missing)} of {len(expected)} nodes: "
               f"{reasons}"] if missing else []
        if missing and "selector" in reasons and len({c.stack for c in need.components}) > 1:
            fix = ("both stacks run here and the ClusterPolicy operator's Service selects only "
                   f"its own pods: run {fixes.apply(Remedy.ALIASES)} and keep "
                   "`dcgm-migrate guard` running, which adds the GPUCluster pods through "
                   "EndpointSlices of its own (docs/runbook.md, 'Clusters running both stacks')")
        fix = "; ".join([fix, *unscheduled] if fix else unscheduled)
        return Finding("nodes-covered", subject, False, "; ".join(why + short), fix, phase)
    return Finding("nodes-covered", subject, True,
                   f"a ready endpoint on each of {len(expected)} nodes", phase=phase)


def _name_findings(snapshot: Snapshot, need: Need, fixes: Fixes,
                   allowed: Collection[str]) -> list[Finding]:
    subject = f"Service/{need.service}"
    phase = fixes.phase(Remedy.ALIASES) if need.alias else 0
    svc = snapshot.services.get(need.service)
    if svc is None:
        fix = (f"run {fixes.apply(Remedy.ALIASES)}" if need.alias else
               "the operator renders it: check that its CR enables "
               f"{need.components[0].component}")
        return [Finding("stable-name", subject, False, "does not exist", fix, phase)]
    leaving = collected(snapshot, svc) or o.terminating(svc)
    if leaving:
        return [Finding("stable-name", subject, False, f"is being deleted ({leaving})",
                        f"{fixes.apply(Remedy.ALIASES)} re-creates an alias once it "
                        "is gone" if need.alias else "", phase)]
    out = [Finding("stable-name", subject, True, "exists", phase=phase)]
    if need.local:
        policy = o.dig(svc, "spec", "internalTrafficPolicy") or "Cluster"
        out.append(Finding("local-traffic", subject, policy == "Local",
                           f"internalTrafficPolicy {policy}",
                           "" if policy == "Local" else
                           "DCGM is reached on the consumer's own node: set "
                           "internalTrafficPolicy: Local (phase "
                           f"{fixes.phase(Remedy.ALIASES)} renders aliases with it)",
                           phase))
    resync = ("`dcgm-migrate guard --once` re-syncs the alias with its source Service"
              if need.alias else "the operator renders this Service: check what its CR sets "
              f"(`kubectl get service {need.service} -n {snapshot.namespace} -o yaml`)")
    return [*out, _coverage(snapshot, need, svc, fixes, subject, phase),
            foreign_endpoints(snapshot, need, svc, allowed),
            ports_served(snapshot, need, svc, resync)]


def _no_dra_names(snapshot: Snapshot, catalog: Catalog, stacks: set[str]) -> list[Finding]:
    if DRA_STACK in stacks or not stacks:
        return []
    dra = sorted({c.service for c in catalog.stack(DRA_STACK).components
                  if c.service in snapshot.services})
    exposed = [n for n in dra if not collected(snapshot, snapshot.services[n])]
    return [Finding("no-dra-names", "Service/*-dra", not exposed,
                    f"the legacy stack exposes {named(exposed)}" if exposed
                    else "no -dra name exposed",
                    "" if not exposed else "delete those Services (nothing of the running "
                    "ClusterPolicy stack needs them)")]


def _daemonset_findings(snapshot: Snapshot, catalog: Catalog, comp: Component,
                        fixes: Fixes) -> list[Finding]:
    ds = snapshot.daemonsets[comp.daemonset]
    subject = f"DaemonSet/{comp.daemonset}"
    rollout = g.daemonset_healthy(snapshot, ds)
    out = [Finding("rollout-complete", subject, rollout.ok, rollout.detail,
                   "" if rollout.ok else halfrolls.rollout_fix(snapshot, ds)
                   if halfrolls.on_delete(ds) else "see which pods are not Ready: `kubectl -n "
                   f"{snapshot.namespace} rollout status ds/{comp.daemonset}`")]
    held = o.held_strategy(ds)
    if held is not None:  # phase 1 in place was interrupted: no rollout happens until restored
        out.append(Finding(
            "update-strategy", subject, False,
            f"held on OnDelete by dcgm-migrate (phase 1 in place, interrupted); its own "
            f"updateStrategy {held.get('type') or 'RollingUpdate'} is not restored, so a "
            "template change rolls no pod", "resume: rerun the interrupted `dcgm-migrate apply` "
            "or rollback, or run `dcgm-migrate rollback --phase 1`; either restores it",
            fixes.phase(Remedy.COMMON_LABELS)))
    # The label its pods must carry: the common one, or that of the release managing the name.
    label = (catalog.release_label(comp, snapshot.services) or (None, comp.common_label))[1]
    want, pods = f"{label.key}={label.value}", alive(snapshot.pods_of(comp.daemonset))
    off = [p for p in pods if p.labels.get(label.key) != label.value]
    switched = any((o.dig(s, "spec", "selector") or {}).get(label.key) == label.value
                   for s in snapshot.services.values())
    fix = "" if not off else (fixes.relabel(want) if switched and label == comp.common_label
                              else f"run {fixes.apply(Remedy.COMMON_LABELS)}")
    out.append(Finding("pods-labelled", subject, not off,
                       f"{len(off)} of {counted(len(pods), 'pod')} lack {want}: "
                       f"{named(p.name for p in off)}" if off else
                       f"{counted(len(pods), 'pod')} carry {want}", fix,
                       fixes.phase(Remedy.COMMON_LABELS)))
    return out


def _one_exporter_per_node(snapshot: Snapshot, exporters: Sequence[Component]) -> list[Finding]:
    """Two exporter DaemonSets on one node report its GPUs twice (every `sum()` doubles)."""
    if len(exporters) < 2:
        return []
    by_node: dict[str, set[str]] = {}
    for c in exporters:
        for p in alive(snapshot.pods_of(c.daemonset)):
            by_node.setdefault(p.node, set()).add(c.daemonset)
    twice = sorted(n for n, ds in by_node.items() if n and len(ds) > 1)
    if not twice:
        return [Finding("one-exporter-per-node", "Node/*", True,
                        f"{len(by_node)} nodes, one exporter each")]
    gates = sorted({f"{k}=false" for c in exporters for k in (o.dig(
        snapshot.daemonsets.get(c.daemonset) or {}, "spec", "template", "spec",
        "nodeSelector") or {})})
    return [Finding("one-exporter-per-node", "Node/*", False,
                    f"{len(twice)} nodes run the exporters of both stacks, so their GPUs are "
                    f"reported twice: {named(twice)}",
                    "run one stack's exporter per node: label those nodes with one of "
                    f"{', '.join(gates) or 'the exporter DaemonSets node-selector labels'}")]


def _scrape_findings(snapshot: Snapshot, exporters: Sequence[Component],
                     tool_services: set[str], fixes: Fixes) -> list[Finding]:
    daemonsets = [c.daemonset for c in exporters]
    if not daemonsets:
        return []
    paths = monitoring.scrape_paths(snapshot, daemonsets)
    pods = monitoring.exporter_pods(snapshot, daemonsets)
    certain, none = scrapechecks.certain(paths), scrapechecks.unscraped(paths, pods)
    out = []
    if certain:
        pod, example = next(iter(sorted(certain.items())))
        # A second path through the tool's shared EndpointSlices is the migration's doing, but
        # only the consumer's relabeling removes it: the fix names the field and object.
        shared = scrapechecks.shared_slice_fix(snapshot, certain)
        ours = shared or any(t.service in tool_services for ts in certain.values() for t in ts)
        out.append(Finding("scrape-once", "Pod/exporters", False,
                           f"{len(certain)} of {len(pods)} exporter pods are scraped more than "
                           f"once, e.g. {pod} via {'; '.join(map(str, example))}",
                           shared or "keep one scrape path per pod (docs/monitoring.md)",
                           fixes.phase(Remedy.ALIASES) if ours else 0))
    if none:
        out.append(Finding("scrape-once", "Pod/unscraped", False,
                           f"{len(none)} Ready exporter pods are reached by no scrape target: "
                           f"{named(none)}",
                           "annotate the canonical Service or add a ServiceMonitor "
                           "(docs/monitoring.md)"))
    if not certain and not none:
        out.append(Finding("scrape-once", "Pod/exporters", True,
                           f"{len(pods)} exporter pods, one target each per mechanism"))
    return out


def verdict(snapshot: Snapshot, catalog: Catalog, answers: Answers, *,
            completed: int = 0, allowed_foreign: Collection[str] = ()) -> Verdict:
    """The verdict on the live cluster; `answers`: which phase puts each remedy right;
    `completed`: the highest phase recorded completed (for the fixes' wording only);
    `allowed_foreign`: the Services switched with --allow-foreign-pods."""
    fixes = Fixes(answers, completed)
    found = discover(snapshot, catalog)
    present = list(found.components)
    if not present:  # nothing to judge is never a pass
        return Verdict(found.stack, (Finding(
            "dcgm-found", f"Namespace/{snapshot.namespace}", False,
            "no GPU Operator DCGM DaemonSet runs in this namespace",
            "pass the GPU Operator's namespace with -n"),))
    findings: list[Finding] = stackchange.findings(snapshot)
    needs = _needs(snapshot, catalog, present)
    for need in needs:
        findings += _name_findings(snapshot, need, fixes, allowed_foreign)
    findings += shared_findings(snapshot, catalog, needs)
    findings += _no_dra_names(snapshot, catalog, {c.stack for c in present})
    for comp in present:
        findings += _daemonset_findings(snapshot, catalog, comp, fixes)
    ours = {n for n, s in snapshot.services.items() if catalog.common.tool_owned(s)}
    exporters = [c for c in present if c.exporter]
    findings += _scrape_findings(snapshot, exporters, ours, fixes)
    findings += _one_exporter_per_node(snapshot, exporters)
    return Verdict(found.stack, tuple(findings))


def tool_marks(snapshot: Snapshot, catalog: Catalog) -> list[str]:
    """Objects that carry what only this tool writes (phase 1's DaemonSet mark, a Service's
    managed-by label or alias annotation, unless a release manages it now): with no state, the
    state was lost while its effects remain. Common labels or selectors are no such mark."""
    common = catalog.common
    return [labelmarks.described(m) for m in labelmarks.marked(snapshot.daemonsets)] + [
        f"Service/{name} (the tool's alias)" for name, svc in sorted(snapshot.services.items())
        if (common.tool_owned(svc) or common.alias_of_annotation in o.annotations_of(svc))
        and catalog.managed_by_release(svc) is None]
