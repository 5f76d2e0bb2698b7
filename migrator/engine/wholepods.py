"""Doubtful printed pods read whole (by name up to MAX_GETS, else by selector), so no gate judges a
pod by a printed row not plainly healthy (`model/printed.py`); whole views are kept by uid."""

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
        self.max_gets = max_gets  # 0: always list (the guard's Role may list pods, not get one)

    def resolve(self, kube: Kube, namespace: str, views: Iterable[PodView],
                endpoints: Mapping[str, ServiceEndpoints],
                selectors: Sequence[str]) -> list[PodView]:
        """`views` with every doubtful pod replaced by its whole view; `selectors` are the
        label selectors the views were listed by."""
        by_pod: dict[str, list[EndpointView]] = {}
        for eps in endpoints.values():
            for e in eps.endpoints:
                if e.pod:
                    by_pod.setdefault(e.pod, []).append(e)
        views = list(views)
        doubts = {p.uid for p in views if p.doubtful or p.contradicted(by_pod.get(p.name, ()))}
        stale = [p for p in views if p.uid in doubts and not self._covers(p)]
        fresh: set[str] = set()  # the uids read whole (a new uid: the doubtful one is gone)
        if len(stale) > self.max_gets:  # list these selectors' pods whole
            for sel in (s for s in selectors if any(parse(s).matches(p.labels) for p in stale)):
                whole, _ = kube.collect(kinds.POD, namespace, label_selector=sel, keep=PodView.of)
                self.reads += 1
                self._views.update((w.uid, w) for w in whole)
                fresh.update(w.uid for w in whole)
        else:  # read them whole by name
            for pod in stale:
                obj = kube.get(kinds.POD, pod.name, namespace)
                self.reads += 1
                one = PodView.of(obj) if obj is not None else None
                if one is not None and one.uid == pod.uid:
                    self._views[one.uid] = one
                    fresh.add(one.uid)
        return [self._views[p.uid] if p.uid in doubts else p for p in views
                if p.uid not in doubts or p.uid in fresh or self._covers(p)]

    def _covers(self, pod: PodView) -> bool:
        """A whole view kept from before is at least as new as this row (a version that is not
        an integer never covers)."""
        whole = self._views.get(pod.uid)
        return whole is not None and pod.version > 0 and whole.version >= pod.version
