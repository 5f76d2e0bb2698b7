"""A scrape-target oracle that nobody here wrote: VictoriaMetrics' Prometheus-compatible
Kubernetes service discovery, run with the Prometheus Helm chart's default scrape jobs against
a simulated cluster, answering "which scrape targets reach each pod".

The jobs are the prometheus-community `prometheus` Helm chart's, version 27.46.0 (appVersion
v3.7.3), from its values.yaml, `serverFiles."prometheus.yml".scrape_configs`; their
`relabel_configs` are copied verbatim below (Apache-2.0, the prometheus-community authors).
Only the chart's jobs that can reach a pod are taken:

* `kubernetes-service-endpoints` / `kubernetes-service-endpoints-slow` (role `endpoints`):
  a Service annotated `prometheus.io/scrape: "true"` (`scrape-slow` for the slow job) gives
  one target per endpoint address and port, labelled with the pod it points at;
* `kubernetes-pods` / `kubernetes-pods-slow` (role `pod`): a pod annotated
  `prometheus.io/scrape: "true"` (`scrape-slow`) gives one target per container port, and one
  (the bare pod IP) per container without ports, init containers included.

Left out: `kubernetes-services`, because it never targets a pod: it probes each annotated
Service's cluster address through a blackbox exporter (`__address__` becomes `blackbox`,
`__param_target` the Service), so it says nothing about how often a pod is scraped;
`prometheus-pushgateway` (role `service`, a pushgateway Service), `kubernetes-apiservers`
(keeps only `default/kubernetes`), `kubernetes-nodes[-cadvisor]` (role `node`) and the static
`prometheus` job, for the same reason.

What is changed from the chart, and why:

* `kubernetes_sd_configs`: each job keeps its role and gains `kubeconfig_file` (the sim's
  kubeconfig: its HTTPS URL, CA and bearer token) and `namespaces.names` (the test namespace).
* `scrape_interval` is one hour for every job (the slow jobs' 5m too) and `proxy_url` sends
  every scrape to a loopback sink that answers 502: the discovered targets are the simulated
  pods' IPs, where nothing listens and no traffic may go. The oracle counts **discovered
  active targets** (after relabeling), never scrape results; every target is "down".

The binary is Debian's `victoria-metrics` package (1.79.x, `/usr/bin/victoria-metrics`;
`.ci/run` installs it). It runs single-node on a free loopback port with a temporary
`-storageDataPath`, `-promscrape.kubernetesSDCheckInterval` (30 s by default) lowered to
`SD_CHECK_INTERVAL`, and logs to a temporary file whose tail every error carries.

VictoriaMetrics 1.79 next to Prometheus (the test module says what each case gives):

* Targets whose labels and URL are identical after relabeling are one target in both (a
  scrape pool keys its targets by them); VM also logs `skipping duplicate scrape target with
  identical labels` for each extra one, on every discovery pass (`discovery_errors()`).
* A portless pod target (a container without ports: the bare pod IP) gets the scheme's
  default port in VM, `instance="10.0.0.1:80"`, as in Prometheus 2; Prometheus 3 no longer
  writes the port into `__address__`/`instance` (it still scrapes port 80).
* A differing quirk: a target's `discoveredLabels` in VM's /api/v1/targets are those it was
  first seen with, as long as a target with the same labels after relabeling stays (its
  scrape loop is kept); Prometheus' scrape pool refreshes them on every sync. Hence
  `targets_per_pod(fresh=True)`, which reads a new process.
* `/targets?format=json` is plain text and `/service-discovery` HTML in 1.79: only
  `/api/v1/targets` is read here.
* The `endpoints` role retries a failing list (e.g. a 404) with a doubling backoff, and
  meanwhile that job simply has no targets; `discovery_errors()` shows why.

ServiceMonitor jobs (`service_monitor_jobs`, passed as `extra_jobs`): the scrape jobs the
Prometheus Operator generates from a ServiceMonitor, written here from its
`pkg/prometheus/promcfg.go` `generateServiceMonitorConfig` for the fields the GPU Operator's
ServiceMonitors use (selector `matchLabels`/`matchExpressions`, `namespaceSelector`, endpoint
`port`/`targetPort`/`path`/`interval`/`honorLabels`/`relabelings`, `jobLabel`), under either
discovery role: `role: endpoints` keeps the port on `__meta_kubernetes_endpoint_port_name`,
`role: endpointslice` on `__meta_kubernetes_endpointslice_port_name` (and reads the pod from
`__meta_kubernetes_endpointslice_address_target_*`). The role is the ServiceMonitor's
`spec.serviceDiscoveryRole` when set, else the Prometheus' (`role` argument). Not generated:
scrape classes, authentication, TLS, sharding, limits (nothing here sets them). VM 1.79 serves
`role: endpointslice` from `discovery.k8s.io/v1` and gives each target the slice's name and
labels (`__meta_kubernetes_endpointslice_name`, `__meta_kubernetes_endpointslice_label_*`), as
Prometheus (labels since 2.46) does.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

BINARY = "/usr/bin/victoria-metrics"
CHART = "prometheus-community `prometheus` Helm chart 27.46.0"
SD_CHECK_INTERVAL = 0.2  # seconds; -promscrape.kubernetesSDCheckInterval (VM's default: 30 s)
SCRAPE_INTERVAL = "1h"
STABLE_FOR = 1.0  # seconds the discovered set must stay the same to count as settled
POLL = 0.2  # seconds between reads of /api/v1/targets while settling
START_TIMEOUT = 20.0
SETTLE_TIMEOUT = 60.0
STOP_TIMEOUT = 10.0

# The chart's jobs that reach pods, as in its values.yaml; `relabel_configs` verbatim. The
# `kubernetes_sd_configs` entries get the cluster and namespaces in `scrape_configs()`.
CHART_SCRAPE_CONFIGS = r"""
- job_name: 'kubernetes-service-endpoints'
  honor_labels: true

  kubernetes_sd_configs:
    - role: endpoints

  relabel_configs:
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape]
      action: keep
      regex: true
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape_slow]
      action: drop
      regex: true
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scheme]
      action: replace
      target_label: __scheme__
      regex: (https?)
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_path]
      action: replace
      target_label: __metrics_path__
      regex: (.+)
    - source_labels: [__address__, __meta_kubernetes_service_annotation_prometheus_io_port]
      action: replace
      target_label: __address__
      regex: (.+?)(?::\d+)?;(\d+)
      replacement: $1:$2
    - action: labelmap
      regex: __meta_kubernetes_service_annotation_prometheus_io_param_(.+)
      replacement: __param_$1
    - action: labelmap
      regex: __meta_kubernetes_service_label_(.+)
    - source_labels: [__meta_kubernetes_namespace]
      action: replace
      target_label: namespace
    - source_labels: [__meta_kubernetes_service_name]
      action: replace
      target_label: service
    - source_labels: [__meta_kubernetes_pod_node_name]
      action: replace
      target_label: node

- job_name: 'kubernetes-service-endpoints-slow'
  honor_labels: true

  scrape_interval: 5m
  scrape_timeout: 30s

  kubernetes_sd_configs:
    - role: endpoints

  relabel_configs:
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape_slow]
      action: keep
      regex: true
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scheme]
      action: replace
      target_label: __scheme__
      regex: (https?)
    - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_path]
      action: replace
      target_label: __metrics_path__
      regex: (.+)
    - source_labels: [__address__, __meta_kubernetes_service_annotation_prometheus_io_port]
      action: replace
      target_label: __address__
      regex: (.+?)(?::\d+)?;(\d+)
      replacement: $1:$2
    - action: labelmap
      regex: __meta_kubernetes_service_annotation_prometheus_io_param_(.+)
      replacement: __param_$1
    - action: labelmap
      regex: __meta_kubernetes_service_label_(.+)
    - source_labels: [__meta_kubernetes_namespace]
      action: replace
      target_label: namespace
    - source_labels: [__meta_kubernetes_service_name]
      action: replace
      target_label: service
    - source_labels: [__meta_kubernetes_pod_node_name]
      action: replace
      target_label: node

- job_name: 'kubernetes-pods'
  honor_labels: true

  kubernetes_sd_configs:
    - role: pod

  relabel_configs:
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
      action: keep
      regex: true
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape_slow]
      action: drop
      regex: true
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
      action: replace
      regex: (https?)
      target_label: __scheme__
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
      action: replace
      target_label: __metrics_path__
      regex: (.+)
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
      action: replace
      regex: (\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})
      replacement: '[$2]:$1'
      target_label: __address__
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
      action: replace
      regex: (\d+);((([0-9]+?)(\.|$)){4})
      replacement: $2:$1
      target_label: __address__
    - action: labelmap
      regex: __meta_kubernetes_pod_annotation_prometheus_io_param_(.+)
      replacement: __param_$1
    - action: labelmap
      regex: __meta_kubernetes_pod_label_(.+)
    - source_labels: [__meta_kubernetes_namespace]
      action: replace
      target_label: namespace
    - source_labels: [__meta_kubernetes_pod_name]
      action: replace
      target_label: pod
    - source_labels: [__meta_kubernetes_pod_phase]
      regex: Pending|Succeeded|Failed|Completed
      action: drop
    - source_labels: [__meta_kubernetes_pod_node_name]
      action: replace
      target_label: node

- job_name: 'kubernetes-pods-slow'
  honor_labels: true

  scrape_interval: 5m
  scrape_timeout: 30s

  kubernetes_sd_configs:
    - role: pod

  relabel_configs:
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape_slow]
      action: keep
      regex: true
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
      action: replace
      regex: (https?)
      target_label: __scheme__
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
      action: replace
      target_label: __metrics_path__
      regex: (.+)
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
      action: replace
      regex: (\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})
      replacement: '[$2]:$1'
      target_label: __address__
    - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
      action: replace
      regex: (\d+);((([0-9]+?)(\.|$)){4})
      replacement: $2:$1
      target_label: __address__
    - action: labelmap
      regex: __meta_kubernetes_pod_annotation_prometheus_io_param_(.+)
      replacement: __param_$1
    - action: labelmap
      regex: __meta_kubernetes_pod_label_(.+)
    - source_labels: [__meta_kubernetes_namespace]
      action: replace
      target_label: namespace
    - source_labels: [__meta_kubernetes_pod_name]
      action: replace
      target_label: pod
    - source_labels: [__meta_kubernetes_pod_phase]
      regex: Pending|Succeeded|Failed|Completed
      action: drop
    - source_labels: [__meta_kubernetes_pod_node_name]
      action: replace
      target_label: node
"""

JOBS: tuple[str, ...] = tuple(j["job_name"] for j in yaml.safe_load(CHART_SCRAPE_CONFIGS))


class OracleUnavailable(RuntimeError):
    """The victoria-metrics binary is not installed."""


class OracleError(RuntimeError):
    """victoria-metrics did not start, or its discovery did not settle in time."""


def find_binary() -> str | None:
    """The victoria-metrics binary: on the PATH, else Debian's path; None when neither."""
    found = shutil.which("victoria-metrics")
    if found:
        return found
    return BINARY if os.access(BINARY, os.X_OK) else None


def scrape_configs(kubeconfig: str | Path, namespaces: Sequence[str],
                   proxy_url: str, extra_jobs: Sequence[Mapping[str, Any]] = ()
                   ) -> list[dict[str, Any]]:
    """The chart's jobs (and `extra_jobs`, e.g. `service_monitor_jobs`) pointed at one cluster
    (`kubeconfig`) and `namespaces` (the extra jobs keep theirs when they name some), every
    scrape sent to `proxy_url` once an hour (see the module docstring)."""
    jobs: list[dict[str, Any]] = copy.deepcopy(yaml.safe_load(CHART_SCRAPE_CONFIGS))
    jobs += [copy.deepcopy(dict(j)) for j in extra_jobs]
    for job in jobs:
        for sd in job["kubernetes_sd_configs"]:
            sd["kubeconfig_file"] = str(kubeconfig)
            sd.setdefault("namespaces", {"names": list(namespaces)})
        job["scrape_interval"] = SCRAPE_INTERVAL
        job["proxy_url"] = proxy_url
    return jobs


ROLE_ENDPOINTS, ROLE_ENDPOINTSLICE = "endpoints", "endpointslice"


def _sanitize(name: str) -> str:
    """Prometheus' `strutil.SanitizeLabelName`: every character outside [a-zA-Z0-9_] is `_`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _role_of(monitor: Mapping[str, Any], role: str) -> str:
    """promcfg.go `endpointRoleFlavor`: the monitor's own `serviceDiscoveryRole` wins over the
    Prometheus' (`role`); "EndpointSlice" is the endpointslice role, anything else endpoints."""
    own = (monitor.get("spec") or {}).get("serviceDiscoveryRole")
    if own is None:
        return role
    return ROLE_ENDPOINTSLICE if own == "EndpointSlice" else ROLE_ENDPOINTS


def _selector_relabelings(selector: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The keep/drop rules promcfg.go makes of `spec.selector` (SelectorMechanism Relabel)."""
    out: list[dict[str, Any]] = []
    for key in sorted(selector.get("matchLabels") or {}):
        k = _sanitize(key)
        out.append({"action": "keep",
                    "source_labels": [f"__meta_kubernetes_service_label_{k}",
                                      f"__meta_kubernetes_service_labelpresent_{k}"],
                    "regex": f"({selector['matchLabels'][key]});true"})
    for exp in selector.get("matchExpressions") or []:
        k = _sanitize(exp["key"])
        both = [f"__meta_kubernetes_service_label_{k}",
                f"__meta_kubernetes_service_labelpresent_{k}"]
        present = [f"__meta_kubernetes_service_labelpresent_{k}"]
        values = "|".join(exp.get("values") or [])
        out.append({
            "In": {"action": "keep", "source_labels": both, "regex": f"({values});true"},
            "NotIn": {"action": "drop", "source_labels": both, "regex": f"({values});true"},
            "Exists": {"action": "keep", "source_labels": present, "regex": "true"},
            "DoesNotExist": {"action": "drop", "source_labels": present, "regex": "true"},
        }[exp["operator"]])
    return out


def _relabel(rule: Mapping[str, Any]) -> dict[str, Any]:
    """A ServiceMonitor `RelabelConfig` (camelCase) as Prometheus configuration (snake_case),
    the action lower-cased as promcfg.go's `generateRelabelConfig` writes it."""
    names = {"sourceLabels": "source_labels", "targetLabel": "target_label",
             "separator": "separator", "regex": "regex", "modulus": "modulus",
             "replacement": "replacement", "action": "action"}
    out = {names[k]: v for k, v in rule.items() if k in names}
    if "action" in out:
        out["action"] = str(out["action"]).lower()
    return out


def service_monitor_jobs(monitor: Mapping[str, Any], role: str = ROLE_ENDPOINTS
                         ) -> list[dict[str, Any]]:
    """The scrape jobs the Prometheus Operator generates from one ServiceMonitor, one per
    endpoint (promcfg.go `generateServiceMonitorConfig`, for the fields named in the module
    docstring), under the monitor's own role or else `role` (the Prometheus')."""
    meta, spec = monitor["metadata"], monitor.get("spec") or {}
    ns, name = meta["namespace"], meta["name"]
    role = _role_of(monitor, role)
    target_labels = ("__meta_kubernetes_endpointslice_address_target_kind",
                     "__meta_kubernetes_endpointslice_address_target_name") \
        if role == ROLE_ENDPOINTSLICE else (
        "__meta_kubernetes_endpoint_address_target_kind",
        "__meta_kubernetes_endpoint_address_target_name")
    port_label = ("__meta_kubernetes_endpointslice_port_name" if role == ROLE_ENDPOINTSLICE
                  else "__meta_kubernetes_endpoint_port_name")
    ns_sel = spec.get("namespaceSelector") or {}
    sd: dict[str, Any] = {"role": role}
    if not ns_sel.get("any"):
        sd["namespaces"] = {"names": list(ns_sel.get("matchNames") or [ns])}
    jobs = []
    for i, ep in enumerate(spec.get("endpoints") or []):
        job: dict[str, Any] = {"job_name": f"serviceMonitor/{ns}/{name}/{i}",
                               "honor_labels": bool(ep.get("honorLabels", False)),
                               "kubernetes_sd_configs": [dict(sd)]}
        if ep.get("interval"):
            job["scrape_interval"] = ep["interval"]
        if ep.get("path"):
            job["metrics_path"] = ep["path"]
        rules: list[dict[str, Any]] = [{"source_labels": ["job"],
                                        "target_label": "__tmp_prometheus_job_name"}]
        rules += _selector_relabelings(spec.get("selector") or {})
        target_port = ep.get("targetPort")
        if ep.get("port"):
            rules.append({"action": "keep", "source_labels": [port_label],
                          "regex": ep["port"]})
        elif isinstance(target_port, str) and target_port:
            rules.append({"action": "keep",
                          "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                          "regex": target_port})
        elif isinstance(target_port, int) and target_port:
            rules.append({"action": "keep",
                          "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                          "regex": str(target_port)})
        rules += [
            {"source_labels": list(target_labels), "separator": ";", "regex": "Node;(.*)",
             "replacement": "${1}", "target_label": "node"},
            {"source_labels": list(target_labels), "separator": ";", "regex": "Pod;(.*)",
             "replacement": "${1}", "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"],
             "target_label": "container"},
        ]
        if ep.get("filterRunning", True):
            rules.append({"action": "drop", "source_labels": ["__meta_kubernetes_pod_phase"],
                          "regex": "(Failed|Succeeded)"})
        rules.append({"source_labels": ["__meta_kubernetes_service_name"],
                      "target_label": "job", "replacement": "${1}"})
        if spec.get("jobLabel"):
            rules.append({"source_labels": [
                f"__meta_kubernetes_service_label_{_sanitize(spec['jobLabel'])}"],
                "target_label": "job", "regex": "(.+)", "replacement": "${1}"})
        if ep.get("port"):
            rules.append({"target_label": "endpoint", "replacement": ep["port"]})
        elif target_port not in (None, ""):
            rules.append({"target_label": "endpoint", "replacement": str(target_port)})
        rules += [_relabel(r) for r in ep.get("relabelings") or []]
        job["relabel_configs"] = rules
        jobs.append(job)
    return jobs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Sink:
    """A loopback HTTP proxy that answers every request (a scrape) with 502 and counts it."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.5)
        self.port = int(self._sock.getsockname()[1])
        self.requests = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="oracle-sink", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(1.0)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    self.requests += 1
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=2.0)
        self._sock.close()


_RUNNING: set[DiscoveryOracle] = set()


@atexit.register
def _stop_leftovers() -> None:
    """A backstop: no victoria-metrics outlives the test process."""
    for oracle in list(_RUNNING):
        oracle.stop()


class DiscoveryOracle:
    """victoria-metrics discovering `namespaces` of the cluster behind `kubeconfig` through
    the chart's jobs. `start()`/`stop()` or `with`; `settle` (e.g. `sim.wait_idle`) is called
    before every settled read, so the cluster's own changes are done first."""

    def __init__(self, kubeconfig: str | Path, namespaces: Sequence[str], *,
                 settle: Callable[[], object] | None = None,
                 settle_timeout: float = SETTLE_TIMEOUT,
                 binary: str | None = None,
                 extra_jobs: Sequence[Mapping[str, Any]] = ()) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.namespaces = list(namespaces)
        self.extra_jobs = [dict(j) for j in extra_jobs]
        self.settle = settle
        self.settle_timeout = settle_timeout
        self.binary = binary
        self.url = ""
        self.start_seconds = 0.0  # start() to the first answer of /api/v1/targets
        self.last_settle_seconds = 0.0  # the last settled read's wait
        self._dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._sink: _Sink | None = None
        self._binary = ""
        self._log_offset = 0  # where the running process's part of the log starts
        self._started_discovery = False

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> DiscoveryOracle:
        binary = self.binary or find_binary()
        if binary is None:
            raise OracleUnavailable(
                f"victoria-metrics is not installed ({BINARY} missing): `apt-get install "
                "victoria-metrics` (Debian), as .ci/run does")
        self._binary = binary
        began = time.monotonic()
        self._dir = Path(tempfile.mkdtemp(prefix="dcgm-migrate-oracle-"))
        self._sink = _Sink()
        self._write_config()
        _RUNNING.add(self)
        try:
            self._run()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def _write_config(self) -> None:
        assert self._dir is not None and self._sink is not None
        config = {"global": {"scrape_interval": SCRAPE_INTERVAL},
                  "scrape_configs": scrape_configs(self.kubeconfig, self.namespaces,
                                                   f"http://127.0.0.1:{self._sink.port}",
                                                   self.extra_jobs)}
        (self._dir / "scrape.yml").write_text(yaml.safe_dump(config, sort_keys=False))

    def reconfigure(self, extra_jobs: Sequence[Mapping[str, Any]]) -> None:
        """Replace the extra jobs (e.g. ServiceMonitor jobs regenerated after an edit, as the
        Prometheus Operator regenerates them) and restart VM over the new configuration."""
        self.extra_jobs = [dict(j) for j in extra_jobs]
        self._write_config()
        self.restart()

    def restart(self) -> None:
        """A new VM process over the same config: a discovery with no history (see
        `targets_per_pod`)."""
        self._halt()
        self._run()

    def _run(self) -> None:
        for attempt in range(3):  # a free port can be taken before VM binds it
            if self._launch():
                return
            if attempt == 2 or "address already in use" not in self.log_tail():
                raise OracleError("victoria-metrics did not start:\n" + self.log_tail())

    def _launch(self) -> bool:
        """Start VM on a free port; True once /api/v1/targets answers, False if VM exited."""
        assert self._dir is not None
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        args = [self._binary,
                f"-httpListenAddr=127.0.0.1:{port}",
                f"-storageDataPath={self._dir / 'data'}",
                f"-promscrape.config={self._dir / 'scrape.yml'}",
                f"-promscrape.kubernetesSDCheckInterval={int(SD_CHECK_INTERVAL * 1000)}ms",
                "-retentionPeriod=1d",
                "-memory.allowedBytes=256MiB",
                "-loggerTimezone=UTC"]
        log_path = self._dir / "victoria-metrics.log"
        self._log_offset = log_path.stat().st_size if log_path.exists() else 0
        self._started_discovery = False
        with open(log_path, "ab") as log:
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                return False
            with contextlib.suppress(OSError, ValueError):
                self._targets_document()
                return True
            time.sleep(0.05)
        raise OracleError(f"victoria-metrics did not answer within {START_TIMEOUT:.0f}s:\n"
                          + self.log_tail())

    def _halt(self) -> None:
        """Stop the VM process: SIGTERM, SIGKILL after STOP_TIMEOUT. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)

    def stop(self) -> None:
        """Stop VM, the sink, remove the temp dir (its log too). Idempotent."""
        self._halt()
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        _RUNNING.discard(self)

    def __enter__(self) -> DiscoveryOracle:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ---- what VM says ------------------------------------------------------------------------

    @property
    def scrapes_sent(self) -> int:
        """Scrapes VM attempted (all went to the loopback sink)."""
        return self._sink.requests if self._sink is not None else 0

    def _log_text(self, whole: bool) -> str:
        if self._dir is None:
            return ""
        path = self._dir / "victoria-metrics.log"
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(0 if whole else self._log_offset)
            return f.read().decode(errors="replace")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines VM logged (every process of this oracle)."""
        return "\n".join(self._log_text(whole=True).splitlines()[-lines:]) or "(no log)"

    def discovery_errors(self) -> list[str]:
        """The running VM's logged errors (failed lists and watches, duplicate targets...),
        oldest first."""
        return [line for line in self._log_text(whole=False).splitlines()
                if "\terror\t" in line]

    def _targets_document(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as resp:
            doc = json.loads(resp.read())
        if doc.get("status") != "success":
            raise ValueError(f"/api/v1/targets answered {doc!r}")
        return dict(doc["data"])

    def active_targets(self) -> list[dict[str, Any]]:
        """One read of VM's active targets (Prometheus' /api/v1/targets shape)."""
        if self._proc is None:
            raise OracleError("the oracle is not running")
        return list(self._targets_document()["activeTargets"])

    def dropped_targets(self) -> list[dict[str, Any]]:
        """Discovered targets that relabeling dropped (VM keeps up to 1000)."""
        return list(self._targets_document()["droppedTargets"])

    def settled_targets(self, timeout: float | None = None) -> list[dict[str, Any]]:
        """The active targets once the discovered set stands still: `settle()` first, then
        the same answer for STABLE_FOR seconds (VM re-reads its watches every
        SD_CHECK_INTERVAL), after VM's discovery routines have started. OracleError after
        `timeout` (default `settle_timeout`) seconds, with VM's log tail."""
        timeout = self.settle_timeout if timeout is None else timeout
        began = time.monotonic()
        deadline = began + timeout
        if self.settle is not None:
            self.settle()
        seen: frozenset[str] | None = None
        since = 0.0
        while True:
            if self._proc is None or self._proc.poll() is not None:
                raise OracleError("victoria-metrics exited:\n" + self.log_tail())
            targets = self.active_targets()
            key = frozenset(json.dumps([t["scrapePool"], t["scrapeUrl"], t["labels"],
                                        t["discoveredLabels"]], sort_keys=True)
                            for t in targets)
            now = time.monotonic()
            if key != seen:
                seen, since = key, now
            elif now - since >= STABLE_FOR and self._discovery_started():
                self.last_settle_seconds = now - began
                return targets
            if now >= deadline:
                raise OracleError(
                    f"the discovered targets did not settle within {timeout:.0f}s "
                    f"({len(targets)} active now):\n" + self.log_tail())
            time.sleep(POLL)

    def _discovery_started(self) -> bool:
        """VM has listed every role's objects once (its watchers start before this line)."""
        if not self._started_discovery:
            self._started_discovery = ("started service discovery routines"
                                       in self._log_text(whole=False))
        return self._started_discovery

    def targets_per_pod(self, namespace: str, *, fresh: bool = True
                        ) -> dict[str, list[dict[str, Any]]]:
        """For each pod of `namespace` (discovered `__meta_kubernetes_pod_name`), the settled
        active targets that reach it: job, scrape pool, instance (the relabeled `__address__`),
        scrape URL, the Service (endpoints jobs), container and whether it is an init
        container, and all target labels.

        `fresh` (the default) restarts VM first: VM 1.79 keeps a target's scrape loop, and the
        discovered labels it was created with, for as long as a target with the same labels
        after relabeling exists. A pod replaced by one with the same IP (a DaemonSet's rolling
        update on the sim) keeps the endpoints jobs' targets' labels (the chart sets no `pod`
        label there), so a long-running VM goes on naming the pod that is gone. A fresh
        process reports who each target reaches now."""
        if fresh:
            self.restart()
        out: dict[str, list[dict[str, Any]]] = {}
        for t in self.settled_targets():
            found = t["discoveredLabels"]
            pod = found.get("__meta_kubernetes_pod_name")
            if not pod or found.get("__meta_kubernetes_namespace") != namespace:
                continue
            out.setdefault(pod, []).append({
                "job": t["labels"].get("job", t["scrapePool"]),
                "pool": t["scrapePool"],
                "instance": t["labels"].get("instance", ""),
                "scrape_url": t["scrapeUrl"],
                "service": found.get("__meta_kubernetes_service_name", ""),
                "container": found.get("__meta_kubernetes_pod_container_name", ""),
                "init": found.get("__meta_kubernetes_pod_container_init", "") == "true",
                "labels": dict(t["labels"]),
            })
        for targets in out.values():
            targets.sort(key=lambda t: (t["job"], t["scrape_url"], t["service"]))
        return out


@contextlib.contextmanager
def discovery_oracle(kubeconfig: str | Path, namespaces: Sequence[str],
                     **kwargs: Any) -> Iterator[DiscoveryOracle]:
    """A started `DiscoveryOracle`, always stopped on the way out."""
    oracle = DiscoveryOracle(kubeconfig, namespaces, **kwargs)
    try:
        yield oracle.start()
    finally:
        oracle.stop()
