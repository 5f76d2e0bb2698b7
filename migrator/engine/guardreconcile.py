"""The guard's reconciler: read, decide, hand to the writers. Decisions are pure and live in
`model/guarding.py` (the aliases: hold, release, clear, sync, create again) and `model/sharing.py`
(the shared EndpointSlices); writing is `engine/guardwrites.py`'s; when to reconcile is
`engine/guardloop.py`'s; the cache, the election, metrics and probes are composed around it by
`engine/guard.py`.

Two entry points, as the race demands (docs/architecture.md, "engine/guard"):

- `on_daemonset`, the fast path: from one DaemonSet watch event, one list of the tool's Services
  and at most one guarded patch per alias whose template lost the common label; no snapshot.
- `reconcile`, a full pass: the snapshot (pods only when a release could be due), the state,
  every correction, the aliases to create again, the shared slices, and what they tell
  `/metrics` and the Events.

Reads come from the loop's informers while it runs (current up to the guard's own writes) and
from one list each otherwise (`guard --once`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator import phases
from migrator.engine import slicewrites
from migrator.engine.clock import Clock
from migrator.engine.events import NORMAL, WARNING, Recorder, typed
from migrator.engine.guardsettings import GuardSettings
from migrator.engine.guardwrites import Refusal, Writers
from migrator.engine.informer import Informer, Reflector
from migrator.engine.leader import LeaseLock
from migrator.engine.reads import read_pods, read_snapshot
from migrator.engine.serving import GuardMetrics
from migrator.engine.state import ConfigMapStateStore, State, holds
from migrator.engine.wholepods import WholePods
from migrator.errors import ClusterError
from migrator.model import aliasing, guarding, kinds, outcome, reach, sharing
from migrator.model import objects as o
from migrator.model.guarding import Correction
from migrator.model.kinds import Kind
from migrator.model.outcome import Verdict
from migrator.model.sharing import SliceWrite
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, pod_selectors

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
Log = Callable[[str], None]


@dataclass(frozen=True)
class PassResult:
    """One full pass: the aliases seen and the corrections written (or found done)."""

    aliases: tuple[dict[str, Any], ...] = ()
    applied: tuple[Correction, ...] = ()
    skipped: tuple[Refusal, ...] = ()
    shared: tuple[dict[str, Any], ...] = ()  # stable names the GPUCluster pods join (sharing)
    slice_writes: tuple[SliceWrite, ...] = ()
    created: tuple[str, ...] = ()  # aliases created again
    failed: tuple[Refusal, ...] = ()  # slice writes the API server refused

    def as_dict(self) -> dict[str, Any]:
        return {"aliases": list(self.aliases), "corrections": [c.as_dict() for c in self.applied],
                "skipped": [str(s) for s in self.skipped], "shared": list(self.shared),
                "sliceWrites": [w.as_dict() for w in self.slice_writes],
                "created": list(self.created), "failed": [str(f) for f in self.failed]}


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
    record = state.phase(phases.alias_phase().NUMBER) if state is not None else None
    return record is not None and holds(record.status)


def slice_view(obj: Obj) -> Obj:
    """What the guard keeps of an EndpointSlice (no managedFields: a sixth of the bytes)."""
    meta = {k: v for k, v in o.meta(obj).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "metadata"}, "metadata": meta}


class Reconciler:
    """Reads, decisions handed to the writers, and what a pass reports (module docstring)."""

    def __init__(self, kube: Kube, namespace: str, catalog: Catalog, settings: GuardSettings,
                 *, clock: Clock, lease: LeaseLock, metrics: GuardMetrics, recorder: Recorder,
                 writers: Writers, log: Log, note: Log) -> None:
        self.kube, self.namespace, self.catalog = kube, namespace, catalog
        self.settings, self.clock, self.lease = settings, clock, lease
        self.metrics, self.recorder, self.writers = metrics, recorder, writers
        self.log, self.note = log, note
        self.store = ConfigMapStateStore(kube, namespace, catalog.common, clock)
        self.passes = 0  # passes completed (a pass that raised is not one)
        self.shaped = sharing.ShapedEndpoints()  # each shared slice version shaped once
        # The loop's informers (kind plural → cache), set by the runner while it runs.
        self.caches: dict[str, Reflector[Obj]] = {}
        # The same caches with the DCGM pods' (printed rows), as the verdict reads them; set
        # by the runner while it runs (None: every verdict is a whole read).
        self.verdict_cache: Informer | None = None
        # The Services switched with --allow-foreign-pods, as the last state read said.
        self.foreign_allowed: frozenset[str] = frozenset()

    # ---- reads -------------------------------------------------------------------------------

    def _listed(self, kind: Kind, view: Callable[[Obj], Obj] | None = None,
                selector: str | None = None) -> list[Obj]:
        """Every `kind` of the namespace: the loop's cache while it runs (which keeps each as
        `view`), else one list, each as `view` keeps it."""
        cache = self.caches.get(kind.plural)
        if cache is not None and cache.alive:
            return cache.items()
        items = self.kube.list(kind, self.namespace, label_selector=selector).items
        return items if view is None else [view(i) for i in items]

    def _managed_services(self) -> dict[str, Obj]:
        mb = self.catalog.common.managed_by
        return {o.name(s): s for s in self._listed(kinds.SERVICE)
                if o.labels(s).get(mb.key) == mb.value}

    def read(self, *, pods: bool = True) -> Snapshot:
        """What a full pass needs, from this namespace only (the guard's Role is namespaced):
        the catalog's DaemonSets, every Service, and (`pods`) the pods of those DaemonSets.

        The pods come as printed rows (`model/printed.py`) with no EndpointSlice to contradict
        them, so the pods of a node that stopped reporting look Ready here while their
        containers do. That cannot move an alias forward early: the release gates pass only
        once every live pod carries the common label, and then the same pods stand on both
        sides of the superset check, Ready or not."""
        wanted = {c.daemonset for c in self.catalog.components}
        daemonsets = {o.name(d): d for d in self._listed(kinds.DAEMONSET)
                      if o.name(d) in wanted}
        services = {o.name(s): s for s in self._listed(kinds.SERVICE)}
        comps = [c for c in self.catalog.components if c.daemonset in daemonsets]
        selectors = pod_selectors(comps)
        views = (read_pods(self.kube, self.namespace, selectors, whole=WholePods(max_gets=0))
                 if selectors and pods else ())
        return Snapshot(self.namespace, daemonsets=daemonsets, services=services, pods=views)

    def verdict(self, *, cached: bool = False) -> Verdict:
        """The verdict on the namespace as it is now (`model/outcome.py`), from what the
        guard's namespaced Role may read; doubtful printed pods are read whole by listing
        their selectors (the Role lists pods, never gets one). `cached`: from the loop's
        caches (`verdict_cache`) — no read but the Leases' and the doubtful pods' — else one
        whole read, the cross-check."""
        cache = self.verdict_cache if cached else None
        # While leading from the caches, its own Lease as last renewed (the renewal's answer)
        # stands for the Leases: this guard keeps the names, and nothing is listed.
        own = self.lease.lease if cache is not None else None
        snap = read_snapshot(self.kube, self.namespace, self.catalog, cluster_scope=False,
                             whole=WholePods(max_gets=0), cache=cache, clock=self.clock,
                             leases=None if own is None else (own,))
        verdict = outcome.verdict(snap, self.catalog, phases.answers(),
                                  allowed_foreign=self.foreign_allowed)
        self.metrics.status.judged(verdict, reach.reach(snap, self.catalog, verdict),
                                   self.clock.now().timestamp())
        return verdict

    def state_configmap(self) -> Obj | None:
        """The state ConfigMap itself (the object a verdict's Event regards), or None."""
        try:
            return self.kube.get(kinds.CONFIGMAP, self.catalog.common.state_configmap,
                                 self.namespace)
        except ClusterError:
            return None

    def read_state(self) -> tuple[State | None, bool]:
        """(the migration state, whether it could be read): an unreadable state moves
        nothing forward and removes nothing shared."""
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
        return self._listed(kinds.ENDPOINTSLICE, slice_view, self.slice_selector())

    def desired(self, snapshot: Snapshot) -> dict[str, dict[str, Any]]:
        """Alias → the body the alias phase would create from its source Service now."""
        out = {}
        for alias in guarding.aliases(snapshot, self.catalog):
            source = snapshot.services.get(alias.component.service)
            if source is not None:
                out[alias.name] = aliasing.alias_body(snapshot.namespace, self.catalog.common,
                                                      alias.component, source, None)
        return out

    def keeper(self) -> sharing.Keeper:
        """What the shared slices belong to: this guard's Lease (created with no holder when
        no replica has led yet, as under `--once`)."""
        lease = self.lease.lease
        if lease is None or not o.meta(lease).get("uid"):
            lease = self.lease.ensure()
        return sharing.Keeper.of(lease)

    # ---- the two paths -----------------------------------------------------------------------

    def on_daemonset(self, daemonset: Obj, since: float | None = None) -> list[Correction]:
        """The fast path: from one DaemonSet event (arrived at `since`), hold the aliases
        whose template lost the label."""
        comps = [c for c in self.catalog.components if c.daemonset == o.name(daemonset)]
        labels = o.template_labels(daemonset)
        if all(labels.get(c.common_label.key) == c.common_label.value for c in comps):
            return []  # not ours, or the template still carries the label: nothing to hold
        snap = Snapshot(self.namespace, daemonsets={o.name(daemonset): daemonset},
                        services=self._managed_services())
        done, _ = self.writers.apply(guarding.holds(snap, self.catalog), since=since)
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
        state, readable = self.read_state()
        if readable:
            self.foreign_allowed = state.foreign_allowed() if state else frozenset()
        switched = switched_aliases(state)
        if guarding.release_pending(snap, self.catalog, switched):
            snap = self.read()  # the release gates look at every pod: only now read them
        done, skipped = self.writers.apply(
            guarding.decide(snap, self.catalog, switched, self.desired(snap)), since=since)
        seen = tuple({"name": a.name, "source": a.component.service, "selector": a.selector,
                      "held": o.annotations_of(a.service).get(guarding.HELD_ANNOTATION),
                      "switched": a.name in switched}
                     for a in guarding.aliases(snap, self.catalog))
        if not readable:
            self._state_unreadable()
            return PassResult(seen, tuple(done), tuple(skipped))
        enabled = aliases_completed(state)
        created = self.writers.create_aliases(
            guarding.missing_aliases(snap, self.catalog, switched) if enabled else [])
        if created:
            self.metrics.repaired("alias", self.clock.monotonic() - since)
        names = sharing.shared_names(snap, self.catalog)
        slices = slicewrites.caught_up(self.read_slices(),
                                       {c.alias or "": c.service for c, _, _ in names})
        needed = (enabled and names) or sharing.shared_slices(slices, self.catalog.common)
        keeper = self.keeper() if needed else None
        shared, writes = (sharing.all_writes(snap, self.catalog, slices, keeper,
                                              enabled=enabled, shaped=self.shaped)
                          if keeper is not None else ([], []))
        for share in shared:
            for conflict in share.conflicts:
                self.note(f"Service/{share.name} and Service/{share.component.service} "
                          f"differ: {conflict}")
        decided = self.clock.monotonic()
        written, refused = self.writers.write_slices(writes,
                                                     covered=slicewrites.covered_nodes(slices))
        if writes:
            self.log(f"slice writes: {len(writes)} decided {(decided - began) * 1000:.0f} ms "
                     f"into the pass ({(began - since) * 1000:.0f} ms after its first event), "
                     f"answered {(self.clock.monotonic() - decided) * 1000:.0f} ms later")
        self._report_slices(snap, shared, written, refused, since)
        self.metrics.status.passed({s.name: len(s.endpoints) for s in shared},
                                   self.clock.now().timestamp())
        return PassResult(seen, tuple(done), tuple(skipped),
                          tuple(s.as_dict() for s in shared), tuple(written), tuple(created),
                          tuple(refused))

    def _report_slices(self, snap: Snapshot, shared: Sequence[sharing.Share],
                       written: Sequence[SliceWrite], refused: Sequence[Refusal],
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
            self.metrics.repaired("share", self.writers.last_written.get(name, since) - since)
            svc = snap.services.get(name)
            if svc is not None:
                self.recorder.record(typed(kinds.SERVICE, svc), NORMAL, "SharedEndpointSlices",
                                     "Share", f"the guard's EndpointSlices: {counts}; {why}")
        for refusal in refused:
            svc = snap.services.get(refusal.service)
            if svc is not None:
                self.recorder.record(typed(kinds.SERVICE, svc), WARNING,
                                     "EndpointSliceRefused", "Share", str(refusal))

    def _state_unreadable(self) -> None:
        self.metrics.api_error("state")
        cm = self.state_configmap()
        if cm is not None:
            self.recorder.record(typed(kinds.CONFIGMAP, cm), WARNING, "StateUnreadable",
                                 "Read", "the migration state cannot be read: the guard moves "
                                 "no alias forward and shares nothing anew until it can")
