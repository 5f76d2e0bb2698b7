"""One informer-style cache per run: list each kind once, then follow it with a watch, so the
gates of a 5,000-node apply read memory instead of the API server (docs/performance.md, "API
load per apply").

Each `Reflector` is client-go's reflector (`tools/cache/reflector.go` `ListAndWatch`): list
with a resourceVersion, watch from that version, carry on from the last event's version when a
watch ends (server timeout, dropped connection), and list again when the server answers 410
Expired (the version left the watch window; `watchHandler` → `isExpiredError` → relist). Its
watches ask for bookmarks (kube/watching.py): a BOOKMARK moves `rv` on, so a re-watch after a
quiet stretch starts from a version the server still holds, and a silent connection ends
within `watching.idle_seconds` and is watched again from there.

What the cache holds: the namespace's DaemonSets, Services and EndpointSlices (unfiltered),
and its pods as `PodView`s, one reflector per app label of the catalog plus one per common
label key for strays (`pod_selectors`; the union is what `reads.read_snapshot` lists). Pods
are listed and watched as printed rows with their metadata (`model/printed.py`, a sixth of the
bytes); a row that does not show its pod plainly healthy is read whole before any gate sees it
(`engine/wholepods.py`, kept in `Informer.whole` for the run).

**Correctness: a gate never passes on a view older than what the tool already knows.**
`Kube.observe` shows the cache every object the tool sends or receives: write answers (the
"read your writes" rule), GETs, and events of any other watch (the waiter's wake-ups). Each
reflector whose kind, namespace and selector match such an object raises its `want` to the
object's resourceVersion, and a read of the reflector first waits until its watch has
delivered a version at least that new. So after the tool's own write the gate sees the write
(the write's answer carries its version), and the endpoint-loss gate, woken by an
EndpointSlice event, sees that event and every one before it. A reflector that does not catch
up within FENCE_SECONDS of the run's clock (a broken stream), or that is not running, is
listed again on the reading thread: a list is current by definition, and its errors reach the
run. Versions are compared as integers (etcd revisions; Kubernetes documents them as
comparable since 1.30, KEP-4988's `CompareResourceVersion`); a version that is not an integer
is never waited for.
The state ConfigMap and the lock are never read through this cache (engine/state/store.py reads
and writes them directly, with optimistic concurrency).

Rollouts (`Informer.quiet`): while one DaemonSet rolls, its pods, the EndpointSlices and the
DaemonSets change several times per node, and following them costs far more than reading them
again (29 full reads per apply at 100 nodes: docs/performance.md). Those reflectors stop for
the rollout (the waiter follows it with its own DaemonSet watch) and list again when it ends;
a read in between would list at once (`items` of a stopped reflector), never use the old view.

Lifetime: `opened(...)` starts the cache for one run; `commands` puts it in the run
(`loop.Run.cache`) and every read that should use it is handed it (`reads`' `cache=`):
no registry, nothing found by connection. On exit every watch stream is shut down (its
socket, so a blocked read returns) and every thread joined: nothing outlives the run.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from migrator.engine.clock import Clock, SystemClock
from migrator.engine.wholepods import WholePods
from migrator.errors import ClusterError, WatchExpired
from migrator.model import kinds, stacks
from migrator.model import objects as o
from migrator.model.kinds import Kind
from migrator.model.selectors import Selector, parse
from migrator.model.snapshot import PodView
from migrator.model.stacks import Catalog

if TYPE_CHECKING:
    from migrator.kube.client import Kube
    from migrator.kube.watching import Events

Obj = dict[str, Any]
T = TypeVar("T")

FENCE_SECONDS = 10.0  # seconds a read waits for a watch to catch up before re-listing
WATCH_SECONDS = 300  # timeoutSeconds of each watch request (the server ends it; we re-watch)
RETRY_SECONDS = 0.5  # pause after a failed watch request before the next
RELIST_MIN_SECONDS, RELIST_MAX_SECONDS = 0.05, 2.0  # pause before a relist after a repeated 410


class Reflector(Generic[T]):
    """One kind of one namespace (one label selector), listed and then watched: name → item."""

    def __init__(self, kube: Kube, kind: Kind, namespace: str,
                 keep: Callable[[Obj], T | None], label_selector: str | None = None, *,
                 printed: bool = False, changed: Callable[[str, Obj], None] | None = None,
                 clock: Clock | None = None) -> None:
        self.kube, self.kind, self.namespace = kube, kind, namespace
        self.clock: Clock = clock or SystemClock()  # the fence's time
        self.label_selector = label_selector
        self.printed = printed  # list and watch printed rows (model/printed.py), not objects
        self._selector: Selector = parse(label_selector)
        self._keep = keep  # None: not wanted (dropped, and removed if it was held)
        self._changed = changed  # told of every event applied (a loop's wake-up), off the lock
        self._items: dict[str, T] = {}
        self.rv = 0  # every event up to this version is in `_items`
        self.want = 0  # the newest version of a matching object the tool has seen
        self.relists = 0  # lists after the first (410 Expired, a late fence, a quiet period)
        self.failures = 0  # watch requests or streams that failed and were retried
        self.last_error = ""
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._stream: Events | None = None
        self._thread: threading.Thread | None = None

    # ---- the loop --------------------------------------------------------------------------

    def start(self) -> None:
        """List now (so a refused read fails the caller), then watch on a thread."""
        self._stop = threading.Event()
        self.load()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), daemon=True,
                                        name=f"informer-{self.kind.plural}")
        self._thread.start()

    def load(self) -> None:
        pairs, rv = self.kube.collect(self.kind, self.namespace,
                                      label_selector=self.label_selector,
                                      keep=lambda obj: (o.name(obj), self._keep(obj)),
                                      printed=self.printed)
        with self._cond:
            self._items = {name: item for name, item in pairs if item is not None}
            self.rv = max(self.rv, o.int_version(rv))
            self._cond.notify_all()

    def _run(self, stop: threading.Event) -> None:
        backoff = 0.0  # grows while watches keep expiring at once (client-go's backoff)
        while not stop.is_set():
            try:
                stream = self.kube.watch(self.kind, self.namespace,
                                         resource_version=str(self.rv),
                                         label_selector=self.label_selector,
                                         timeout_seconds=WATCH_SECONDS, printed=self.printed,
                                         bookmarked=self._bookmarked)
                with self._cond:
                    self._stream = stream
                if stop.is_set():
                    stream.stop()
                for etype, obj in stream:
                    self._apply(etype, obj)
                    backoff = 0.0
            except WatchExpired:
                # The version left the server's window: what happened since is lost, so the
                # whole kind is listed again (a view as of the list is still a valid view).
                stop.wait(backoff)
                backoff = min(max(backoff * 2, RELIST_MIN_SECONDS), RELIST_MAX_SECONDS)
                self._relist(stop)
            except Exception as exc:  # a watch that fails in any way is retried
                # (client-go's reflector logs and retries: its goroutine never ends on an error)
                self.failures += 1
                self.last_error = str(exc) or type(exc).__name__
                stop.wait(RETRY_SECONDS)
            finally:
                with self._cond:
                    self._stream = None

    def _relist(self, stop: threading.Event) -> None:
        if stop.is_set():
            return
        self.relists += 1
        try:
            self.load()
        except ClusterError as exc:
            self.failures += 1
            self.last_error = str(exc)
            stop.wait(RETRY_SECONDS)

    def _apply(self, etype: str, obj: Obj) -> None:
        name = o.name(obj)
        rv = o.int_version(o.meta(obj).get("resourceVersion"))
        item = None if etype == "DELETED" else self._keep(obj)
        with self._cond:
            if rv and rv <= self.rv:
                return  # a list on the reading thread already holds this change (or newer)
            if item is None:
                self._items.pop(name, None)
            else:
                self._items[name] = item
            self.rv = max(self.rv, rv)
            self._cond.notify_all()
        if self._changed is not None:
            self._changed(etype, obj)

    def _bookmarked(self, version: str) -> None:
        """Every event up to `version` has been delivered: the cache is current up to it."""
        with self._cond:
            self.rv = max(self.rv, o.int_version(version))
            self._cond.notify_all()

    def saw(self, kind: Kind, obj: Obj) -> None:
        """The tool saw this object (`Kube.observe`): if it is one of ours, wait for it."""
        meta = o.meta(obj)
        if (kind.key != self.kind.key or meta.get("namespace") != self.namespace
                or not self._selector.matches(meta.get("labels"))):
            return
        with self._cond:
            self.want = max(self.want, o.int_version(meta.get("resourceVersion")))

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            if self._stream is not None:
                self._stream.stop()
        if self._thread is not None:
            self._thread.join(timeout=WATCH_SECONDS)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- reads ----------------------------------------------------------------------------

    def items(self, fence: float = FENCE_SECONDS) -> list[T]:
        """The items, once every version the tool has seen of one of them has arrived."""
        with self._cond:
            if self.alive and self.clock.wait_for(self._cond, lambda: self.rv >= self.want,
                                                  fence):
                return list(self._items.values())
        self.relists += 1
        self.load()  # the stream did not deliver it in time: a list is current by definition
        with self._cond:
            return list(self._items.values())


def pod_selectors(catalog: Catalog) -> list[str]:
    """One pod reflector per app label of the catalog (a rollout re-lists only its own), and
    one per common label key for the strays (`stacks.pod_selectors`)."""
    return stacks.pod_selectors(catalog.components, per_app=True)


def pod_view(pod: Obj) -> PodView:
    """What a pod cache keeps of a pod (its printed row, `model/printed.py`)."""
    return PodView.of(pod)


def whole(obj: Obj) -> Obj:
    return obj


@dataclass
class Informer:
    """The run's cache of one namespace (see the module docstring)."""

    kube: Kube
    namespace: str
    daemonsets: Reflector[Obj]
    services: Reflector[Obj]
    endpointslices: Reflector[Obj]
    pod_reflectors: tuple[Reflector[PodView], ...]
    whole: WholePods = field(default_factory=WholePods)  # doubtful pods read whole
    # access reviews answered for this run (a token's rights do not change within one)
    allowed: dict[str, bool] = field(default_factory=dict)
    _unobserve: Callable[[], None] = lambda: None

    @classmethod
    def start(cls, kube: Kube, namespace: str, catalog: Catalog,
              clock: Clock | None = None) -> Informer:
        inf = cls(kube, namespace,
                  Reflector(kube, kinds.DAEMONSET, namespace, whole, clock=clock),
                  Reflector(kube, kinds.SERVICE, namespace, whole, clock=clock),
                  Reflector(kube, kinds.ENDPOINTSLICE, namespace, whole, clock=clock),
                  tuple(Reflector(kube, kinds.POD, namespace, pod_view, sel, printed=True,
                                  clock=clock)
                        for sel in pod_selectors(catalog)))
        inf._unobserve = kube.observe(inf._saw)
        started: list[Reflector[Any]] = []
        try:
            for r in inf.reflectors:
                r.start()
                started.append(r)
        except BaseException:
            inf._unobserve()
            for r in started:
                r.stop()
            raise
        return inf

    def _saw(self, kind: Kind, obj: Obj) -> None:
        for r in self.reflectors:
            r.saw(kind, obj)

    @property
    def reflectors(self) -> tuple[Reflector[Any], ...]:
        return (self.daemonsets, self.services, self.endpointslices, *self.pod_reflectors)

    @property
    def relists(self) -> int:
        return sum(r.relists for r in self.reflectors)

    def pods(self) -> list[PodView]:
        """Every cached pod once (a pod in two reflectors' selectors counts once)."""
        seen: dict[str, PodView] = {}
        for r in self.pod_reflectors:
            seen.update((p.uid, p) for p in r.items())
        return list(seen.values())

    @contextlib.contextmanager
    def quiet(self, app_label: str) -> Iterator[None]:
        """While a rollout replaces one DaemonSet's pods, stop following what it churns: those
        pods (five full pod bodies per replaced pod), the EndpointSlices (one whole slice per
        readiness change) and the DaemonSets (a status per pod). The waiter follows the rollout
        itself; afterwards they are listed again — one read of what changed, instead of every
        intermediate state. Nothing reads them in between (`items` would list them anyway)."""
        rolled = [r for r in self.pod_reflectors if r.label_selector == f"app={app_label}"]
        churned: list[Reflector[Any]] = [self.daemonsets, self.endpointslices, *rolled]
        for r in churned:
            r.stop()
        try:
            yield
        finally:
            for r in churned:
                r.relists += 1
                r.start()

    def close(self) -> None:
        self._unobserve()
        for r in self.reflectors:
            r.stop()


@contextlib.contextmanager
def opened(kube: Kube, namespace: str, catalog: Catalog,
           clock: Clock | None = None) -> Iterator[Informer]:
    """A cache of the namespace for the duration of the block, closed on the way out."""
    inf = Informer.start(kube, namespace, catalog, clock)
    try:
        yield inf
    finally:
        inf.close()
