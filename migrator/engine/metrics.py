"""What `dcgm-migrate guard` exposes on `/metrics`: its verdict, what it writes, how it keeps up.

Built with the official Python client (`prometheus_client`) on a `CollectorRegistry` of each
guard's own, never the client's global default registry: a process may run several guards (the
tests do), and nothing else of the tool's should appear on the guard's page.

Two kinds of series, as controller-runtime and kube-state-metrics separate them:

- **events as counters and a histogram**, incremented where they happen (`GuardMetrics.wrote`,
  `api_error`, `takeover`, `repaired`);
- **state as gauges**, read from `GuardStatus` by a collector at scrape time (`_StatusCollector`):
  the last verdict and its checks, nodes reached and wanted, shared endpoints, leadership, the
  last successful pass, the watches' failures and relists. A check that is no longer judged
  disappears from the page with the verdict that dropped it, which a labelled `Gauge` would
  keep showing forever; before the first verdict the verdict series are absent, not 0.

Cardinality is bounded by the catalog: labels are check names, stable Service names, object
kinds, write results, the guard's repair kinds and watched resources — never a pod or a node.
The verdict is taken at the guard's cadence (`guard.verdict_due`): its gauges show the last
one, with its time in `dcgm_migrate_verdict_timestamp_seconds`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from migrator.model.outcome import Verdict
from migrator.model.reach import Reach

PREFIX = "dcgm_migrate"
# Seconds from the watch event that made a repair needed to its write: a hold lands in tens of
# milliseconds, a takeover of a 15,000-node cluster's names within a couple of seconds
# (docs/performance.md); a repair that waited for a resync pass lands within `resync_seconds`.
REPAIR_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)

# (failures, relists) of each watched resource, read at scrape time
WatchCounts = Callable[[], Mapping[str, tuple[int, int]]]


@dataclass
class GuardStatus:
    """What the gauges show, written by the guard's loop and read by scrapes (under `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    verdict: Verdict | None = None
    verdict_time: float = 0.0  # unix seconds
    reach: Mapping[str, Reach] = field(default_factory=dict)
    shared: Mapping[str, int] = field(default_factory=dict)  # stable name → shared endpoints
    leader: bool = False
    last_pass: float = 0.0  # unix seconds of the last full pass that ended without an error
    watches: WatchCounts = dict

    def judged(self, verdict: Verdict, reach: Mapping[str, Reach], at: float) -> None:
        with self.lock:
            self.verdict, self.reach, self.verdict_time = verdict, dict(reach), at

    def passed(self, shared: Mapping[str, int], at: float) -> None:
        with self.lock:
            self.shared, self.last_pass = dict(shared), at

    def leading(self, leader: bool) -> None:
        """Leadership; a replica that stands by drops what it judged while it led, so only
        the leader's verdict is on any page (a standby takes no verdict and no pass)."""
        with self.lock:
            self.leader = leader
            if not leader:
                self.verdict, self.reach, self.shared = None, {}, {}


class _StatusCollector(Collector):
    """The gauges of `GuardStatus`, built at each scrape."""

    def __init__(self, status: GuardStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.status
        with s.lock:
            verdict, reach, shared = s.verdict, dict(s.reach), dict(s.shared)
            verdict_time, leader, last_pass = s.verdict_time, s.leader, s.last_pass
        yield GaugeMetricFamily(f"{PREFIX}_leader", "1 while this replica holds the guard's "
                                "Lease and acts; 0 while it stands by.", value=int(leader))
        if last_pass:
            yield GaugeMetricFamily(f"{PREFIX}_last_pass_timestamp_seconds",
                                    "Unix time at which the last full pass ended without an "
                                    "error.", value=last_pass)
        names = GaugeMetricFamily(f"{PREFIX}_shared_endpoints", "Endpoints of GPUCluster pods "
                                  "the guard's own EndpointSlices add to a stable name the "
                                  "ClusterPolicy operator owns, as of the last pass.",
                                  labels=["name"])
        for name, count in sorted(shared.items()):
            names.add_metric([name], count)
        yield names
        yield from self._watches()
        if verdict is None:
            return
        yield GaugeMetricFamily(f"{PREFIX}_verdict_ok", "1 when the last verdict passed every "
                                "check (as `dcgm-migrate verify` judges), 0 otherwise.",
                                value=int(verdict.ok))
        yield GaugeMetricFamily(f"{PREFIX}_verdict_timestamp_seconds",
                                "Unix time of the last verdict.", value=verdict_time)
        checks = GaugeMetricFamily(f"{PREFIX}_check_ok", "1 when a check of the last verdict "
                                   "passed for its subject, 0 when it failed.",
                                   labels=["check", "name"])
        judged: dict[tuple[str, str], bool] = {}
        for f in verdict.findings:
            key = (f.check, f.subject.split("/", 1)[-1])
            judged[key] = judged.get(key, True) and f.ok
        for (check, name), ok in sorted(judged.items()):
            checks.add_metric([check, name], int(ok))
        yield checks
        reached = GaugeMetricFamily(f"{PREFIX}_nodes_reached", "Nodes on which a stable name "
                                    "has a ready endpoint of its pods, at the last verdict.",
                                    labels=["name"])
        wanted = GaugeMetricFamily(f"{PREFIX}_nodes_wanted", "Nodes that run a pod a stable "
                                   "name must reach, at the last verdict.", labels=["name"])
        for name, r in sorted(reach.items()):
            reached.add_metric([name], r.reached)
            wanted.add_metric([name], r.wanted)
        yield reached
        yield wanted

    def _watches(self) -> Iterator[CounterMetricFamily]:
        counts = dict(self.status.watches())
        failures = CounterMetricFamily(f"{PREFIX}_watch_failures", "Watch requests or streams "
                                       "that failed and were retried.", labels=["resource"])
        relists = CounterMetricFamily(f"{PREFIX}_watch_relists", "Lists after a watch's first "
                                      "(410 Expired, a failed watch, a late read).",
                                      labels=["resource"])
        for resource, (failed, relisted) in sorted(counts.items()):
            failures.add_metric([resource], failed)
            relists.add_metric([resource], relisted)
        yield failures
        yield relists


class GuardMetrics:
    """One guard's registry and instruments (module docstring)."""

    def __init__(self, status: GuardStatus | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.status = status or GuardStatus()
        reg = self.registry
        self.writes = Counter(f"{PREFIX}_writes", "Writes the guard sent, by object kind and "
                              "result (ok, conflict: changed meanwhile, gone, refused).",
                              ["kind", "result"], registry=reg)
        self.api_errors = Counter(f"{PREFIX}_api_errors", "Kubernetes API errors the guard met, "
                                  "by what it was doing (pass, verdict, hold, lease, event).",
                                  ["operation"], registry=reg)
        self.takeovers = Counter(f"{PREFIX}_takeovers", "Stable names that changed hands "
                                 "(an operator took one over, or the guard created it again) "
                                 "and were shared or re-created.", ["name"], registry=reg)
        self.repair_seconds = Histogram(f"{PREFIX}_repair_seconds", "From the watch event that "
                                        "made a repair needed to its last write, by repair.",
                                        ["repair"], buckets=REPAIR_BUCKETS, registry=reg)
        self.events = Counter(f"{PREFIX}_events", "Kubernetes Events the guard recorded, by "
                              "result (created, series: a repeat patched into its series, "
                              "aggregated: counted and not sent yet, dropped: over its rate, "
                              "failed).", ["result"], registry=reg)
        reg.register(_StatusCollector(self.status))

    def wrote(self, kind: str, result: str) -> None:
        self.writes.labels(kind, result).inc()

    def api_error(self, operation: str) -> None:
        self.api_errors.labels(operation).inc()

    def takeover(self, name: str) -> None:
        self.takeovers.labels(name).inc()

    def repaired(self, repair: str, seconds: float) -> None:
        self.repair_seconds.labels(repair).observe(max(0.0, seconds))

    def event(self, result: str) -> None:
        self.events.labels(result).inc()
