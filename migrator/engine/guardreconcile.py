"""The guard's reconciler: read, decide (pure: `model/guarding.py`, `model/sharing.py`), hand to
the writers. `on_daemonset` is the fast path (hold where one DaemonSet's template lost the common
label), `reconcile` a full pass. Reads come from the loop's informers while it runs, else from
one list each (`guard --once`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from migrator import phases
from migrator.engine.clock import Clock, SystemClock
from migrator.engine.events import NORMAL, WARNING, Recorder, typed
from migrator.engine.guardwrites import Refusal, Writers, caught_up, covered_nodes
from migrator.engine.informer import Informer
from migrator.engine.leader import LeaseLock
from migrator.engine.reads import Reader, read_snapshot
from migrator.engine.serving import GuardMetrics
from migrator.engine.state import ConfigMapStateStore, PhaseRecord, State, holds, unfinished
from migrator.engine.wholepods import WholePods
from migrator.errors import ClusterError
from migrator.model import aliasing, guarding, kinds, outcome, reach, sharing
from migrator.model import objects as o
from migrator.model.guarding import Correction
from migrator.model.kinds import Kind
from migrator.model.outcome import Verdict
from migrator.model.sharing import SliceWrite
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
Log = Callable[[str], None]


@dataclass(frozen=True)
class GuardSettings:
    """The guard's knobs; the election's are client-go's defaults (15 s, 2 s)."""

    lease_name: str = "dcgm-migrate-guard"
    identity: str = "dcgm-migrate-guard"
    lease_seconds: int = 15
    retry_seconds: float = 2.0  # renew / try to acquire this often
    resync_seconds: float = 30.0  # a full pass at least this often
    min_pass_seconds: float = 1.0  # full passes triggered by events at most this often
    verdict_debounce_seconds: float = 1.0  # the cached verdict once changes are this quiet
    verdict_seconds: float = 300.0  # the whole read at most this often, after a change...
    verdict_idle_seconds: float = 3600.0  # ... and at least this often regardless
    stall_seconds: float = 300.0  # liveness: the loop and each watch progress this often
    takeover_seconds: float = 10.0  # no `min_pass_seconds` this long after a name changed hands


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


def _completed(state: State | None, phase: int) -> PhaseRecord | None:
    record = state.phase(phase) if state is not None else None
    return record if record is not None and holds(record.status) else None


def _sharing(state: State | None) -> sharing.Sharing:
    """What the alias phase's record allows the guard to share: a phase `apply` is in, or
    stopped in (killed, a gate failed), keeps what it shared before it completes again."""
    number = phases.alias_phase().NUMBER
    if _completed(state, number) is not None:
        return sharing.Sharing.ON
    operation, _, pending = unfinished(state) if state is not None else (None, None, [])
    applying = operation == "apply" and any(r.number == number and r.status.unfinished
                                            for r in pending)
    return sharing.Sharing.KEEP if applying else sharing.Sharing.OFF


def switched_aliases(state: State | None) -> dict[str, dict[str, str]]:
    """Alias → the selector phase 3 recorded for it, while that phase is completed."""
    record = _completed(state, phases.selector_phase().NUMBER)
    changes = ((s.name, s.selector_change(s.name)) for s in record.done_steps()) if record else ()
    return {name: dict(change[1]) for name, change in changes if change is not None}


def slice_view(obj: Obj) -> Obj:
    """What the guard keeps of an EndpointSlice (no managedFields: a sixth of the bytes)."""
    meta = {k: v for k, v in o.meta(obj).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "metadata"}, "metadata": meta}


class Reconciler:
    """Reads, decisions handed to the writers, and what a pass reports."""

    def __init__(self, kube: Kube, namespace: str, catalog: Catalog,
                 settings: GuardSettings | None = None, *, log: Log = lambda _: None,
                 clock: Clock | None = None) -> None:
        self.kube, self.namespace, self.catalog, self.log = kube, namespace, catalog, log
        self.settings = settings = settings or GuardSettings()
        self.clock: Clock = clock or SystemClock()  # the loop's, the election's, the caches'
        mb = catalog.common.managed_by
        self.lease = LeaseLock(kube, namespace, settings.lease_name, settings.identity,
                               lease_seconds=settings.lease_seconds, clock=self.clock,
                               labels={mb.key: mb.value})
        self.metrics = GuardMetrics()
        self._noted: set[str] = set()
        self.recorder = Recorder(kube, settings.identity, self.clock, log=self.note,
                                 counted=lambda result: self.metrics.events.labels(result).inc())
        # Unfenced until `run`: `guard --once` writes without the Lease (guarded patches).
        self.writers = Writers(kube, namespace, self.clock, self.metrics, self.recorder,
                               log=log, note=self.note)
        self.store = ConfigMapStateStore(kube, namespace, catalog.common, self.clock)
        self.passes = 0  # passes completed (a pass that raised is not one)
        self.shaped = sharing.ShapedEndpoints()  # each shared slice version shaped once
        # Set by the runner while it runs: the loop's and the verdict's cache (None: whole reads).
        self.informer: Informer | None = None
        # The Services switched with --allow-foreign-pods, as the last state read said.
        self.foreign_allowed: frozenset[str] = frozenset()

    def note(self, message: str) -> None:
        """Log a standing condition once, not on every pass."""
        if message not in self._noted:
            self._noted.add(message)
            self.log(message)

    def _listed(self, kind: Kind, view: Callable[[Obj], Obj] | None = None,
                selector: str | None = None) -> list[Obj]:
        """Every `kind` of the namespace, as `view` keeps it: the loop's cache, else one list."""
        cache = self.informer.of(kind) if self.informer is not None else None
        if cache is not None and cache.alive:
            return cache.items()
        items = self.kube.list(kind, self.namespace, label_selector=selector).items
        return items if view is None else [view(i) for i in items]

    def read(self, *, pods: bool = True) -> Snapshot:
        """The catalog's DaemonSets, every Service and (`pods`) the DaemonSets' pods (printed)."""
        wanted = {c.daemonset for c in self.catalog.components}
        daemonsets = {o.name(d): d for d in self._listed(kinds.DAEMONSET)
                      if o.name(d) in wanted}
        services = {o.name(s): s for s in self._listed(kinds.SERVICE)}
        comps = [c for c in self.catalog.components if c.daemonset in daemonsets]
        views = (Reader(self.kube, self.namespace, whole=WholePods(max_gets=0)).pods(comps, {})
                 if pods else ())
        return Snapshot(self.namespace, daemonsets=daemonsets, services=services, pods=views)

    def verdict(self, *, cached: bool = False) -> Verdict:
        """The verdict from what the namespaced Role may read: one whole read, or (`cached`)
        the loop's caches with this guard's own Lease standing for the Leases."""
        cache = self.informer if cached else None
        own = self.lease.lease if cache is not None else None
        snap = read_snapshot(self.kube, self.namespace, self.catalog, cluster_scope=False,
                             whole=WholePods(max_gets=0), cache=cache, clock=self.clock,
                             leases=None if own is None else (own,))
        verdict = outcome.verdict(snap, self.catalog, phases.answers(),
                                  allowed_foreign=self.foreign_allowed)
        self.metrics.status.judged(verdict, reach.reach(snap, self.catalog, verdict),
                                   self.clock.now().timestamp())
        return verdict

    def record_on_state(self, type_: str, reason: str, action: str, note: str) -> None:
        """An Event regarding the state ConfigMap (none if it cannot be read)."""
        try:
            cm = self.kube.get(kinds.CONFIGMAP, self.catalog.common.state_configmap,
                               self.namespace)
        except ClusterError:
            return
        if cm is not None:
            self.recorder.record(typed(kinds.CONFIGMAP, cm), type_, reason, action, note)

    def slice_selector(self) -> str:
        """The EndpointSlices sharing needs: those of the stable names and their sources."""
        names = sorted({n for c in self.catalog.components if c.alias
                        for n in (c.alias, c.service)})
        return f"{o.SERVICE_NAME_LABEL} in ({','.join(names)})"

    def desired(self, snapshot: Snapshot) -> dict[str, dict[str, Any]]:
        """Alias → the body the alias phase would create from its source Service now."""
        return {a.name: aliasing.alias_body(snapshot.namespace, self.catalog.common, a.component,
                                            source, None)
                for a in guarding.aliases(snapshot, self.catalog)
                if (source := snapshot.services.get(a.component.service)) is not None}

    def keeper(self) -> sharing.Keeper:
        """What the shared slices belong to: this guard's Lease (created if none yet)."""
        lease = self.lease.lease
        if lease is None or not o.meta(lease).get("uid"):
            lease = self.lease.ensure()
        return sharing.Keeper.of(lease)

    def on_daemonset(self, daemonset: Obj, since: float | None = None) -> list[Correction]:
        """The fast path: hold the aliases whose DaemonSet's template lost the label."""
        comps = [c for c in self.catalog.components if c.daemonset == o.name(daemonset)]
        labels = o.template_labels(daemonset)
        if all(labels.get(c.common_label.key) == c.common_label.value for c in comps):
            return []  # not ours, or the template still carries the label: nothing to hold
        mb = self.catalog.common.managed_by
        snap = Snapshot(self.namespace, daemonsets={o.name(daemonset): daemonset},
                        services={o.name(s): s for s in self._listed(kinds.SERVICE)
                                  if o.labels(s).get(mb.key) == mb.value})
        done, _ = self.writers.apply(guarding.holds(snap, self.catalog), since=since)
        return done

    def reconcile(self, since: float | None = None) -> PassResult:
        """One full pass. `since`: when the oldest event it answers arrived (monotonic)."""
        since = self.clock.monotonic() if since is None else since
        began = self.clock.monotonic()
        snap = self.read(pods=False)
        try:
            stored, readable = self.store.load(), True
        except ClusterError as exc:
            self.log(f"state unreadable, nothing is moved forward or shared anew: {exc}")
            stored, readable = None, False
        document = stored.document if stored else None
        state = State.from_document(document, self.clock) if document else None
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
            self.metrics.api_errors.labels("state").inc()
            self.record_on_state(WARNING, "StateUnreadable", "Read", "the migration state "
                                 "cannot be read: the guard moves no alias forward and shares "
                                 "nothing anew until it can")
            self.passes += 1
            return PassResult(seen, tuple(done), tuple(skipped))
        # Only once the alias phase completed may the guard create what it would.
        mode = _sharing(state)
        enabled = mode is sharing.Sharing.ON
        created = self.writers.create_aliases(
            guarding.missing_aliases(snap, self.catalog, switched) if enabled else [])
        if created:
            self.metrics.repaired("alias", self.clock.monotonic() - since)
        names = sharing.shared_names(snap, self.catalog)
        slices = caught_up(self._listed(kinds.ENDPOINTSLICE, slice_view, self.slice_selector()),
                           {c.alias or "": c.service for c, _, _ in names})
        needed = (enabled and names) or sharing.shared_slices(slices, self.catalog.common)
        keeper = self.keeper() if needed else None
        shared, writes = (sharing.all_writes(snap, self.catalog, slices, keeper,
                                              mode=mode, shaped=self.shaped)
                          if keeper is not None else ([], []))
        for share in shared:
            for conflict in share.conflicts:
                self.note(f"Service/{share.name} and Service/{share.component.service} "
                          f"differ: {conflict}")
        decided = self.clock.monotonic()
        written, refused = self.writers.write_slices(writes, covered=covered_nodes(slices))
        if writes:
            self.log(f"slice writes: {len(writes)} decided {(decided - began) * 1000:.0f} ms "
                     f"into the pass ({(began - since) * 1000:.0f} ms after its first event), "
                     f"answered {(self.clock.monotonic() - decided) * 1000:.0f} ms later")
        self._report_slices(snap, shared, written, refused, since)
        self.metrics.status.passed({s.name: len(s.endpoints) for s in shared},
                                   self.clock.now().timestamp())
        self.passes += 1
        return PassResult(seen, tuple(done), tuple(skipped),
                          tuple(s.as_dict() for s in shared), tuple(written), tuple(created),
                          tuple(refused))

    def _report_slices(self, snap: Snapshot, shared: Sequence[sharing.Share],
                       written: Sequence[SliceWrite], refused: Sequence[Refusal],
                       since: float) -> None:
        """An Event per stable Service whose slices were written or refused; repair times."""
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
