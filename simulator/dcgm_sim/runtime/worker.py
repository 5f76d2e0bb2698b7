"""One pod's containers, run for real: the kubelet's pod worker and the runtime under it.

On its own thread a `PodWorker` makes the pod's network namespace (its IPs and the `kubernetes`
Service's address on loopback, the relay to the API server behind that address), then runs each
container on a thread of its own: start (`launch`), copy its output to the log (`logs`), probe
it (`prober`), wait for its exit, and restart it as the pod's `restartPolicy` says (`Always`;
`OnFailure` after a non-zero exit; `Never`), waiting out the kubelet's crash back-off between
restarts (CrashLoopBackOff: 10 s doubling up to 5 min, reset after 10 min of running, in
simulated seconds). A failing liveness probe kills the container (then restarted the same way).
`stop(grace)` is a pod deletion: SIGTERM to every container, SIGKILL to those still running
after `grace` real seconds (a real process's shutdown takes real time, whatever the sim's time
scale). Every change of state calls `notify()`; `snapshot()` is what the kubelet writes into
the pod's status (`status`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dcgm_sim.clock import SimClock
from dcgm_sim.runtime import launch
from dcgm_sim.runtime.containerspec import SpecError, container_spec, service_env
from dcgm_sim.runtime.image import OciImage
from dcgm_sim.runtime.logs import LogWriter, rfc3339_nano
from dcgm_sim.runtime.netns import PodNetwork
from dcgm_sim.runtime.prober import Prober
from dcgm_sim.runtime.relay import Relay

Obj = dict[str, Any]

BACKOFF_START, BACKOFF_MAX, BACKOFF_RESET = 10.0, 300.0, 600.0  # simulated seconds


@dataclass(frozen=True)
class Sandbox:
    """What the runtime prepared for one pod."""

    pod: Mapping[str, Any]  # as the kubelet started it (its status carries the pod IPs)
    ips: tuple[str, ...]
    folder: Path  # the pod's own: logs, mount points, its service account files
    service: tuple[str, int]  # the `kubernetes` Service inside the pod
    upstream: tuple[str, int]  # the sim's HTTPS listener on the host
    service_account: Path | None


@dataclass
class _Container:
    spec: Mapping[str, Any]
    state: Obj = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Obj = field(default_factory=dict)
    restarts: int = 0
    ready: bool = False
    started: bool = False
    container_id: str = ""
    ever_ran: bool = False
    process: subprocess.Popen[bytes] | None = None
    prober: Prober | None = None
    log: LogWriter | None = None

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))


@dataclass(frozen=True)
class Snapshot:
    """The pod's containers as the kubelet reports them."""

    containers: tuple[Obj, ...]  # containerStatuses entries (without image fields)
    started: bool  # any container ever ran
    ended: bool  # no container runs or will run again
    stopping: bool


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode  # killed by a signal: 128+n


class PodWorker:
    def __init__(self, sandbox: Sandbox, image: OciImage, passwd: Mapping[str, tuple[int, int]],
                 clock: SimClock, notify: Callable[[], None]) -> None:
        self.sandbox = sandbox
        self.image = image
        self.passwd = passwd
        self.clock = clock
        self.notify = notify
        spec = sandbox.pod.get("spec") or {}
        self.policy = str(spec.get("restartPolicy") or "Always")
        self.grace = float(spec.get("terminationGracePeriodSeconds", 30))
        self.containers = [_Container(c) for c in spec.get("containers") or []]
        self.network: PodNetwork | None = None
        self._relay: Relay | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"sim-pod-{sandbox.folder.name}")

    # ---- the kubelet's side ----------------------------------------------------------------

    def start(self) -> PodWorker:
        self._thread.start()
        return self

    def stop(self, grace: float | None = None) -> None:
        """Delete the pod's containers: SIGTERM now, SIGKILL after `grace` real seconds."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        seconds = self.grace if grace is None else grace
        threading.Thread(target=self._terminate, args=(seconds,), daemon=True,
                         name="sim-pod-stop").start()
        self.notify()

    def wait(self, timeout: float | None = None) -> bool:
        return self._ended.wait(timeout)

    def snapshot(self) -> Snapshot:
        with self._lock:
            containers = tuple(
                {"name": c.name, "state": dict(c.state), "lastState": dict(c.last_state),
                 "ready": c.ready, "restartCount": c.restarts, "started": c.started,
                 **({"containerID": c.container_id} if c.container_id else {})}
                for c in self.containers)
            started = any(c.ever_ran for c in self.containers)
        return Snapshot(containers, started, self._ended.is_set(), self._stopping.is_set())

    def log_writer(self, name: str) -> tuple[Path | None, threading.Event | None]:
        """The current instance's log file of a container and its end (None: not started)."""
        with self._lock:
            for c in self.containers:
                if c.name == name and c.log is not None:
                    return c.log.path, c.log.done
        return None, None

    # ---- the pod's thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._sandbox()
        except OSError as err:
            with self._lock:
                for c in self.containers:
                    c.state = {"waiting": {"reason": "CreateContainerError",
                                           "message": f"pod sandbox: {err}"}}
            self._ended.set()
            self.notify()
            return
        threads = [threading.Thread(target=self._container, args=(c,), daemon=True,
                                    name=f"sim-container-{c.name}") for c in self.containers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._teardown()
        self._ended.set()
        self.notify()

    def _sandbox(self) -> None:
        sb = self.sandbox
        self.network = PodNetwork([*sb.ips, sb.service[0]])
        listener = self.network.listen(*sb.service)
        self._relay = Relay(listener, sb.upstream, sb.folder.name).start()

    def _teardown(self) -> None:
        if self._relay is not None:
            self._relay.close()
        if self.network is not None:
            self.network.close()

    def _container(self, c: _Container) -> None:
        backoff = BACKOFF_START
        while not self._stopping.is_set():
            began = self.clock.now()
            code = self._run_once(c)
            if code is None:  # could not be created: retried after the back-off
                if self._stopping.wait(self.clock.to_real(backoff)):
                    return
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            if self._stopping.is_set():
                return
            if not (self.policy == "Always" or (self.policy == "OnFailure" and code != 0)):
                return
            if self.clock.now() - began >= BACKOFF_RESET:
                backoff = BACKOFF_START
            sb = self.sandbox
            meta = sb.pod.get("metadata") or {}
            with self._lock:
                c.last_state = c.state
                c.state = {"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {backoff:g}s restarting failed container={c.name} "
                               f"pod={meta.get('name')}_{meta.get('namespace')}"
                               f"({meta.get('uid')})"}}
            self.notify()
            if self._stopping.wait(self.clock.to_real(backoff)):
                return
            backoff = min(backoff * 2, BACKOFF_MAX)
            with self._lock:
                c.restarts += 1

    def _run_once(self, c: _Container) -> int | None:
        """Start the container, wait for its exit; its exit code (None: not created)."""
        sb = self.sandbox
        host, port = sb.service
        try:
            spec = container_spec(sb.pod, c.spec, self.image.config,
                                  service_env=service_env(host, port), passwd=self.passwd)
        except SpecError as err:
            with self._lock:
                c.state = {"waiting": {"reason": "CreateContainerConfigError",
                                       "message": str(err)}}
            self.notify()
            return None
        assert self.network is not None
        folder = sb.folder / c.name
        ident = f"{(sb.pod.get('metadata') or {}).get('uid')}/{c.name}/{c.restarts}"
        with self._lock:
            if self._stopping.is_set():
                return 0
            process = launch.spawn(spec, self.image.rootfs, folder / "mnt", self.network,
                                   sb.service_account)
            assert process.stdout is not None and process.stderr is not None
            c.process = process
            c.log = LogWriter(folder / f"{c.restarts}.log", process.stdout, process.stderr)
            c.container_id = "containerd://" + hashlib.sha256(ident.encode()).hexdigest()
            started_at = rfc3339_nano(time.time())[:19] + "Z"
            c.state = {"running": {"startedAt": started_at}}
            c.ever_ran = True
            c.prober = Prober(self.network, sb.ips[0], c.spec, self.clock,
                              lambda kind, ok: self._probed(c, kind, ok))
            c.started = c.prober.started
            c.ready = c.prober.ready
        c.prober.start()
        self.notify()
        returncode = process.wait()
        c.prober.stop()
        c.log.done.wait(5)
        code = _exit_code(returncode)
        with self._lock:
            c.process = None
            c.ready = c.started = False
            c.state = {"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started_at, "finishedAt": rfc3339_nano(time.time())[:19] + "Z",
                "containerID": c.container_id}}
        self.notify()
        return code

    def _probed(self, c: _Container, kind: str, ok: bool) -> None:
        with self._lock:
            if c.prober is None or c.process is None:
                return
            c.ready, c.started = c.prober.ready, c.prober.started
            process = c.process
        if kind == "livenessProbe" and not ok:
            grace = float(c.spec["livenessProbe"].get("terminationGracePeriodSeconds")
                          or self.grace)
            _kill(process, grace)
        self.notify()

    def _terminate(self, grace: float) -> None:
        with self._lock:
            running = [c.process for c in self.containers if c.process is not None]
        for process in running:
            _signal(process, signal.SIGTERM)
        if self._ended.wait(grace):
            return
        with self._lock:  # still running after the grace period
            running = [c.process for c in self.containers if c.process is not None]
        for process in running:
            _signal(process, signal.SIGKILL)


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _kill(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` real seconds (a liveness probe's kill)."""
    _signal(process, signal.SIGTERM)

    def later() -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
            return
        _signal(process, signal.SIGKILL)

    threading.Thread(target=later, daemon=True, name="sim-container-kill").start()
