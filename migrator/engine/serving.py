"""The guard's one HTTP port: `/metrics` (the guard's own registry; gauges built from `GuardStatus`
at each scrape), `/healthz` (the loop beats, each watch thread runs) and `/readyz` (every cache
listed, the Lease tried), answering 200 or 503 and why.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from migrator.engine.clock import Clock
from migrator.errors import UsageError
from migrator.model.outcome import Verdict
from migrator.model.reach import Reach

Check = Callable[[], str]  # "" when fine, else what is wrong
PREFIX = "dcgm_migrate"
# A hold lands in tens of ms, a takeover within seconds, a resync's repair within a resync.
REPAIR_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)


class Health:
    """Beats and sync marks from the guard's threads, read by the probes."""

    def __init__(self, clock: Clock, stall_seconds: float) -> None:
        self.clock, self.stall_seconds = clock, stall_seconds
        self._lock = threading.Lock()
        self._beats: dict[str, float] = {}
        self._synced: dict[str, bool] = {}
        self._checks: dict[str, Check] = {}
        self.leading: bool | None = None  # None: the Lease has not been tried yet

    def watch(self, name: str) -> None:
        """Expect beats and a first sync from `name` from now on."""
        self.beat(name)
        self.expect(name)

    def expect(self, name: str) -> None:
        with self._lock:
            self._synced.setdefault(name, False)

    def beat(self, name: str) -> None:
        with self._lock:
            self._beats[name] = self.clock.monotonic()

    def synced(self, name: str) -> None:
        with self._lock:
            self._synced[name] = True
            if name in self._beats:
                self._beats[name] = self.clock.monotonic()

    def check(self, name: str, check: Check) -> None:
        """Another condition of liveness (a cache's own thread is still running)."""
        with self._lock:
            self._checks[name] = check

    def alive(self) -> tuple[bool, str]:
        now = self.clock.monotonic()
        with self._lock:
            beats, checks = dict(self._beats), dict(self._checks)
        problems = [f"{name}: no progress for {now - at:.0f} s (bound {self.stall_seconds:.0f} s)"
                    for name, at in sorted(beats.items()) if now - at > self.stall_seconds]
        problems += [f"{name}: {why}" for name, c in sorted(checks.items()) if (why := c())]
        return not problems, "; ".join(problems) or "ok"

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            waiting = sorted(n for n, done in self._synced.items() if not done)
            leading = self.leading
        if waiting:
            return False, f"caches not synced yet: {', '.join(waiting)}"
        if leading is None:
            return False, "the Lease has not been tried yet"
        return True, "ok: leading" if leading else "ok: standing by"


@dataclass(eq=False)  # hashable: the registry keys its collectors
class GuardStatus(Collector):
    """What the gauges show, written by the loop and built into gauges at each scrape."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    verdict: Verdict | None = None
    verdict_time: float = 0.0  # unix seconds
    reach: Mapping[str, Reach] = field(default_factory=dict)
    shared: Mapping[str, int] = field(default_factory=dict)  # stable name → shared endpoints
    leader: bool = False
    last_pass: float = 0.0  # unix seconds of the last full pass that ended without an error
    # (failures, relists) of each watched resource, read at scrape time
    watches: Callable[[], Mapping[str, tuple[int, int]]] = dict

    def judged(self, verdict: Verdict, reach: Mapping[str, Reach], at: float) -> None:
        with self.lock:
            self.verdict, self.reach, self.verdict_time = verdict, dict(reach), at

    def passed(self, shared: Mapping[str, int], at: float) -> None:
        with self.lock:
            self.shared, self.last_pass = dict(shared), at

    def leading(self, leader: bool) -> None:
        """A standby drops what it judged while it led: only the leader's verdict is shown."""
        with self.lock:
            self.leader = leader
            if not leader:
                self.verdict, self.reach, self.shared = None, {}, {}

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        with self.lock:
            verdict, reach, shared = self.verdict, dict(self.reach), dict(self.shared)
            verdict_time, leader, last_pass = self.verdict_time, self.leader, self.last_pass
        yield GaugeMetricFamily(f"{PREFIX}_leader", "1 while this replica holds the guard's "
                                "Lease and acts; 0 while it stands by.", value=int(leader))
        if last_pass:
            yield GaugeMetricFamily(f"{PREFIX}_last_pass_timestamp_seconds",
                                    "Unix time at which the last full pass ended without an "
                                    "error.", value=last_pass)
        yield _family(GaugeMetricFamily, "shared_endpoints", "Endpoints of GPUCluster pods the "
                      "guard's own EndpointSlices add to a stable name the ClusterPolicy "
                      "operator owns, as of the last pass.", ["name"],
                      (([n], c) for n, c in sorted(shared.items())))
        watches = sorted(dict(self.watches()).items())
        yield _family(CounterMetricFamily, "watch_failures", "Watch requests or streams that "
                      "failed and were retried.", ["resource"],
                      (([r], failed) for r, (failed, _) in watches))
        yield _family(CounterMetricFamily, "watch_relists", "Lists after a watch's first (410 "
                      "Expired, a failed watch, a late read).", ["resource"],
                      (([r], relisted) for r, (_, relisted) in watches))
        if verdict is None:
            return  # before the first verdict its series are absent, not 0
        yield GaugeMetricFamily(f"{PREFIX}_verdict_ok", "1 when the last verdict passed every "
                                "check (as `dcgm-migrate verify` judges), 0 otherwise.",
                                value=int(verdict.ok))
        yield GaugeMetricFamily(f"{PREFIX}_verdict_timestamp_seconds",
                                "Unix time of the last verdict.", value=verdict_time)
        judged: dict[tuple[str, str], bool] = {}
        for f in verdict.findings:
            key = (f.check, f.subject.split("/", 1)[-1])
            judged[key] = judged.get(key, True) and f.ok
        yield _family(GaugeMetricFamily, "check_ok", "1 when a check of the last verdict passed "
                      "for its subject, 0 when it failed.", ["check", "name"],
                      (([c, n], int(ok)) for (c, n), ok in sorted(judged.items())))
        yield _family(GaugeMetricFamily, "nodes_reached", "Nodes on which a stable name has a "
                      "ready endpoint of its pods, at the last verdict.", ["name"],
                      (([n], r.reached) for n, r in sorted(reach.items())))
        yield _family(GaugeMetricFamily, "nodes_wanted", "Nodes that run a pod a stable name "
                      "must reach, at the last verdict.", ["name"],
                      (([n], r.wanted) for n, r in sorted(reach.items())))


F = TypeVar("F", GaugeMetricFamily, CounterMetricFamily)


def _family(cls: type[F], name: str, doc: str, labels: list[str],
            samples: Iterable[tuple[list[str], float]]) -> F:
    family = cls(f"{PREFIX}_{name}", doc, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


class GuardMetrics:
    """One guard's own registry (not the global one: a process may run several) and metrics."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry(auto_describe=True)
        self.status = GuardStatus()
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
        reg.register(self.status)

    def repaired(self, repair: str, seconds: float) -> None:
        self.repair_seconds.labels(repair).observe(max(0.0, seconds))


def parse_address(text: str) -> tuple[str, int] | None:
    """`[HOST]:PORT` as `--metrics-bind-address` takes it; "0": None. ValueError otherwise."""
    text = text.strip()
    if text == "0":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not [HOST]:PORT (for example :8080 or 127.0.0.1:8080)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


class _Quiet(WSGIRequestHandler):
    """No access log: a scrape or a probe every few seconds is not a decision."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def cannot_serve(address: tuple[str, int], exc: OSError,
                 option: str = "--metrics-bind-address") -> UsageError:
    """The address cannot be bound: said with the `option` value to pass instead."""
    host, port = address
    shown = f"{f'[{host}]' if ':' in host else host or '0.0.0.0'}:{port}"
    why = {errno.EADDRINUSE: "another process already listens on that port",
           errno.EACCES: "ports below 1024 need privileges this process lacks",
           errno.EADDRNOTAVAIL: "no network interface of this host has that address"}.get(
               exc.errno or 0, exc.strerror or str(exc))
    other = port + 1 if 0 < port < 65535 else 0
    value = str(other) if option == "--metrics-port" else f"{host}:{other}"
    held = (f" (`ss -ltnp 'sport = :{port}'` shows who holds it)"
            if exc.errno == errno.EADDRINUSE else "")
    return UsageError(f"Cannot serve /metrics, /healthz and /readyz on {shown}: {why} "
                      f"({exc.strerror}).", f"pass a free port, e.g. `{option} {value}`{held}")


class MetricsServer:
    """One guard's registry and probes on (host, port), on daemon threads: bound when made (a
    port in use is refused before the guard connects), answering once `serve` is called."""

    def __init__(self, address: tuple[str, int], option: str = "--metrics-bind-address") -> None:
        try:
            self._httpd = make_server(address[0], address[1], self._app, ThreadingWSGIServer,
                                      handler_class=_Quiet)
        except OSError as exc:
            raise cannot_serve(address, exc, option) from exc
        host = "127.0.0.1" if address[0] in ("", "0.0.0.0") else address[0]
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="guard-metrics")

    def serve(self, registry: CollectorRegistry, health: Health) -> None:
        self._metrics, self.health = make_wsgi_app(registry), health
        self._thread.start()

    def _app(self, environ: dict[str, Any],
             start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return self._metrics(environ, start_response)  # type: ignore[no-any-return]
        if path in ("/healthz", "/livez"):
            ok, text = self.health.alive()
        elif path == "/readyz":
            ok, text = self.health.ready()
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: /metrics, /healthz, /readyz\n"]
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{text}\n".encode()]

    def close(self) -> None:
        if self._thread.is_alive():  # `shutdown` would wait for a loop never started
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()
