"""The simulated cluster in its own process (`python -m migrator sim serve`), and what the
benchmark reads from it over HTTP: the request log, DaemonSets, a rollout followed by a watch.

The sim serves requests without credentials as a superuser (the old insecure port), so plain
urllib is enough here; the CLI under test uses the kubeconfig the sim writes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

from benchmarks.procs import cpu_seconds

Obj = dict[str, Any]
NS = "gpu-operator"


@dataclass(frozen=True)
class SimSettings:
    nodes: int
    stack: str
    time_scale: float = 0.01
    pod_start_seconds: float = 2.0
    termination_seconds: float = 1.0


@dataclass
class Traffic:
    """What the server answered for one command: from its request log."""

    requests: int = 0
    first_pages: int = 0  # requests without a `continue` token: independent of node count
    pages: int = 0  # list requests that followed a `continue` token
    watches: int = 0
    writes: int = 0
    bytes_sent: int = 0
    by_verb: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, records: list[Obj]) -> Traffic:
        t = cls()
        for r in records:
            t.requests += 1
            t.bytes_sent += int(r.get("bytes_sent") or 0)
            verb = str(r.get("verb") or r.get("method"))
            t.by_verb[verb] = t.by_verb.get(verb, 0) + 1
            if "continue=" in str(r.get("query") or ""):
                t.pages += 1
            else:
                t.first_pages += 1
            t.watches += verb == "watch"
            t.writes += verb in ("create", "update", "patch", "delete")
        return t

    def as_dict(self) -> Obj:
        return {"requests": self.requests, "first_pages": self.first_pages,
                "continue_pages": self.pages, "watches": self.watches, "writes": self.writes,
                "bytes_sent": self.bytes_sent, "by_verb": dict(sorted(self.by_verb.items()))}


class SimProcess:
    """`sim serve` as a child process; a context manager that stops it with SIGTERM."""

    def __init__(self, settings: SimSettings) -> None:
        self.settings = settings
        self._dir = tempfile.TemporaryDirectory(prefix="dcgm-bench-")
        self.kubeconfig = str(Path(self._dir.name) / "kubeconfig")
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self.ready_s = 0.0

    def __enter__(self) -> SimProcess:
        s = self.settings
        argv = [sys.executable, "-m", "migrator", "sim", "serve", "--nodes", str(s.nodes),
                "--stack", s.stack, "--kubeconfig-out", self.kubeconfig,
                "--time-scale", str(s.time_scale), "--pod-start-seconds", str(s.pod_start_seconds),
                "--termination-seconds", str(s.termination_seconds)]
        began = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 3 or line[0] != "READY":
            self.__exit__()
            raise RuntimeError(f"sim serve did not start: {' '.join(line) or 'no READY line'}")
        self.url = line[1]
        self.ready_s = time.perf_counter() - began
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._dir.cleanup()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    # ---- HTTP -------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None,
             content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        with urllib.request.urlopen(req, timeout=120) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def clear_log(self) -> None:
        self.call("DELETE", "/sim/v1/requests")

    def traffic(self) -> Traffic:
        """The requests since the last `clear_log`, once every open stream has been closed."""
        for _ in range(200):
            records = self.call("GET", "/sim/v1/requests")
            if not any(r.get("open") for r in records):
                break
            time.sleep(0.01)
        return Traffic.of(records)

    def full_read_bytes(self) -> int:
        """Bytes of one full read of what the tool reads in the namespace: the DaemonSets,
        Services, pods and EndpointSlices, each as one unpaginated list (what `kubectl get
        ds,svc,pods,endpointslices -o json` fetches). The unit of `reads_per_apply`."""
        total = 0
        for path in (f"/apis/apps/v1/namespaces/{NS}/daemonsets",
                     f"/api/v1/namespaces/{NS}/services", f"/api/v1/namespaces/{NS}/pods",
                     f"/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices"):
            with urllib.request.urlopen(self.url + path, timeout=120) as resp:
                total += len(resp.read())
        return total

    def daemonsets(self) -> list[Obj]:
        doc = self.call("GET", f"/apis/apps/v1/namespaces/{NS}/daemonsets")
        return list(doc.get("items") or [])

    def roll_alone(self, daemonset: str, timeout: float = 3600.0) -> float:
        """Roll one DaemonSet by a template label patch, with no tool involved; real seconds
        until the rollout is complete (followed with a watch, as `kubectl rollout status`)."""
        path = f"/apis/apps/v1/namespaces/{NS}/daemonsets/{daemonset}"
        patch = {"spec": {"template": {"metadata": {"labels": {
            "benchmark.dcgm-migrate/roll": str(time.time_ns())}}}}}
        began = time.perf_counter()
        ds = self.call("PATCH", path, patch, "application/merge-patch+json")
        generation = int(ds["metadata"]["generation"])
        rv = ds["metadata"]["resourceVersion"]
        deadline = began + timeout
        while time.perf_counter() < deadline:
            query = urllib.parse.urlencode({
                "watch": "1", "resourceVersion": rv, "timeoutSeconds": "60",
                "fieldSelector": f"metadata.name={daemonset}"})
            try:
                stream = urllib.request.urlopen(
                    f"{self.url}/apis/apps/v1/namespaces/{NS}/daemonsets?{query}", timeout=120)
            except HTTPError:
                rv = self.call("GET", path)["metadata"]["resourceVersion"]
                continue
            with stream:
                for raw in stream:
                    event = json.loads(raw)
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if _complete(obj, generation):
                        return time.perf_counter() - began
        raise TimeoutError(f"DaemonSet {daemonset} did not roll out within {timeout}s")


def _complete(ds: Obj, generation: int) -> bool:
    """The `kubectl rollout status` rule for a DaemonSet."""
    st = ds.get("status") or {}
    desired = int(st.get("desiredNumberScheduled") or 0)
    return (int(st.get("observedGeneration") or 0) >= generation
            and int(st.get("updatedNumberScheduled") or 0) == desired
            and int(st.get("numberAvailable") or 0) == desired)
