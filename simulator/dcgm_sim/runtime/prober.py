"""The kubelet's probes against a real container: httpGet and tcpSocket, from inside the
pod's network namespace to its pod IP, as pkg/kubelet/prober runs them.

Per container instance one thread runs its startup, readiness and liveness probes
(`prober/worker.go`): none before `initialDelaySeconds`, then one every `periodSeconds`; a
result flips after `failureThreshold` failures or `successThreshold` successes in a row;
readiness starts as failure, liveness as success; until a startup probe succeeds the other two
do not run. An HTTP answer from 200 to 399 is a success (`probe/http`), any other answer, a
refused connection or no answer within `timeoutSeconds` a failure. `exec` probes are not run
(counted as successes).

Time: liveness and startup probes kill a real process, whose start-up and answers take real
time, so their delays, periods and timeouts are real seconds (scaled, a 10 s initial delay
would kill the guard before Python has imported it at `--time-scale 0.02`). Readiness only
reports: its delay and period are simulated seconds like the simulated pods' readiness
(controllers/probes.py), so a fast sim sees a real pod turn Ready promptly; its timeout is
real.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dcgm_sim.clock import SimClock
from dcgm_sim.runtime.netns import PodNetwork

KINDS = ("startupProbe", "readinessProbe", "livenessProbe")
USER_AGENT = "kube-probe/1.32"


class _Connection(http.client.HTTPConnection):
    """An HTTP connection whose socket comes from inside the pod's namespace."""

    def __init__(self, network: PodNetwork, host: str, port: int, timeout: float,
                 tls: bool) -> None:
        super().__init__(host, port, timeout=timeout)
        self._network = network
        self._tls = tls

    def connect(self) -> None:
        sock = self._network.connect(self.host, self.port, self.timeout or 1.0)
        if self._tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify a probe's TLS
            sock = context.wrap_socket(sock)
        self.sock = sock


def resolve_port(port: Any, container: Mapping[str, Any]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    raise ValueError(f"port {port!r} is not a port of container {container.get('name')}")


def probe_once(network: PodNetwork, pod_ip: str, probe: Mapping[str, Any],
               container: Mapping[str, Any]) -> bool:
    """One probe; True on success."""
    timeout = float(probe.get("timeoutSeconds") or 1)
    try:
        if "httpGet" in probe:
            action = probe["httpGet"]
            port = resolve_port(action.get("port"), container)
            host = str(action.get("host") or pod_ip)
            conn = _Connection(network, host, port, timeout,
                               str(action.get("scheme", "HTTP")).upper() == "HTTPS")
            try:
                headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
                headers.update({h["name"]: h["value"] for h in action.get("httpHeaders") or []})
                conn.request("GET", str(action.get("path") or "/"), headers=headers)
                return 200 <= conn.getresponse().status < 400
            finally:
                conn.close()
        if "tcpSocket" in probe:
            action = probe["tcpSocket"]
            port = resolve_port(action.get("port"), container)
            network.connect(str(action.get("host") or pod_ip), port, timeout).close()
            return True
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return True  # exec (and gRPC) probes are not run here


@dataclass
class _State:
    probe: Mapping[str, Any]
    result: bool
    due: float  # time.monotonic() of the next probe
    successes: int = 0
    failures: int = 0


class Prober:
    """The probes of one container instance on a thread; `on_change(kind, result)` is called
    when a result flips (and for `livenessProbe` failing, the container is to be killed)."""

    def __init__(self, network: PodNetwork, pod_ip: str, container: Mapping[str, Any],
                 clock: SimClock, on_change: Callable[[str, bool], None]) -> None:
        self.network = network
        self.pod_ip = pod_ip
        self.container = container
        self.clock = clock
        self.on_change = on_change
        self._stop = threading.Event()
        now = time.monotonic()
        self.states = {kind: _State(container[kind], kind == "livenessProbe",
                                    now + self._real(kind, container[kind].get(
                                        "initialDelaySeconds")))
                       for kind in KINDS if isinstance(container.get(kind), Mapping)}
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sim-prober-{container.get('name')}")

    def _real(self, kind: str, seconds: Any) -> float:
        value = float(seconds or 0)
        return self.clock.to_real(value) if kind == "readinessProbe" else value

    @property
    def ready(self) -> bool:
        state = self.states.get("readinessProbe")
        return self.started and (state is None or state.result)

    @property
    def started(self) -> bool:
        state = self.states.get("startupProbe")
        return state is None or state.result

    def start(self) -> Prober:
        if self.states:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for kind, state in self.states.items():
                if state.due > now or (kind != "startupProbe" and not self.started):
                    continue
                if kind == "startupProbe" and state.result:
                    continue  # a startup probe stops once it succeeded
                ok = probe_once(self.network, self.pod_ip, state.probe, self.container)
                if self._stop.is_set():
                    return
                state.due = time.monotonic() + self._real(
                    kind, state.probe.get("periodSeconds") or 10)
                self._count(kind, state, ok)
            dues = [s.due for k, s in self.states.items()
                    if not (k == "startupProbe" and s.result)]
            wait = min(dues) - time.monotonic() if dues else 1.0
            self._stop.wait(max(wait, 0.001))

    def _count(self, kind: str, state: _State, ok: bool) -> None:
        if ok:
            state.successes, state.failures = state.successes + 1, 0
            flip = not state.result and state.successes >= int(
                state.probe.get("successThreshold") or 1)
        else:
            state.failures, state.successes = state.failures + 1, 0
            flip = state.result and state.failures >= int(
                state.probe.get("failureThreshold") or 3)
        if flip:
            state.result = ok
            self.on_change(kind, ok)
