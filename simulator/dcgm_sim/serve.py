"""`sim serve`: run a `SimCluster` in the foreground until SIGINT/SIGTERM.

`--operator-release` picks the GPU Operator release (controllers/releases.py): `shipped` (the
default; `--stack mixed|both` are refused under it), `future-coexistence`, or
`shared-services-fork` (controllers/sharedservices.py); `PUT /sim/v1/operator {"release": ...}`
upgrades a running server from outside.

Prints exactly one line on stdout, `READY <url> <kubeconfig>` (flushed), once the API answers,
so a script or a test can start it as a subprocess and wait for that line. Progress notes go to
stderr, among them the https kubeconfigs (`<kubeconfig>-<identity>`) of the admin and of every
subject of the `--rbac` files: kubectl runs as those identities (`tls`, `access`). `--rbac`
only creates the files' Roles and bindings before the first request: the authorizer reads
whatever RBAC objects the cluster holds at each request (`rbac`), so `kubectl apply -f` of the
same files later grants the same. A signal ends it cleanly (server and controllers stopped,
exit code 0).

`--images DIR` (images/build's folder or archive; root only) runs the pods of that image for
real (dcgm_sim/runtime): `kubectl apply -f docs/guard.yaml` starts the guard's replicas,
`kubectl logs` shows their output.

`--platform openshift` adds OpenShift's restricted-endpoints admission and the restricted-v2
SCC's UID range for the ReplicaSet and Job controllers' pods (`openshift.py`).

`--ip-family ipv6|dual` serves an IPv6-only or a dual-stack (IPv4-primary) cluster
(`network.py`); the default is IPv4-only.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from dcgm_sim.access import ADMIN_USER
from dcgm_sim.cluster import SimCluster, identity_slug
from dcgm_sim.controllers import releases
from dcgm_sim.controllers.operator import RESYNC_SECONDS
from dcgm_sim.faults import Faults, FaultsError
from dcgm_sim.network import SETTINGS
from dcgm_sim.openshift import PLATFORMS
from dcgm_sim.runtime.image import ImageError
from dcgm_sim.seed import STACKS
from dcgm_sim.tls import TLSUnavailable


class ServeError(ValueError):
    """A bad setting, in one sentence (the CLI exits 2 with it)."""


@dataclass(frozen=True)
class ServeOptions:
    nodes: int = 3
    stack: str = "gpucluster"
    port: int = 0
    kubeconfig_out: Path | None = None
    time_scale: float = 1.0
    operator_reconcile: float = RESYNC_SECONDS  # 0: no operator imitation
    pod_start_seconds: float = 2.0
    termination_seconds: float = 1.0
    namespace: str = "gpu-operator"
    gpucluster_dcgm: bool = True
    error_rate: float = 0.0
    latency_ms: float = 0.0
    fail_nth_write: int | None = None
    watch_window: int | None = None  # past events kept (None: the store's default)
    rbac: tuple[Path, ...] = ()  # RBAC YAML files created at start; each subject a kubeconfig
    tls: bool = True  # the HTTPS listener, where kubectl sends tokens (see sim/tls.py)
    operator_release: str = releases.DEFAULT  # the cluster's release (releases.RELEASES)
    ip_family: str = "ipv4"  # ipv4 | ipv6 | dual (network.SETTINGS)
    images: Path | None = None  # an OCI image whose pods run for real (dcgm_sim/runtime)
    platform: str = "kubernetes"  # kubernetes | openshift (openshift.PLATFORMS)

    def validate(self) -> Faults:
        """Check every setting; the fault settings come back as a `Faults`."""
        if self.nodes < 0:
            raise ServeError(f"--nodes must be 0 or more, got {self.nodes}.")
        if self.stack not in STACKS:
            raise ServeError(f"--stack must be one of {', '.join(STACKS)}, got {self.stack!r}.")
        if not 0 <= self.port <= 65535:
            raise ServeError(f"--port must be between 0 and 65535, got {self.port}.")
        if not self.time_scale > 0:
            raise ServeError(f"--time-scale must be greater than 0, got {self.time_scale}.")
        if not self.operator_reconcile >= 0:
            raise ServeError("--operator-reconcile must be 0 (off) or more seconds, "
                             f"got {self.operator_reconcile}.")
        if self.operator_release not in releases.RELEASES:
            raise ServeError(f"--operator-release must be one of "
                             f"{', '.join(releases.RELEASES)}, got {self.operator_release!r}.")
        try:
            releases.check_stack(self.stack, self.operator_release)
        except ValueError as err:
            raise ServeError(str(err)) from err
        if self.pod_start_seconds < 0:
            raise ServeError("--pod-start-seconds must be 0 or more, "
                             f"got {self.pod_start_seconds}.")
        if self.termination_seconds < 0:
            raise ServeError("--termination-seconds must be 0 or more, "
                             f"got {self.termination_seconds}.")
        if self.watch_window is not None and self.watch_window < 0:
            raise ServeError(f"--watch-window must be 0 or more events, got {self.watch_window}.")
        for path in self.rbac:
            if not path.is_file():
                raise ServeError(f"--rbac {path}: no such file.")
        if self.rbac and not self.tls:
            raise ServeError("--rbac needs the TLS listener (kubectl sends tokens only over "
                             "https): drop --no-tls.")
        if not self.namespace:
            raise ServeError("--namespace must not be empty.")
        if self.ip_family not in SETTINGS:
            raise ServeError(f"--ip-family must be one of {', '.join(SETTINGS)}, "
                             f"got {self.ip_family!r}.")
        if self.platform not in PLATFORMS:
            raise ServeError(f"--platform must be one of {', '.join(PLATFORMS)}, "
                             f"got {self.platform!r}.")
        if self.images is not None:
            _check_images(self.images, self.tls)
        try:
            return Faults(error_rate=self.error_rate, latency_ms=self.latency_ms,
                          fail_nth_write=self.fail_nth_write)
        except FaultsError as err:
            raise ServeError(f"bad fault setting: {err}.") from err


def _check_images(images: Path, tls: bool) -> None:
    if not images.exists():
        raise ServeError(f"--images {images}: no such folder or archive.")
    if not tls:
        raise ServeError("--images needs the TLS listener (pods reach the API server over "
                         "https): drop --no-tls.")
    if os.geteuid() != 0:
        raise ServeError("--images runs containers (mount and network namespaces, chroot): "
                         "run sim serve as root.")
    missing = [t for t in ("unshare", "nsenter", "chroot", "setpriv", "tar")
               if shutil.which(t) is None]
    if missing:
        raise ServeError(f"--images needs {', '.join(missing)} (util-linux, coreutils, tar).")


def build(options: ServeOptions) -> SimCluster:
    """The (not yet started) cluster these options describe; ServeError when one is bad."""
    faults = options.validate()
    return SimCluster(
        nodes=options.nodes, stack=options.stack, namespace=options.namespace,
        time_scale=options.time_scale, pod_start_seconds=options.pod_start_seconds,
        operator_reconcile_seconds=options.operator_reconcile or None, port=options.port,
        faults=faults, gpucluster_dcgm=options.gpucluster_dcgm,
        kubeconfig_path=options.kubeconfig_out, watch_window=options.watch_window,
        tls=options.tls, operator_release=options.operator_release,
        ip_family=options.ip_family, images=options.images, platform=options.platform)


def serve(options: ServeOptions, *, out: TextIO | None = None, err: TextIO | None = None,
          stop: threading.Event | None = None) -> int:
    """Seed, serve, print READY, wait for a signal (or `stop`), shut down; returns 0.

    Raises ServeError for a bad setting or a port that cannot be bound."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    stop = stop if stop is not None else threading.Event()
    sim = build(options)
    previous = _install_signal_handlers(stop)
    began = time.perf_counter()
    try:
        try:
            sim.start()
        except TLSUnavailable as error:
            raise ServeError(f"{error}; pass --no-tls to serve plain http only.") from error
        except ImageError as error:
            raise ServeError(f"--images: {error}.") from error
        except OSError as error:
            raise ServeError(f"cannot listen on 127.0.0.1:{options.port}: "
                             f"{error.strerror or error}.") from error
        summary = sim.summary
        if summary is not None:
            print(f"seeded {summary.nodes} nodes ({summary.stack}): {summary.daemonsets} "
                  f"DaemonSets, {summary.pods} pods, {summary.services} Services, "
                  f"{summary.endpointslices} EndpointSlices in {sim.seed_seconds:.2f}s; "
                  f"ready in {time.perf_counter() - began:.2f}s", file=err, flush=True)
        if sim.runtime is not None:
            print(f"container runtime: pods of {sim.runtime.image.reference} (any registry) "
                  f"run for real, from {sim.runtime.image.rootfs}", file=err, flush=True)
        for user, path in _identity_kubeconfigs(sim, options.rbac):
            print(f"kubeconfig for {user} (https, token): {path}", file=err, flush=True)
        print(f"READY {sim.url} {sim.kubeconfig}", file=out, flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        sim.stop()
        _restore_signal_handlers(previous)
    return 0


def _identity_kubeconfigs(sim: SimCluster, rbac: tuple[Path, ...]) -> list[tuple[str, Path]]:
    """Create the RBAC files' objects and write, next to the main kubeconfig, one https
    kubeconfig per subject they bind (its own token) and one for the admin (so `kubectl --as`
    impersonates: kubectl sends neither token nor impersonation headers over plain http)."""
    if not sim.secure_url:
        return []
    users = [ADMIN_USER]
    for path in rbac:
        users += [u for u in sim.load_rbac(path.read_text()) if u not in users]
    base = Path(sim.kubeconfig)
    return [(user, sim.kubeconfig_for(user, base.with_name(f"{base.name}-{identity_slug(user)}")))
            for user in users]


Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal takes back
Handlers = dict[signal.Signals, Handler]


def _install_signal_handlers(stop: threading.Event) -> Handlers:
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: Handlers = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, on_signal)
    return previous


def _restore_signal_handlers(previous: Handlers) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
