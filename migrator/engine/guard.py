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
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migrator import phases
from migrator.engine.clock import Clock, SystemClock
from migrator.engine.informer import Reflector
from migrator.engine.leader import LeaseLock
from migrator.engine.observe import read_pods, read_snapshot
from migrator.engine.state import ConfigMapStateStore, State
from migrator.engine.wholepods import WholePods
from migrator.errors import (
    APIConflict,
    APIError,
    APIInvalid,
    APINotFound,
    ClusterError,
    WatchExpired,
)
from migrator.model import guarding, kinds, outcome, sharing
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
DEFAULT_LEASE = "dcgm-migrate-guard"


@dataclass(frozen=True)
class GuardSettings:
    lease_name: str = DEFAULT_LEASE
    identity: str = "dcgm-migrate-guard"
    lease_seconds: int = 15  # client-go's default LeaseDuration
    retry_seconds: float = 2.0  # client-go's default RetryPeriod: renew / try to acquire
    resync_seconds: float = 30.0  # a full pass at least this often
    min_pass_seconds: float = 1.0  # full passes triggered by events at most this often
    watch_seconds: int = 30  # server-side timeout of each watch request
    # The verdict (a whole read of the namespace) while leading, logged when it changes: the
    # first line an SRE sees when a stable name stops reaching nodes. At most this often, and
    # only when something it reads changed since the last one (`verdict_due`)...
    verdict_seconds: float = 300.0
    # ... and at least this often regardless (what no watched event shows: a pod relabelled
    # by hand whose Service the tool does not follow).
    verdict_idle_seconds: float = 3600.0


def verdict_due(settings: GuardSettings, now: float, last: float | None,
                changed: bool) -> bool:
    """Is a verdict due at `now`, the last one taken at `last` (None: never)? Its inputs —
    the DaemonSets (their status counts every pod's readiness), the Services and the stable
    names' EndpointSlices — reach the guard as watch events, so a quiet cluster is judged
    once per `verdict_idle_seconds` instead of once per `verdict_seconds`: the whole read is
    nearly all of the guard's steady-state API bytes (docs/performance.md)."""
    if last is None:
        return True
    elapsed = now - last
    return elapsed >= settings.verdict_idle_seconds or (changed and
                                                         elapsed >= settings.verdict_seconds)


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
    if record is None or record.status != "completed":
        return {}
    changes = ((s.name, s.selector_change(s.name)) for s in record.done_steps())
    return {name: dict(change[1]) for name, change in changes if change is not None}


def aliases_completed(state: State | None) -> bool:
    """Has the phase that creates the aliases completed (and not been rolled back)? Only then
    may the guard create what that phase would: a shared slice, an alias again."""
    record = state.phase(alias_phase.NUMBER) if state is not None else None
    return record is not None and record.status == "completed"


def _slice_view(obj: Obj) -> Obj:
    """What the guard keeps of an EndpointSlice (no managedFields: a sixth of the bytes)."""
    meta = {k: v for k, v in o.meta(obj).items() if k != "managedFields"}
    return {**{k: v for k, v in obj.items() if k != "metadata"}, "metadata": meta}


class Guard:
    """The loop and its I/O; decisions are `model.guarding`'s."""

    def __init__(self, kube: Kube, namespace: str, catalog: Catalog,
                 settings: GuardSettings = GuardSettings(), *, log: Log = lambda _: None,
                 clock: Clock | None = None, lease: LeaseLock | None = None) -> None:
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
        self.passes = 0
        self.written: list[Correction] = []  # every correction written, oldest first
        self.slice_writes: list[SliceWrite] = []  # every shared-slice write, oldest first
        self._noted: set[str] = set()  # notes already logged once
        self.slices: Reflector[Obj] | None = None  # the loop's EndpointSlice informer

    # ---- reads -------------------------------------------------------------------------------

    def _managed_services(self) -> dict[str, Obj]:
        mb = self.catalog.common.managed_by
        items = self.kube.list(kinds.SERVICE, self.namespace,
                               label_selector=f"{mb.key}={mb.value}").items
        return {o.name(s): s for s in items}

    def read(self, *, pods: bool = True) -> Snapshot:
        """What a full pass needs, from this namespace only (the guard's Role is namespaced):
        the catalog's DaemonSets, every Service, and (`pods`) the pods of those DaemonSets.

        The pods come as printed rows (`model/printed.py`) with no EndpointSlice to contradict
        them (the guard's Role reads none), so the pods of a node that stopped reporting look
        Ready here while their containers do. That cannot move an alias forward early: the
        release gates pass only once every live pod carries the common label, and then the
        same pods stand on both sides of the superset check, Ready or not."""
        wanted = {c.daemonset for c in self.catalog.components}
        daemonsets = {o.name(d): d for d in self.kube.list(kinds.DAEMONSET, self.namespace).items
                      if o.name(d) in wanted}
        services = {o.name(s): s for s in self.kube.list(kinds.SERVICE, self.namespace).items}
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
        return outcome.verdict(snap, self.catalog)

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

    def apply(self, corrections: Sequence[Correction]) -> tuple[list[Correction], list[str]]:
        done, skipped = [], []
        for c in corrections:
            try:
                self.kube.patch(kinds.SERVICE, c.service, self.namespace, c.patch(),
                                patch_type="json")
            except APIInvalid:  # a `test` failed: changed meanwhile (or our own write landed)
                live = self.kube.get(kinds.SERVICE, c.service, self.namespace)
                if not c.satisfied(live):
                    skipped.append(f"Service/{c.service}: changed meanwhile; {c.action} "
                                   "re-decided on the next pass")
                    continue
            except APINotFound:
                skipped.append(f"Service/{c.service}: gone")
                continue
            done.append(c)
            self.written.append(c)
            self.log(f"{c.action} Service/{c.service}: {c.reason}")
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

    def write_slices(self, writes: Sequence[SliceWrite]) -> tuple[list[SliceWrite], list[str]]:
        """Create, update (at the version decided on) or delete shared slices: (written,
        refused). A slice changed meanwhile is re-decided on the next pass; one the API server
        refuses (invalid, forbidden) is reported and the rest are still written."""
        done, refused = [], []
        for w in writes:
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
                self.log(f"EndpointSlice/{w.name}: changed meanwhile ({exc.reason}); "
                         "re-decided on the next pass")
                continue
            except APIError as exc:
                refused.append(f"{w.action} EndpointSlice/{w.name} for Service/{w.service}: "
                               f"{exc}")
                self.note(f"{refused[-1]}; the other slices are written, this one is tried "
                          "again on every pass")
                continue
            done.append(w)
            self.slice_writes.append(w)
            self.log(f"{w.action} EndpointSlice/{w.name} for Service/{w.service}: {w.reason}")
        return done, refused

    def create_aliases(self, bodies: Sequence[Obj]) -> list[str]:
        done = []
        for body in bodies:
            name = o.name(body)
            try:
                self.kube.create(body)
            except APIConflict:
                self.log(f"Service/{name}: taken meanwhile; re-decided on the next pass")
                continue
            done.append(name)
            self.log(f"create Service/{name}: the GPUCluster stack needs the stable name and "
                     "no Service holds it any more")
        return done

    def note(self, message: str) -> None:
        """Log a standing condition once, not on every pass."""
        if message not in self._noted:
            self._noted.add(message)
            self.log(message)

    # ---- the two paths -----------------------------------------------------------------------

    def on_daemonset(self, daemonset: Obj) -> list[Correction]:
        """The fast path: from one DaemonSet event, hold the aliases whose template lost the
        label. One list and at most one patch per alias; no snapshot."""
        comps = [c for c in self.catalog.components if c.daemonset == o.name(daemonset)]
        labels = o.template_labels(daemonset)
        if all(labels.get(c.common_label.key) == c.common_label.value for c in comps):
            return []  # not ours, or the template still carries the label: nothing to hold
        snap = Snapshot(self.namespace, daemonsets={o.name(daemonset): daemonset},
                        services=self._managed_services())
        done, _ = self.apply(guarding.holds(snap, self.catalog))
        return done

    def reconcile(self) -> PassResult:
        """One full pass: read, decide (hold, release, re-sync), write."""
        self.passes += 1
        snap = self.read(pods=False)
        state, readable = self._read_state()
        switched = switched_aliases(state)
        if guarding.release_pending(snap, self.catalog, switched):
            snap = self.read()  # the release gates look at every pod: only now read them
        desired = self.desired(snap)
        done, skipped = self.apply(guarding.decide(snap, self.catalog, switched, desired))
        seen = tuple({"name": a.name, "source": a.component.service, "selector": a.selector,
                      "held": o.annotations_of(a.service).get(guarding.HELD_ANNOTATION),
                      "switched": a.name in switched}
                     for a in guarding.aliases(snap, self.catalog))
        if not readable:
            return PassResult(seen, tuple(done), tuple(skipped))
        enabled = aliases_completed(state)
        created = self.create_aliases(guarding.missing_aliases(snap, self.catalog, switched)
                                      if enabled else [])
        slices = self.read_slices()
        needed = ((enabled and sharing.shared_names(snap, self.catalog))
                  or sharing.shared_slices(slices, self.catalog.common))
        keeper = self.keeper() if needed else None
        shared, writes = (sharing.all_writes(snap, self.catalog, slices, keeper, enabled=enabled)
                          if keeper is not None else ([], []))
        for share in shared:
            for conflict in share.conflicts:
                self.note(f"Service/{share.name} and Service/{share.component.service} "
                          f"differ: {conflict}")
        written, refused = self.write_slices(writes)
        return PassResult(seen, tuple(done), tuple(skipped),
                          tuple(s.as_dict() for s in shared), tuple(written), tuple(created),
                          tuple(refused))

    # ---- the loop ----------------------------------------------------------------------------

    def _start_slices(self, stop: threading.Event) -> None:
        """Start the EndpointSlice informer, retrying while the API refuses (a pass lists
        them directly meanwhile)."""
        assert self.slices is not None
        while not stop.is_set():
            try:
                self.slices.start()
                return
            except (APIError, ClusterError) as exc:
                self.log(f"watch of endpointslices failed ({exc}); retrying")
                stop.wait(self.settings.retry_seconds)

    def _follow(self, kind: Kind, stop: threading.Event,
                events: queue.Queue[tuple[str, Obj]]) -> None:
        """List then watch `kind` in the namespace until `stop`, feeding `events`."""
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    version = self.kube.list(kind, self.namespace).resource_version
                    events.put(("RESYNC", {"kind": kind.kind}))
                for etype, obj in self.kube.watch(kind, self.namespace,
                                                  resource_version=version,
                                                  timeout_seconds=self.settings.watch_seconds):
                    version = str(o.meta(obj).get("resourceVersion") or version)
                    events.put((etype, obj))
                    if stop.is_set():
                        return
            except WatchExpired:
                version = ""
            except Exception as exc:  # a watch that fails in any way is retried
                self.log(f"watch of {kind.plural} failed ({exc or type(exc).__name__}); "
                         "retrying")
                version = ""
                stop.wait(self.settings.retry_seconds)

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set: lead (or wait to), react to events, resync; on the way out
        give the Lease up so a standby takes over at once."""
        events: queue.Queue[tuple[str, Obj]] = queue.Queue()
        watchers = [threading.Thread(target=self._follow, args=(kind, stop, events),
                                     daemon=True, name=f"guard-watch-{kind.plural}")
                    for kind in (kinds.DAEMONSET, kinds.SERVICE)]
        for t in watchers:
            t.start()
        self.slices = Reflector(self.kube, kinds.ENDPOINTSLICE, self.namespace, _slice_view,
                                self.slice_selector(),
                                changed=lambda etype, obj: events.put((etype, obj)),
                                clock=self.clock)
        loop = _Loop(self)
        try:
            self._start_slices(stop)
            while not stop.is_set():
                loop.tick(events, stop)
        finally:
            stop.set()
            self.slices.stop()
            if self.lease.release():
                self.log(f"released Lease/{self.settings.lease_name}")


@dataclass
class _Loop:
    """The run loop's clocks: when to renew the Lease, when the next full pass is due."""

    guard: Guard
    next_lease: float = 0.0
    next_pass: float = 0.0
    last_judged: float | None = None  # when the last verdict was taken
    changed: bool = True  # an event (or a relist) since the last verdict
    last_verdict: str = ""
    last_pass: float = float("-inf")
    dirty: bool = True
    leading: bool = False
    pending: list[tuple[str, Obj]] = field(default_factory=list)

    def judge(self) -> None:
        """Check the verdict and log it when it changed since the last check."""
        g = self.guard
        self.last_judged, self.changed = g.clock.monotonic(), False
        try:
            summary = g.verdict().summary()
        except (APIError, ClusterError) as exc:
            g.log(f"verdict unreadable ({exc}); checked again later")
            self.changed = True  # not judged: due again after verdict_seconds
            return
        if summary != self.last_verdict:
            self.last_verdict = summary
            g.log(f"verdict: {summary}")

    def tick(self, events: queue.Queue[tuple[str, Obj]], stop: threading.Event) -> None:
        g, s = self.guard, self.guard.settings
        now = g.clock.monotonic()
        if now >= self.next_lease:
            was = self.leading
            self.leading = g.lease.try_acquire_or_renew()
            self.next_lease = now + s.retry_seconds
            if self.leading and not was:
                g.log(f"leading: holds Lease/{s.lease_name} as {s.identity}")
                self.dirty = self.changed = True  # a standby followed nothing
            elif was and not self.leading:
                g.log(f"lost Lease/{s.lease_name} (holder {g.lease.holder or 'none'}); "
                      "standing by")
        if self.leading and (now >= self.next_pass or
                             (self.dirty and now - self.last_pass >= s.min_pass_seconds)):
            try:
                g.reconcile()
            except (APIError, ClusterError) as exc:
                g.log(f"pass failed ({exc}); retrying")
            self.last_pass = g.clock.monotonic()
            self.next_pass = self.last_pass + s.resync_seconds
            self.dirty = False
        if self.leading and verdict_due(s, g.clock.monotonic(), self.last_judged, self.changed):
            self.judge()
        wake = min(self.next_lease, self.next_pass,
                   self.last_pass + s.min_pass_seconds if self.dirty else self.next_pass)
        timeout = max(0.0, min(wake - g.clock.monotonic(), s.retry_seconds))
        batch: list[tuple[str, Obj]] = []
        try:
            batch.append(events.get(timeout=timeout))
            while True:
                batch.append(events.get_nowait())
        except queue.Empty:
            pass
        self.changed = self.changed or bool(batch)
        if stop.is_set() or not batch or not self.leading:
            return
        latest: dict[str, Obj] = {}
        for etype, obj in batch:
            if etype in ("ADDED", "MODIFIED") and obj.get("kind") == kinds.DAEMONSET.kind:
                latest[o.name(obj)] = obj
        for ds in latest.values():
            try:
                g.on_daemonset(ds)
            except (APIError, ClusterError) as exc:
                g.log(f"hold check of DaemonSet/{o.name(ds)} failed ({exc})")
        self.dirty = True

