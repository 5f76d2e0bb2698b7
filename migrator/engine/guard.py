"""`dcgm-migrate guard`: keeps the tool-owned aliases safe while the operator re-renders.

A long-running loop (one replica leads, on a Lease; see `leader`): it watches the namespace's
DaemonSets and Services and applies the corrections `model.guarding` decides.

The race it is built for: a CR edit makes the operator replace a DaemonSet whose new template
lacks the common label, and the DaemonSet controller starts rolling at once. Every DaemonSet
watch event is therefore answered on a fast path — one list of the tool's Services and, if the
template lost the label, one guarded selector patch back to the app label — before any full
read. The app label selects old and new pods alike, so from that patch on the alias loses only
what the rollout itself takes (its maxUnavailable), like the operator's own Service. A full
pass (snapshot, state, release and config re-sync) follows each batch of events, throttled,
and runs every `resync_seconds` regardless.

Writes are JSON patches with a `test` of the old selector (or resourceVersion): an alias changed
by someone else meanwhile is never overwritten, only re-read on the next pass.

With both stacks in the cluster it is also the shared-Service reconciler for what the tool
manages (`model/sharing.py`, docs/architecture.md "Clusters running both stacks"): a stable
name the ClusterPolicy operator renders gets EndpointSlices of the tool's own that list the
GPUCluster pods on the nodes the operator's Service does not reach, kept from an informer of
the namespace's EndpointSlices; a stable name that no Service holds any more while the
GPUCluster stack needs it (its ClusterPolicy was deleted) is created again as the tool's alias.
Both only once phase 2 is completed, so a guard deployed early writes nothing new.

The shared slices belong to the guard's Lease (`sharing.Keeper`): deleting the guard with its
manifest (which carries the Lease) lets the garbage collector remove them, and `verify`
requires the Lease to be renewed wherever the stable names depend on them (`model/outcome.py`).
A slice the API server refuses is reported and the others are still written; a watch that
fails in any way is retried.

What an operator sees of it besides its log (docs/runbook.md, "The guard"): its metrics and
probes (`engine/metrics.py`, `engine/health.py`, served by `engine/serving.py` when the CLI
names a port), and Kubernetes Events on the objects it acts on (`engine/events.py`): the alias
it holds, releases or re-syncs, the stable Service whose slices it writes or that it creates
again, and the state ConfigMap for a verdict that changed. The slice writes of a pass run
concurrently, what restores reach first (`engine/slicewrites.py`). The loop's timing is
`engine/guardloop.py`'s, the settings `engine/guardsettings.py`'s.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator import phases
from migrator.engine import slicewrites
from migrator.engine.clock import Clock, SystemClock
from migrator.engine.events import NORMAL, WARNING, Recorder
from migrator.engine.guardloop import Loop, Queued, typed
from migrator.engine.guardsettings import DEFAULT_LEASE, GuardSettings, verdict_due
from migrator.engine.health import Health
from migrator.engine.informer import Reflector
from migrator.engine.leader import LeaseLock
from migrator.engine.metrics import GuardMetrics
from migrator.engine.reads import read_pods, read_snapshot
from migrator.engine.state import ConfigMapStateStore, State, holds
from migrator.engine.wholepods import WholePods
from migrator.errors import (
    APIConflict,
    APIError,
    APIInvalid,
    APINotFound,
    ClusterError,
)
from migrator.model import guarding, kinds, outcome, reach, sharing
from migrator.model import objects as o
from migrator.model.guarding import Correction
from migrator.model.kinds import Kind
from migrator.model.outcome import Verdict
from migrator.model.planning import PlanContext
from migrator.model.sharing import SliceWrite
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, pod_selectors
from migrator.phases import alias as alias_phase

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
Log = Callable[[str], None]
__all__ = ["DEFAULT_LEASE", "Guard", "GuardSettings", "PassResult", "verdict_due"]
DEFAULT_SETTINGS = GuardSettings()
# Correction action → the Event on the alias: (type, reason, action). A hold is a Warning: the
# operator rendered a DaemonSet without the common label, and someone must bring it back.
CORRECTION_EVENTS = {guarding.HOLD: (WARNING, "SelectorHeld", "Hold"),
                     guarding.RELEASE: (NORMAL, "SelectorReleased", "Release"),
                     guarding.CLEAR: (NORMAL, "HoldCleared", "Release"),
                     guarding.SYNC: (NORMAL, "ConfigResynced", "Resync")}


@dataclass(frozen=True)
class PassResult:
    """One full pass: the aliases seen and the corrections written (or found done)."""

    aliases: tuple[dict[str, Any], ...] = ()
    applied: tuple[Correction, ...] = ()
    skipped: tuple[str, ...] = ()
    shared: tuple[dict[str, Any], ...] = ()  # stable names the GPUCluster pods join (sharing)
    slice_writes: tuple[SliceWrite, ...] = ()
    created: tuple[str, ...] = ()  # aliases created again
    failed: tuple[str, ...] = ()  # slice writes the API server refused, each with its reason

    def as_dict(self) -> dict[str, Any]:
        return {"aliases": list(self.aliases), "corrections": [c.as_dict() for c in self.applied],
                "skipped": list(self.skipped), "shared": list(self.shared),
                "sliceWrites": [w.as_dict() for w in self.slice_writes],
                "created": list(self.created), "failed": list(self.failed)}


def switched_aliases(state: State | None) -> dict[str, dict[str, str]]:
    """Alias → the selector the phase that switches selectors recorded for it, while that
    phase is completed: the only aliases the guard may move forward again."""
    record = state.phase(phases.selector_phase().NUMBER) if state is not None else None
    if record is None or not holds(record.status):
        return {}
    changes = ((s.name, s.selector_change(s.name)) for s in record.done_steps())
    return {name: dict(change[1]) for name, change in changes if change is not None}


def aliases_completed(state: State | None) -> bool:
    """Has the phase that creates the aliases completed (and not been rolled back)? Only then
    may the guard create what that phase would: a shared slice, an alias again."""
    record = state.phase(alias_phase.NUMBER) if state is not None else None
    return record is not None and holds(record.status)


def _slice_view(obj: Obj) -> Obj:
    """What the guard keeps of an EndpointSlice (no managedFields: a sixth of the bytes)."""
    meta = {k: v for k, v in o.meta(obj).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "metadata"}, "metadata": meta}


class Guard:
    """The loop and its I/O; decisions are `model.guarding`'s."""

    def __init__(self, kube: Kube, namespace: str, catalog: Catalog,
                 settings: GuardSettings = DEFAULT_SETTINGS, *, log: Log = lambda _: None,
                 clock: Clock | None = None, lease: LeaseLock | None = None,
                 metrics: GuardMetrics | None = None) -> None:
        self.kube = kube
        self.namespace = namespace
        self.catalog = catalog
        self.settings = settings
        self.log = log
        self.clock: Clock = clock or SystemClock()  # the loop's, the Lease's, the informer's
        self.store = ConfigMapStateStore(kube, namespace, catalog.common, self.clock)
        mb = catalog.common.managed_by
        self.lease = lease or LeaseLock(kube, namespace, settings.lease_name, settings.identity,
                                        lease_seconds=settings.lease_seconds, clock=self.clock,
                                        labels={mb.key: mb.value})
        self.passes = 0  # passes completed (a pass that raised is not one)
        self.written: list[Correction] = []  # every correction written, oldest first
        self.slice_writes: list[SliceWrite] = []  # every shared-slice write, oldest first
        self._noted: set[str] = set()  # notes already logged once
        # The loop's informers (kind plural → cache): DaemonSets and Services whole, the
        # stable names' EndpointSlices without managedFields. A pass reads them, not the API.
        self.caches: dict[str, Reflector[Obj]] = {}
        self.slices: Reflector[Obj] | None = None  # the loop's EndpointSlice informer
        self.metrics = metrics or GuardMetrics()  # its own registry (engine/metrics.py)
        self.status = self.metrics.status
        self.health = Health(self.clock, settings.stall_seconds)
        self.recorder = Recorder(kube, settings.identity, self.clock, log=self.note,
                                 counted=self.metrics.event)
        self.status.watches = self._watches
        self._owners: dict[str, str] = {}  # stable name → who held it at the last pass
        self.last_written: dict[str, float] = {}  # stable name → its last slice write's answer

    # ---- reads -------------------------------------------------------------------------------

    def _listed(self, kind: Kind) -> list[Obj]:
        """Every `kind` of the namespace: the loop's cache while it runs (current up to the
        guard's own writes: `_saw`), else one list (`--once`)."""
        cache = self.caches.get(kind.plural)
        if cache is not None and cache.alive:
            return cache.items()
        return self.kube.list(kind, self.namespace).items

    def _managed_services(self) -> dict[str, Obj]:
        mb = self.catalog.common.managed_by
        return {o.name(s): s for s in self._listed(kinds.SERVICE)
                if o.labels(s).get(mb.key) == mb.value}

    def read(self, *, pods: bool = True) -> Snapshot:
        """What a full pass needs, from this namespace only (the guard's Role is namespaced):
        the catalog's DaemonSets, every Service, and (`pods`) the pods of those DaemonSets.

        The pods come as printed rows (`model/printed.py`) with no EndpointSlice to contradict
        them (the guard's Role reads none), so the pods of a node that stopped reporting look
        Ready here while their containers do. That cannot move an alias forward early: the
        release gates pass only once every live pod carries the common label, and then the
        same pods stand on both sides of the superset check, Ready or not."""
        wanted = {c.daemonset for c in self.catalog.components}
        daemonsets = {o.name(d): d for d in self._listed(kinds.DAEMONSET)
                      if o.name(d) in wanted}
        services = {o.name(s): s for s in self._listed(kinds.SERVICE)}
        comps = [c for c in self.catalog.components if c.daemonset in daemonsets]
        selectors = pod_selectors(comps)
        views = (read_pods(self.kube, self.namespace, selectors, whole=WholePods(max_gets=0))
                 if selectors and pods else ())
        return Snapshot(self.namespace, daemonsets=daemonsets, services=services, pods=views)

    def verdict(self) -> Verdict:
        """The verdict on the namespace as it is now (`model/outcome.py`), from what the
        guard's namespaced Role may read: the DaemonSets, Services, pods and EndpointSlices
        (ServiceMonitors of other namespaces are out of its sight). Its Role lists pods and
        never gets one, so doubtful printed pods are read whole by listing their selectors."""
        snap = read_snapshot(self.kube, self.namespace, self.catalog, cluster_scope=False,
                             whole=WholePods(max_gets=0), clock=self.clock)
        verdict = outcome.verdict(snap, self.catalog, phases.answers())
        self.status.judged(verdict, reach.reach(snap, self.catalog, verdict),
                           self.clock.now().timestamp())
        return verdict

    def state_configmap(self) -> Obj | None:
        """The state ConfigMap itself (the object a verdict's Event regards), or None."""
        try:
            return self.kube.get(kinds.CONFIGMAP, self.catalog.common.state_configmap,
                                 self.namespace)
        except ClusterError:
            return None

    def _watches(self) -> dict[str, tuple[int, int]]:
        """(failures, relists) of every watch the loop runs, for the metrics."""
        return {plural: (r.failures, r.relists) for plural, r in self.caches.items()}

    def read_state(self) -> State | None:
        """The migration state, read-only; unreadable state means: release nothing."""
        return self._read_state()[0]

    def _read_state(self) -> tuple[State | None, bool]:
        """(the state, whether it could be read): an unreadable state moves nothing forward
        and removes nothing shared."""
        try:
            stored = self.store.load()
        except ClusterError as exc:
            self.log(f"state unreadable, nothing is moved forward or shared anew: {exc}")
            return None, False
        return (State.from_document(stored.document, self.clock) if stored and stored.document
                else None), True

    def slice_selector(self) -> str:
        """The EndpointSlices sharing needs: those of the stable names and their sources."""
        names = sorted({n for c in self.catalog.components if c.alias
                        for n in (c.alias, c.service)})
        return f"{sharing.SERVICE_NAME_LABEL} in ({','.join(names)})"

    def read_slices(self) -> list[Obj]:
        """From the loop's informer while it runs, else one list (`--once`)."""
        if self.slices is not None and self.slices.alive:
            return self.slices.items()
        return [_slice_view(s) for s in self.kube.list(
            kinds.ENDPOINTSLICE, self.namespace, label_selector=self.slice_selector()).items]

    def desired(self, snapshot: Snapshot) -> dict[str, dict[str, Any]]:
        """Alias → the body phase 2 would create from its source Service now."""
        comps = tuple(c for c in self.catalog.components if c.daemonset in snapshot.daemonsets)
        ctx = PlanContext(snapshot, self.catalog, comps)
        out = {}
        for alias in guarding.aliases(snapshot, self.catalog):
            source = snapshot.services.get(alias.component.service)
            if source is not None:
                out[alias.name] = alias_phase.alias_body(ctx, alias.component, source, None)
        return out

    # ---- writes ------------------------------------------------------------------------------

    def apply(self, corrections: Sequence[Correction], *, since: float | None = None
              ) -> tuple[list[Correction], list[str]]:
        """Write the corrections (guarded JSON patches); `since`: when the event that made
        them needed arrived (monotonic), for the repair-time histogram."""
        done, skipped = [], []
        for c in corrections:
            live: Obj | None
            try:
                live = self.kube.patch(kinds.SERVICE, c.service, self.namespace, c.patch(),
                                       patch_type="json")
            except APIInvalid:  # a `test` failed: changed meanwhile (or our own write landed)
                live = self.kube.get(kinds.SERVICE, c.service, self.namespace)
                if not c.satisfied(live):
                    self.metrics.wrote(kinds.SERVICE.kind, "conflict")
                    skipped.append(f"Service/{c.service}: changed meanwhile; {c.action} "
                                   "re-decided on the next pass")
                    continue
            except APINotFound:
                self.metrics.wrote(kinds.SERVICE.kind, "gone")
                skipped.append(f"Service/{c.service}: gone")
                continue
            done.append(c)
            self.written.append(c)
            self.metrics.wrote(kinds.SERVICE.kind, "ok")
            if since is not None:
                self.metrics.repaired(c.action, self.clock.monotonic() - since)
            self.log(f"{c.action} Service/{c.service}: {c.reason}")
            type_, reason, action = CORRECTION_EVENTS.get(c.action, (NORMAL, "Corrected", "Patch"))
            if live is not None:
                self.recorder.record(typed(kinds.SERVICE, live), type_, reason, action,
                                     c.reason)
        for s in skipped:
            self.log(s)
        return done, skipped

    def keeper(self) -> sharing.Keeper:
        """What the shared slices belong to: this guard's Lease (created with no holder when
        no replica has led yet, as under `--once`)."""
        lease = self.lease.lease
        if lease is None or not o.meta(lease).get("uid"):
            lease = self.lease.ensure()
        return sharing.Keeper.of(lease)

    def write_slices(self, writes: Sequence[SliceWrite], *,
                     covered: Mapping[str, set[str]] | None = None
                     ) -> tuple[list[SliceWrite], list[str]]:
        """Create, update (at the version decided on) or delete shared slices: (written,
        refused). A slice changed meanwhile is re-decided on the next pass; one the API server
        refuses (invalid, forbidden) is reported and the rest are still written.

        Up to `write_concurrency` at once, the writes that give nodes of `covered` (stable
        name → nodes with a ready endpoint now) their first endpoint first, deletes once the
        rest is answered (`engine/slicewrites.py`)."""
        first, deletes = slicewrites.ordered(writes, covered or {})
        results = slicewrites.run((first, deletes), self._write_slice,
                                  self.settings.write_concurrency)
        done, refused = [], []
        self.last_written = {}
        for w, (result, detail, at) in results:
            self.metrics.wrote(kinds.ENDPOINTSLICE.kind, result)
            if result == "conflict":
                self.log(f"EndpointSlice/{w.name}: changed meanwhile ({detail}); "
                         "re-decided on the next pass")
            elif result == "refused":
                refused.append(f"{w.action} EndpointSlice/{w.name} for Service/{w.service}: "
                               f"{detail}")
                self.note(f"{refused[-1]}; the other slices are written, this one is tried "
                          "again on every pass")
            else:
                done.append(w)
                self.slice_writes.append(w)
                self.last_written[w.service] = max(at, self.last_written.get(w.service, at))
                self.log(f"{w.action} EndpointSlice/{w.name} for Service/{w.service}: "
                         f"{w.reason}")
        return done, refused

    def _write_slice(self, w: SliceWrite) -> tuple[str, str, float]:
        """One slice write, on a pool thread: (ok | conflict | refused, detail, when its
        answer came)."""
        try:
            if w.action == sharing.CREATE:
                self.kube.create(w.body)
            elif w.action == sharing.UPDATE:
                body = {**w.body, "metadata": {**w.body["metadata"],
                                               "resourceVersion": w.resource_version}}
                self.kube.replace(body)
            else:
                self.kube.delete(kinds.ENDPOINTSLICE, w.name, self.namespace,
                                 resource_version=w.resource_version)
        except (APIConflict, APINotFound) as exc:
            return "conflict", exc.reason, self.clock.monotonic()
        except APIError as exc:
            return "refused", str(exc), self.clock.monotonic()
        return "ok", "", self.clock.monotonic()

    def create_aliases(self, bodies: Sequence[Obj]) -> list[str]:
        done = []
        for body in bodies:
            name = o.name(body)
            try:
                created = self.kube.create(body)
            except APIConflict:
                self.metrics.wrote(kinds.SERVICE.kind, "conflict")
                self.log(f"Service/{name}: taken meanwhile; re-decided on the next pass")
                continue
            done.append(name)
            self.metrics.wrote(kinds.SERVICE.kind, "ok")
            why = "the GPUCluster stack needs the stable name and no Service holds it any more"
            self.log(f"create Service/{name}: {why}")
            self.recorder.record(typed(kinds.SERVICE, created), NORMAL, "AliasCreated",
                                 "Create", f"created as the tool's alias: {why}")
        return done

    def note(self, message: str) -> None:
        """Log a standing condition once, not on every pass."""
        if message not in self._noted:
            self._noted.add(message)
            self.log(message)

    # ---- the two paths -----------------------------------------------------------------------

    def on_daemonset(self, daemonset: Obj, since: float | None = None) -> list[Correction]:
        """The fast path: from one DaemonSet event (arrived at `since`), hold the aliases
        whose template lost the label. One list and at most one patch per alias; no
        snapshot."""
        comps = [c for c in self.catalog.components if c.daemonset == o.name(daemonset)]
        labels = o.template_labels(daemonset)
        if all(labels.get(c.common_label.key) == c.common_label.value for c in comps):
            return []  # not ours, or the template still carries the label: nothing to hold
        snap = Snapshot(self.namespace, daemonsets={o.name(daemonset): daemonset},
                        services=self._managed_services())
        done, _ = self.apply(guarding.holds(snap, self.catalog), since=since)
        return done

    def reconcile(self, since: float | None = None) -> PassResult:
        """One full pass: read, decide (hold, release, re-sync), write. `since`: when the
        oldest watch event it answers arrived (monotonic; None: the pass's own start)."""
        result = self._pass(self.clock.monotonic() if since is None else since)
        self.passes += 1
        return result

    def _pass(self, since: float) -> PassResult:
        began = self.clock.monotonic()
        snap = self.read(pods=False)
        state, readable = self._read_state()
        switched = switched_aliases(state)
        if guarding.release_pending(snap, self.catalog, switched):
            snap = self.read()  # the release gates look at every pod: only now read them
        desired = self.desired(snap)
        done, skipped = self.apply(guarding.decide(snap, self.catalog, switched, desired),
                                   since=since)
        seen = tuple({"name": a.name, "source": a.component.service, "selector": a.selector,
                      "held": o.annotations_of(a.service).get(guarding.HELD_ANNOTATION),
                      "switched": a.name in switched}
                     for a in guarding.aliases(snap, self.catalog))
        if not readable:
            self._state_unreadable()
            return PassResult(seen, tuple(done), tuple(skipped))
        self._count_takeovers(snap)
        enabled = aliases_completed(state)
        created = self.create_aliases(guarding.missing_aliases(snap, self.catalog, switched)
                                      if enabled else [])
        if created:
            self.metrics.repaired("alias", self.clock.monotonic() - since)
        names = sharing.shared_names(snap, self.catalog)
        slices = slicewrites.caught_up(self.read_slices(),
                                       {c.alias or "": c.service for c, _, _ in names})
        needed = ((enabled and names)
                  or sharing.shared_slices(slices, self.catalog.common))
        keeper = self.keeper() if needed else None
        shared, writes = (sharing.all_writes(snap, self.catalog, slices, keeper, enabled=enabled)
                          if keeper is not None else ([], []))
        for share in shared:
            for conflict in share.conflicts:
                self.note(f"Service/{share.name} and Service/{share.component.service} "
                          f"differ: {conflict}")
        decided = self.clock.monotonic()
        written, refused = self.write_slices(writes,
                                             covered=slicewrites.covered_nodes(slices))
        if writes:
            self.log(f"slice writes: {len(writes)} decided {(decided - began) * 1000:.0f} ms "
                     f"into the pass ({(began - since) * 1000:.0f} ms after its first event), "
                     f"answered {(self.clock.monotonic() - decided) * 1000:.0f} ms later")
        self._report_slices(snap, shared, written, refused, since)
        self.status.passed({s.name: len(s.endpoints) for s in shared},
                           self.clock.now().timestamp())
        return PassResult(seen, tuple(done), tuple(skipped),
                          tuple(s.as_dict() for s in shared), tuple(written), tuple(created),
                          tuple(refused))

    def _count_takeovers(self, snap: Snapshot) -> None:
        """A stable name whose Service changed hands since the last pass (an operator took
        the alias over, or the guard created it again) counts once."""
        for comp in self.catalog.components:
            if not comp.alias:
                continue
            svc = snap.services.get(comp.alias)
            owner = ("" if svc is None else sharing.rendered_by(svc)
                     or ("tool" if self.catalog.common.tool_owned(svc) else "other"))
            before = self._owners.get(comp.alias)
            self._owners[comp.alias] = owner
            if before is not None and owner and owner != before:
                self.metrics.takeover(comp.alias)

    def _report_slices(self, snap: Snapshot, shared: Sequence[sharing.Share],
                       written: Sequence[SliceWrite], refused: Sequence[str],
                       since: float) -> None:
        """One Event per stable Service whose slices this pass wrote or could not write, and
        the repair time of each."""
        by_name = {s.name: s for s in shared}
        for name in sorted({w.service for w in written}):
            mine = [w for w in written if w.service == name]
            counts = ", ".join(f"{sum(1 for w in mine if w.action == a)} {a}d"
                               for a in (sharing.CREATE, sharing.UPDATE, sharing.DELETE))
            share = by_name.get(name)
            why = (f"{len(share.endpoints)} {share.component.stack} endpoints of "
                   f"Service/{share.component.service} join it ({share.owner} selects only "
                   "its own pods)" if share is not None else "it needs no shared slice now")
            self.metrics.repaired("share", self.last_written.get(name, since) - since)
            svc = snap.services.get(name)
            if svc is not None:
                self.recorder.record(typed(kinds.SERVICE, svc), NORMAL, "SharedEndpointSlices",
                                     "Share", f"the guard's EndpointSlices: {counts}; {why}")
        for line in refused:
            name = line.rsplit("for Service/", 1)[-1].split(":", 1)[0]
            svc = snap.services.get(name)
            if svc is not None:
                self.recorder.record(typed(kinds.SERVICE, svc), WARNING,
                                     "EndpointSliceRefused", "Share", line)

    def _state_unreadable(self) -> None:
        self.metrics.api_error("state")
        cm = self.state_configmap()
        if cm is not None:
            self.recorder.record(typed(kinds.CONFIGMAP, cm), WARNING, "StateUnreadable",
                                 "Read", "the migration state cannot be read: the guard moves "
                                 "no alias forward and shares nothing anew until it can")

    # ---- the loop ----------------------------------------------------------------------------

    def _saw(self, kind: Kind, obj: Obj) -> None:
        """The guard wrote or read `obj` (`Kube.observe`): a cache read waits until its watch
        has delivered that version (engine/informer.py), so a pass never decides again on a
        view older than its own last write."""
        for cache in self.caches.values():
            cache.saw(kind, obj)

    def _start(self, cache: Reflector[Obj], stop: threading.Event) -> None:
        """Start one informer, retrying while the API refuses (a pass lists meanwhile)."""
        name = f"watch/{cache.kind.plural}"
        while not stop.is_set():
            try:
                cache.start()
                self.health.synced(name)
                return
            except (APIError, ClusterError) as exc:
                self.metrics.api_error("watch")
                self.log(f"watch of {cache.kind.plural} failed ({exc}); retrying")
                stop.wait(self.settings.retry_seconds)

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set: lead (or wait to), react to events, resync; on the way out
        give the Lease up so a standby takes over at once.

        Each informer lists, then watches from that version and is retried however its
        watch fails (engine/informer.py); every event reaches the loop with its arrival
        time. A watch request ends within its timeout (the transport's read timeout bounds a
        silent stream), so liveness checks only that each informer's thread still runs."""
        events: queue.Queue[Queued] = queue.Queue()

        def changed(etype: str, obj: Obj) -> None:
            events.put((etype, obj, self.clock.monotonic()))

        self.caches = {kind.plural: Reflector(self.kube, kind, self.namespace, keep, selector,
                                              changed=changed, clock=self.clock)
                       for kind, keep, selector in (
                           (kinds.DAEMONSET, _whole, None), (kinds.SERVICE, _whole, None),
                           (kinds.ENDPOINTSLICE, _slice_view, self.slice_selector()))}
        self.slices = self.caches[kinds.ENDPOINTSLICE.plural]
        self.health.beating("loop")
        for plural, cache in self.caches.items():
            self.health.expect(f"watch/{plural}")
            self.health.check(f"watch/{plural}", functools.partial(_thread_ended, cache, stop))
        unobserve = self.kube.observe(self._saw)
        loop = Loop(self)
        self.recorder.start()
        try:
            for cache in self.caches.values():
                self._start(cache, stop)
                changed("RESYNC", {"kind": cache.kind.kind})  # its list is a change, as ever
            while not stop.is_set():
                loop.tick(events, stop)
        finally:
            stop.set()
            loop.close()
            unobserve()
            for cache in self.caches.values():
                cache.stop()
            self.recorder.stop()
            self.status.leading(False)
            if self.lease.release():
                self.log(f"released Lease/{self.settings.lease_name}")


def _whole(obj: Obj) -> Obj:
    return obj


def _thread_ended(cache: Reflector[Obj], stop: threading.Event) -> str:
    return "" if cache.alive or stop.is_set() or not cache.rv else "its watch thread ended"
