"""One informer-style cache per run (client-go's reflector: list, watch from that version with
bookmarks, list again on 410 Expired), so a 5,000-node apply's gates read memory, not the API.
A read never sees a view older than what the tool knows: `Kube.observe` raises a reflector's
`want` to every version the tool sends or receives, and a read waits for its watch to deliver
it (FENCE_SECONDS), else lists again. Pods are printed rows (`model/printed.py`).
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
NODES_FRESH_SECONDS = 10.0  # how long a read of the Nodes' names serves (`KnownNodes`)
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
        listed = o.int_version(rv)
        with self._cond:
            # A list on the reading thread (a late fence) races the stream: changes newer than
            # the list that the stream applied meanwhile (a pod deleted) must not be undone.
            if listed >= self.rv:
                self._items = {name: item for name, item in pairs if item is not None}
                self.rv = listed
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
                # The version left the server's window: the whole kind is listed again.
                stop.wait(backoff)
                backoff = min(max(backoff * 2, RELIST_MIN_SECONDS), RELIST_MAX_SECONDS)
                self._relist(stop)
            except Exception as exc:  # any failure is retried, as client-go's reflector does
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

    def items(self) -> list[T]:
        """The items, once every version the tool has seen of one of them has arrived."""
        with self._cond:
            if self.alive and self.clock.wait_for(self._cond, lambda: self.rv >= self.want,
                                                  FENCE_SECONDS):
                return list(self._items.values())
        self.relists += 1
        self.load()  # the stream did not deliver it in time: a list is current by definition
        with self._cond:
            return list(self._items.values())


def pod_selectors(catalog: Catalog) -> list[str]:
    """One pod reflector per app label (a rollout re-lists only its own), one per common key."""
    return stacks.pod_selectors(catalog.components, per_app=True)


def whole(obj: Obj) -> Obj:
    return obj


@dataclass
class KnownNodes:
    """The Nodes' names as last read (only when a Service's slices leave out a Ready pod,
    `reads.with_nodes`), read again once a pod sits on a node that read did not judge, or after
    NODES_FRESH_SECONDS: a slice lag on known nodes then costs no request, and a node deleted
    since is seen within that time (its pods stay 40 to 60 s)."""

    names: frozenset[str] | None = None
    judged: frozenset[str] = frozenset()  # the pods' nodes when they were read
    read_at: float = float("-inf")

    def of(self, pod_nodes: frozenset[str], now: float,
           read: Callable[[], frozenset[str]]) -> frozenset[str]:
        if (self.names is None or not pod_nodes <= self.judged
                or now - self.read_at >= NODES_FRESH_SECONDS):
            self.names, self.judged, self.read_at = read(), pod_nodes, now
        return self.names


@dataclass
class Informer:
    """The run's cache of one namespace."""

    daemonsets: Reflector[Obj]
    services: Reflector[Obj]
    endpointslices: Reflector[Obj]
    pod_reflectors: tuple[Reflector[PodView], ...]
    whole: WholePods = field(default_factory=WholePods)  # doubtful pods read whole
    # access reviews answered for this run (a token's rights do not change within one)
    allowed: dict[str, bool] = field(default_factory=dict)
    nodes: KnownNodes = field(default_factory=KnownNodes)
    _unobserve: Callable[[], None] = lambda: None

    @classmethod
    def start(cls, kube: Kube, namespace: str, catalog: Catalog,
              clock: Clock | None = None) -> Informer:
        inf = cls(Reflector(kube, kinds.DAEMONSET, namespace, whole, clock=clock),
                  Reflector(kube, kinds.SERVICE, namespace, whole, clock=clock),
                  Reflector(kube, kinds.ENDPOINTSLICE, namespace, whole, clock=clock),
                  tuple(Reflector(kube, kinds.POD, namespace, PodView.of, sel, printed=True,
                                  clock=clock) for sel in pod_selectors(catalog)))
        inf._unobserve = kube.observe(inf.saw)
        try:
            for r in inf.reflectors:
                r.start()
        except BaseException:
            inf.close()  # stopping a reflector never started is a no-op
            raise
        return inf

    def saw(self, kind: Kind, obj: Obj) -> None:
        for r in self.reflectors:
            r.saw(kind, obj)

    def of(self, kind: Kind) -> Reflector[Obj]:
        """The reflector of `kind`: DaemonSets, Services or EndpointSlices (held whole)."""
        return next(r for r in (self.daemonsets, self.services, self.endpointslices)
                    if r.kind.key == kind.key)

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
        """While a rollout replaces one DaemonSet's pods, stop following what it churns."""
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


def opened(kube: Kube, namespace: str, catalog: Catalog,
           clock: Clock | None = None) -> contextlib.closing[Informer]:
    """A cache of the namespace for the duration of the block, closed on the way out."""
    return contextlib.closing(Informer.start(kube, namespace, catalog, clock))
