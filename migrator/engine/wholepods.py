"""Doubtful printed pods read whole, so that no gate judges a pod by its printed row alone
unless that row shows it plainly healthy (`model/printed.py` says why a row is not enough).

Pods are listed as printed rows (a sixth of the bytes). Before a Snapshot is built, every
printed pod that is not plainly healthy, or that an EndpointSlice newer than it contradicts,
is replaced by its whole view. A few such pods (up to MAX_GETS: a node that stopped reporting,
the one pod `--roll-on-delete` is waiting for) are read by name; more than that, one
paginated list of the whole pods of each label selector that holds one, so the requests stay
bounded whatever the node count. The whole views are kept by uid, and a whole view at least
as new as the row stands for it, so a pod that stays sick (a node that stopped reporting, a pod
that cannot start) is read whole once per change of it, not once per gate check of the run.
A doubtful pod that the whole read no longer finds was deleted since: it is left out, as the
whole read would leave it out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from migrator.model import kinds
from migrator.model.selectors import parse
from migrator.model.snapshot import EndpointView, PodView, ServiceEndpoints

if TYPE_CHECKING:
    from migrator.kube.client import Kube


MAX_GETS = 10  # doubtful pods read by name; above this, their selectors are listed whole


class WholePods:
    """The whole views read so far (for one read, or for a whole run's cache)."""

    def __init__(self, max_gets: int = MAX_GETS) -> None:
        self._views: dict[str, PodView] = {}
        self.reads = 0  # whole reads sent, GETs and lists (a figure for tests)
        # 0: always list (an identity that may list pods but not get one: the guard's Role)
        self.max_gets = max_gets

    def resolve(self, kube: Kube, namespace: str, views: Iterable[PodView],
                endpoints: Mapping[str, ServiceEndpoints],
                selectors: Sequence[str]) -> list[PodView]:
        """`views` with every doubtful printed pod replaced by its whole view (see the module
        docstring); `selectors` are the label selectors the views were listed by."""
        by_pod: dict[str, list[EndpointView]] = {}
        for eps in endpoints.values():
            for e in eps.endpoints:
                if e.pod:
                    by_pod.setdefault(e.pod, []).append(e)
        views = list(views)
        doubts = {p.uid for p in views if p.doubtful or p.contradicted(by_pod.get(p.name, ()))}
        stale = [p for p in views if p.uid in doubts and not self._covers(p)]
        fresh: set[str] = set()
        if len(stale) > self.max_gets:
            fresh = self._list(kube, namespace, [s for s in selectors
                                                 if any(parse(s).matches(p.labels)
                                                        for p in stale)])
        elif stale:
            fresh = self._get(kube, namespace, stale)
        out: list[PodView] = []
        for p in views:
            if p.uid not in doubts:
                out.append(p)
            elif p.uid in fresh or self._covers(p):
                out.append(self._views[p.uid])
        return out

    def _covers(self, pod: PodView) -> bool:
        """A whole view kept from before is at least as new as this row (versions that are
        not integers never cover: such a pod is read whole every time it is doubtful)."""
        whole = self._views.get(pod.uid)
        return whole is not None and pod.version > 0 and whole.version >= pod.version

    def _get(self, kube: Kube, namespace: str, pods: Sequence[PodView]) -> set[str]:
        """Read these pods whole by name; the uids found (a name now held by a new pod with
        another uid means the doubtful one is gone)."""
        found: set[str] = set()
        for pod in pods:
            obj = kube.get(kinds.POD, pod.name, namespace)
            self.reads += 1
            whole = PodView.of(obj) if obj is not None else None
            if whole is not None and whole.uid == pod.uid:
                self._views[whole.uid] = whole
                found.add(whole.uid)
        return found

    def _list(self, kube: Kube, namespace: str, selectors: Sequence[str]) -> set[str]:
        """List these selectors' pods whole; the uids read."""
        read: set[str] = set()
        for sel in selectors:
            whole, _ = kube.collect(kinds.POD, namespace, label_selector=sel, keep=PodView.of)
            self.reads += 1
            self._views.update((w.uid, w) for w in whole)
            read.update(w.uid for w in whole)
        return read
