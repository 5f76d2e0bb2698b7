"""The disruption monitor (docs/design.md, "Quality bars"): samples every Service's ready endpoints
(per node for `internalTrafficPolicy: Local`) throughout an end-to-end test and records every sample
outside the disruption budget (docs/design.md, "Gates"): zero tolerance, except while phase 1 (or
its rollback) rolls pods, when the DaemonSet's own maxUnavailable applies. Which phase runs is read
from the tool's own state ConfigMap, so the budget follows the run exactly.

It samples when the store commits a change to what it reads (an EndpointSlice, Service or
ConfigMap of the namespace; changes that come faster than a sample are read together, as a
poll would read them), and at least every `interval` seconds besides: between two commits
nothing it reads can change, so polling the unchanged store every few milliseconds would only
burn CPU and contend for the store lock with the controllers under test."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dcgm_sim.store import Event, Store
from migrator.model import kinds
from migrator.model import objects as o

WATCHED = frozenset(k.key for k in (kinds.ENDPOINTSLICE, kinds.SERVICE, kinds.CONFIGMAP))


@dataclass
class Sample:
    at: float
    total: int
    by_node: dict[str, int]


@dataclass
class DisruptionMonitor:
    store: Store
    namespace: str = "gpu-operator"
    interval: float = 0.25  # the longest time between two samples when nothing changes
    rolling_budget: int = 1
    violations: list[str] = field(default_factory=list)
    samples: int = 0
    lowest: dict[str, tuple[int, int]] = field(default_factory=dict)
    _baseline: dict[str, Sample] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _dirty: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _external: bool = False
    _paused: bool = False
    # Stable names being replaced on purpose (a stack change): for these, absence and zero
    # ready endpoints are measured as gaps (real seconds) instead of counted as violations.
    gaps: dict[str, list[float]] = field(default_factory=dict)
    _replacing: frozenset[str] = frozenset()
    _gap_since: dict[str, float] = field(default_factory=dict)
    _removed: set[str] = field(default_factory=set)  # nodes the test deleted (`node_removed`)
    _forgotten: set[str] = field(default_factory=set)  # of those, the ones out of the baselines
    _phase1: tuple[str, bool] = ("", False)  # the state ConfigMap's version, `_rolling` of it

    def _read(self) -> tuple[dict[str, Sample], dict[str, bool], bool]:
        now, local, rolling, _ = self._read_slices()
        return now, local, rolling

    def _read_slices(self) -> tuple[dict[str, Sample], dict[str, bool], bool, list[Any]]:
        """`_read`, and the slices it counted (what a violation shows)."""
        with self.store.lock:
            slices, _ = self.store.list(kinds.ENDPOINTSLICE, self.namespace)
            services, _ = self.store.list(kinds.SERVICE, self.namespace)
            cm = self.store.find(kinds.CONFIGMAP, self.namespace, "dcgm-migrate-state")
        now = time.monotonic()
        local = {o.name(s): (s.get("spec") or {}).get("internalTrafficPolicy") == "Local"
                 for s in services}
        counts: dict[str, Counter[str]] = {name: Counter() for name in local}
        for sl in slices:
            svc = o.labels(sl).get("kubernetes.io/service-name", "")
            if svc not in counts:
                continue
            for ep in sl.get("endpoints") or []:
                if ep.get("nodeName") in self._forgotten:
                    continue
                ready = (ep.get("conditions") or {}).get("ready")
                if ready is None or ready:
                    counts[svc][ep.get("nodeName") or ""] += 1
        version = o.meta(cm or {}).get("resourceVersion", "")
        if version != self._phase1[0]:  # parsed once per version, not at every sample
            self._phase1 = (version, self._rolling(cm))
        return ({n: Sample(now, sum(c.values()), dict(c)) for n, c in counts.items()}, local,
                self._phase1[1], slices)

    @staticmethod
    def _rolling(cm: dict[str, Any] | None) -> bool:
        """Is phase 1 (or its rollback) the phase in progress right now?"""
        if cm is None:
            return False
        try:
            doc = json.loads((cm.get("data") or {}).get("state.json") or "{}")
        except ValueError:
            return False
        phases = {p.get("number"): p.get("status") for p in doc.get("phases") or []}
        # A failed phase 1 leaves its rollout running (a stalled node), still within budget.
        return phases.get(1) in ("in-progress", "failed") and all(
            phases.get(n) != "in-progress" for n in (2, 3))

    def _check(self) -> None:
        if self._paused:
            return
        # The test's own rollout window as it was when the sample was read: a window that
        # closes while a sample is being read still covers that sample.
        external = self._external
        self._forget_removed()
        now, local, rolling, slices = self._read_slices()
        budget = self.rolling_budget if rolling or external or self._external else 0
        self.samples += 1
        self._measure_gaps(now)
        for name, sample in now.items():
            if name in self._replacing:
                continue
            base = self._ratchet(name, sample)
            low = self.lowest.get(name, (sample.total, base.total))
            self.lowest[name] = (min(low[0], sample.total), base.total)
            short = self._short(name, sample, base, local.get(name, False), budget)
            if short:
                self.violations.append(f"{short}; its slices: {_inventory(slices, name)}")

    @staticmethod
    def _short(name: str, sample: Sample, base: Sample, local: bool, budget: int) -> str:
        """Why `sample` is outside `budget` below `base` ("" when it is within)."""
        if local:
            short = [n for n, c in base.by_node.items() if sample.by_node.get(n, 0) < c]
            if len(short) > budget:
                return f"Service/{name}: nodes {short} below baseline (budget {budget})"
        elif sample.total < base.total - budget:
            return (f"Service/{name}: {sample.total} ready < baseline {base.total} - budget "
                    f"{budget}")
        return ""

    def _recovered(self) -> bool:
        """Is every Service back at its baseline, as its consumers read it?"""
        now, local, _ = self._read()
        return not any(
            self._short(name, sample, self._baseline[name], local.get(name, False), 0)
            for name, sample in now.items()
            if name not in self._replacing and name in self._baseline)

    def _ratchet(self, name: str, sample: Sample) -> Sample:
        """The baseline is the most ever seen (per node and in total): a Service created during
        the test gets one as soon as its endpoints appear, and never loses it."""
        base = self._baseline.get(name)
        if base is None:
            base = self._baseline[name] = Sample(sample.at, sample.total, dict(sample.by_node))
            return base
        out = Sample(base.at, max(base.total, sample.total), dict(base.by_node))
        for node, count in sample.by_node.items():
            out.by_node[node] = max(out.by_node.get(node, 0), count)
        self._baseline[name] = out
        return base

    @contextmanager
    def rolling(self, settle: float = 30.0) -> Iterator[None]:
        """A rollout the test itself started (an operator upgrade): the rolling budget holds
        until every Service is back at its baseline in the EndpointSlices (at most `settle`
        seconds after the block). A DaemonSet's status says the rollout is done a moment before
        the EndpointSlice controller has marked the last new pod ready; consumers see the
        slices, so the rollout ends for them only then."""
        self._external = True
        try:
            yield
            deadline = time.monotonic() + settle
            while not self._recovered() and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            self._external = False

    def _measure_gaps(self, now: dict[str, Sample]) -> None:
        at = time.monotonic()
        for name in self._replacing:
            sample = now.get(name)
            if sample is None or sample.total == 0:
                self._gap_since.setdefault(name, at)
            elif name in self._gap_since:
                self.gaps.setdefault(name, []).append(at - self._gap_since.pop(name))

    @contextmanager
    def replacing(self, *names: str) -> Iterator[None]:
        """The test replaces these Services on purpose (their stack is removed and the tool
        re-creates the names): each interval in which a name is absent or has no ready
        endpoint is recorded in `gaps`; a gap still open at the end counts until then. Every
        other Service keeps the disruption budget; these get fresh baselines afterwards."""
        self._replacing = frozenset(names)
        try:
            yield
        finally:
            self._check()
            end = time.monotonic()
            for name in names:
                if name in self._gap_since:
                    self.gaps.setdefault(name, []).append(end - self._gap_since.pop(name))
                self._baseline.pop(name, None)
            self._replacing = frozenset()

    @contextmanager
    def expected_outage(self) -> Iterator[None]:
        """The test breaks the cluster on purpose (an operator re-render draining a Service):
        samples in this window are not held against the tool; baselines restart after it."""
        self._paused = True
        try:
            yield
        finally:
            self._baseline.clear()
            self._paused = False

    def node_removed(self, node: str) -> None:
        """The test deletes `node` (a scale-down): from the next sample on, its endpoints are
        not counted and leave every baseline, so only the nodes left are held to the budget."""
        self._removed.add(node)
        self._dirty.set()

    def _forget_removed(self) -> None:
        """In the sampling thread (which alone moves the baselines): the nodes removed since
        the last sample leave them."""
        for node in self._removed - self._forgotten:
            for name, base in self._baseline.items():
                gone = base.by_node.pop(node, 0)
                self._baseline[name] = Sample(base.at, base.total - gone, base.by_node)
            self._forgotten.add(node)

    def _on_event(self, event: Event) -> None:
        """Store subscriber (under the store lock, so only a flag): something it reads changed."""
        if (event.resource.key in WATCHED
                and (event.object.get("metadata") or {}).get("namespace") == self.namespace):
            self._dirty.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(self.interval)
            self._dirty.clear()  # before reading: a commit during the sample sets it again
            if self._stop.is_set():
                break
            self._check()

    def start(self) -> DisruptionMonitor:
        self.store.subscribe(self._on_event)
        self._check()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="disruption")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        if self._thread:
            self._thread.join(5)
        self.store.unsubscribe(self._on_event)
        self._check()

    def forget(self, service: str) -> None:
        """A Service the test deleted on purpose (rollback of an alias) has no baseline now."""
        self._baseline.pop(service, None)

    def assert_within_budget(self) -> None:
        assert self.samples > 1, "the monitor took no samples"
        assert not self.violations, self.violations[:5]


def _inventory(slices: list[Any], service: str) -> str:
    """A Service's EndpointSlices as a violation names them: who manages each, and its
    endpoints as node:ready (what tells a slice gone from an endpoint not ready)."""
    out = []
    for sl in slices:
        labels = o.labels(sl)
        if labels.get("kubernetes.io/service-name") != service:
            continue
        eps = ",".join(f"{ep.get('nodeName')}:{(ep.get('conditions') or {}).get('ready')}"
                       for ep in sl.get("endpoints") or [])
        out.append(f"{o.name(sl)} ({labels.get('endpointslice.kubernetes.io/managed-by')}) "
                   f"[{eps}]")
    return "; ".join(out) or "none"
