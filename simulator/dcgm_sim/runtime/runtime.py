"""The runtime the simulated kubelet hands real pods to: which pods run for real, their
workers, their service account files and their logs.

A pod runs for real when every container's image is the loaded image (`OciImage.matches`);
the kubelet simulates every other pod as before. Each real pod gets what a kubelet and a CRI
runtime give it: a folder of its own, a bound service account token (a token the sim's
authorizer knows for `system:serviceaccount:<namespace>:<name>`, so the pod has exactly its
ServiceAccount's RBAC), the sim's CA and the namespace, and the `kubernetes` Service at the
cluster's first service IP, port 443 (the sim's certificate is valid for it, `tls`).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dcgm_sim.access import AccessControl
from dcgm_sim.clock import SimClock
from dcgm_sim.network import Network
from dcgm_sim.runtime.containerspec import parse_passwd
from dcgm_sim.runtime.image import OciImage
from dcgm_sim.runtime.worker import PodWorker, Sandbox, Snapshot

SERVICE_PORT = 443


class LogUnavailable(ValueError):
    """pods/log cannot answer for this container (the API's 400 message)."""


class ContainerRuntime:
    def __init__(self, image: OciImage, clock: SimClock, folder: Path, access: AccessControl,
                 network: Network) -> None:
        self.image = image
        self.clock = clock
        self.folder = folder
        self.access = access
        self.service_host = str(network.service_cidr(network.primary).network_address + 1)
        self.upstream: tuple[str, int] | None = None
        self.ca_pem = b""
        self.passwd = parse_passwd((image.rootfs / "etc" / "passwd").read_text())
        self._lock = threading.Lock()
        self._workers: dict[str, PodWorker] = {}

    def connect(self, upstream: tuple[str, int], ca_pem: bytes) -> None:
        """Where the API server listens (HTTPS, on the host) and its CA, once it does."""
        self.upstream = upstream
        self.ca_pem = ca_pem

    def runs(self, pod: Mapping[str, Any]) -> bool:
        containers = (pod.get("spec") or {}).get("containers") or []
        return bool(containers) and all(self.image.matches(str(c.get("image", "")))
                                        for c in containers)

    def image_id(self, reference: str) -> str:
        return f"{reference.split('@', 1)[0]}@{self.image.digest}"

    def start(self, pod: Mapping[str, Any], ips: Sequence[str], notify: Callable[[], None]) -> None:
        """Run the pod (it returns at once; `notify` is called at every change)."""
        if self.upstream is None:
            raise RuntimeError("the container runtime has no API server to connect pods to")
        meta = pod["metadata"]
        uid = str(meta["uid"])
        folder = self.folder / f"{meta['namespace']}_{meta['name']}_{uid}"
        folder.mkdir(parents=True, exist_ok=True)
        sandbox = Sandbox(pod=pod, ips=tuple(ips), folder=folder,
                          service=(self.service_host, SERVICE_PORT), upstream=self.upstream,
                          service_account=self._service_account(pod, folder))
        worker = PodWorker(sandbox, self.image, self.passwd, self.clock, notify)
        with self._lock:
            self._workers[uid] = worker
        worker.start()

    def _service_account(self, pod: Mapping[str, Any], folder: Path) -> Path | None:
        spec = pod.get("spec") or {}
        if spec.get("automountServiceAccountToken") is False:
            return None
        namespace = str(pod["metadata"]["namespace"])
        account = str(spec.get("serviceAccountName") or "default")
        target = folder / "serviceaccount"
        target.mkdir(exist_ok=True)
        token = self.access.issue_token(f"system:serviceaccount:{namespace}:{account}")
        for name, text in (("token", token.encode()), ("ca.crt", self.ca_pem),
                           ("namespace", namespace.encode())):
            (target / name).write_bytes(text)
            (target / name).chmod(0o644)
        target.chmod(0o755)
        return target

    def has(self, uid: str) -> bool:
        with self._lock:
            return uid in self._workers

    def snapshot(self, uid: str) -> Snapshot | None:
        with self._lock:
            worker = self._workers.get(uid)
        return None if worker is None else worker.snapshot()

    def stop(self, uid: str, grace: float | None = None) -> None:
        """The pod is being deleted: stop its containers (`grace` real seconds, default its
        terminationGracePeriodSeconds)."""
        with self._lock:
            worker = self._workers.get(uid)
        if worker is not None:
            worker.stop(grace)

    def forget(self, uid: str) -> None:
        """The pod is gone: its containers killed (if any still run) and its folder removed."""
        with self._lock:
            worker = self._workers.pop(uid, None)
        if worker is None:
            return
        worker.stop(0)

        def remove() -> None:
            worker.wait(30)
            shutil.rmtree(worker.sandbox.folder, ignore_errors=True)

        threading.Thread(target=remove, daemon=True, name="sim-pod-gc").start()

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop every pod (the sim is stopping): SIGTERM, SIGKILL after `grace`."""
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.stop(grace)
        for worker in workers:
            worker.wait(grace + 5)

    def log_file(self, uid: str, container: str, pod_name: str,
                 previous: bool) -> tuple[Path, threading.Event | None]:
        """The log of the container's latest instance (or the one before, `previous`) and the
        event set when it is complete. LogUnavailable as the kubelet refuses."""
        with self._lock:
            worker = self._workers.get(uid)
        if worker is None:
            raise LogUnavailable(f'container "{container}" in pod "{pod_name}" is not available')
        path, done = worker.log_writer(container)
        if path is None:
            state: dict[str, Any] = next((c["state"] for c in worker.snapshot().containers
                                          if c["name"] == container), {})
            reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise LogUnavailable(f'container "{container}" in pod "{pod_name}" is waiting to '
                                 f"start: {reason}")
        if not previous:
            return path, done
        instance = int(path.stem) - 1
        earlier = path.with_name(f"{instance}.log")
        if instance < 0 or not earlier.exists():
            raise LogUnavailable(f'previous terminated container "{container}" in pod '
                                 f'"{pod_name}" not found')
        return earlier, None
