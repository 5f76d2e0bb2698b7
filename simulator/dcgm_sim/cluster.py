"""`SimCluster`: a seeded store, its controllers and the API server, as one context manager.

    with SimCluster(nodes=3, stack="gpucluster") as sim:
        run_the_tool(kubeconfig=sim.kubeconfig)   # or the official client against sim.url
        sim.wait_idle()                            # controllers have no pending work
        sim.wait_for(lambda: rolled_out(sim.store), timeout=30)

The default `time_scale=0.02` runs simulated time 50x faster, so a pod that takes 2 simulated
seconds to start is Ready after 40 ms. The kubeconfig (bearer token `ADMIN_TOKEN`, context
`sim`, namespace `namespace`) lives in a temporary directory removed by `stop()`.

`operator_release` picks the GPU Operator release the cluster runs (controllers/releases.py):
`"shipped"` (the default: a ClusterPolicy and a GPUCluster may not exist at the same time, so
`stack="mixed"` / `"both"` is a ValueError), `"future-coexistence"` or `"shared-services-fork"`.
The cluster is always seeded with the objects of the releases without shared Services, so a
`shared-services-fork` start is an upgrade at the first reconcile; `set_operator_release` (or
`PUT /sim/v1/operator`) upgrades a running imitation.

`ip_family` is the cluster's IP family setting (`network.py`): `"ipv4"` (the default),
`"ipv6"` (IPv6-only) or `"dual"` (dual-stack, IPv4 primary): nodes' podCIDRs, pod IPs, Service
cluster IPs and the EndpointSlice controller's address types follow it.

kubectl (client-go) never sends credentials over plain HTTP, so by default a request without
any `Authorization` header is served as a superuser, as a pre-1.20 API server's insecure port
did (`insecure_port=False` turns that off: such requests get 401). The Python client does send
the token, so RBAC-restricted tokens still work as on a real cluster. `tls=True` adds an HTTPS
listener (`secure_url`); `kubeconfig_for(user)` writes a kubeconfig with that user's token for
it, so kubectl runs as that user, and with the admin's, `kubectl --as` impersonates.

`platform="openshift"` adds OpenShift's admission (openshift.py): EndpointSlices pointing at
pod or Service addresses need `create endpointslices/restricted`, and the ReplicaSet and Job
controllers' pods run under restricted-v2, with a UID from their namespace's
`openshift.io/sa.scc.uid-range` (every namespace gets a block).

`api_server="v1.34"` serves the API as v1.34 does where it matters to a relabel, a release
ahead of the controllers (whose JSON is every earlier release's), as an upgrade of the
control plane passes through: the templates it returns omit the `null` creationTimestamp the
controller manager's ControllerRevisions keep (encoding.py).

`images` (an OCI image images/build wrote, needs root and `tls=True`) gives the kubelets a
container runtime (dcgm_sim/runtime): pods of that image run for real, reach the API server at
the `kubernetes` Service's address over the HTTPS listener, and their output is served by
pods/log. The image is unpacked by `start`, before the controllers run.
"""

from __future__ import annotations

import base64
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from dcgm_sim import openshift, rbac
from dcgm_sim.access import ADMIN_USER, AccessControl, rbac_documents, subjects
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import ControllerSet, releases
from dcgm_sim.controllers.kubelet import Kubelet
from dcgm_sim.controllers.nodelifecycle import (
    GRACE_SECONDS,
    NODE_FAILED_ANNOTATION,
    annotate_node,
)
from dcgm_sim.controllers.probes import PROBE_FLAP_ANNOTATION
from dcgm_sim.faults import Faults
from dcgm_sim.network import Network
from dcgm_sim.seed import SeedSummary, seed
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from dcgm_sim.tls import Certificate, make_certificate

if TYPE_CHECKING:
    from dcgm_sim.runtime.runtime import ContainerRuntime

T = TypeVar("T")


def kubeconfig_document(url: str, namespace: str = "gpu-operator",
                        token: str = ADMIN_TOKEN, *, ca_pem: bytes | None = None,
                        name: str = "sim") -> dict[str, Any]:
    """A kubeconfig for the sim: cluster/user/context all named `name`. `ca_pem` (for an
    https `url`) is the certificate clients verify the server with."""
    cluster: dict[str, Any] = {"server": url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name,
                                                "namespace": namespace}}],
        "current-context": name,
    }


def write_kubeconfig(path: str | Path, url: str, namespace: str = "gpu-operator", *,
                     token: str = ADMIN_TOKEN, ca_pem: bytes | None = None,
                     name: str = "sim") -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = kubeconfig_document(url, namespace, token, ca_pem=ca_pem, name=name)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def identity_slug(user: str) -> str:
    """A file- and context-name for a user: `system:serviceaccount:ns:x` → `ns-x`."""
    if user.startswith("system:serviceaccount:"):
        user = user[len("system:serviceaccount:"):]
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in user)


class SimCluster:
    """A running simulated GPU cluster (see the module docstring)."""

    def __init__(
        self,
        nodes: int = 3,
        stack: str = "gpucluster",
        *,
        namespace: str = "gpu-operator",
        time_scale: float = 0.02,
        pod_start_seconds: float = 2.0,
        termination_seconds: float = 1.0,
        operator_reconcile_seconds: float | None = None,
        port: int = 0,
        faults: Faults | None = None,
        gpucluster_dcgm: bool = True,
        kubeconfig_path: str | Path | None = None,
        insecure_port: bool = True,
        node_monitor_grace_seconds: float = GRACE_SECONDS,
        readiness_probes: bool = True,
        watch_window: int | None = None,
        tls: bool = False,
        operator_release: str = releases.DEFAULT,
        ip_family: str = "ipv4",
        images: str | Path | None = None,
        platform: str = "kubernetes",
        api_server: str = "v1.32",
    ) -> None:
        releases.check_stack(stack, operator_release)  # ValueError: unknown, or no coexistence
        self.release = operator_release
        self.nodes = nodes
        self.stack = stack
        self.namespace = namespace
        self.port = port
        self.gpucluster_dcgm = gpucluster_dcgm
        self.network = Network(ip_family)  # ValueError for an unknown setting
        if platform not in openshift.PLATFORMS:
            raise ValueError(f"platform must be one of {', '.join(openshift.PLATFORMS)}, "
                             f"got {platform!r}")
        self.platform = platform
        # watch_window: past events kept for watches and continue tokens (None: the default).
        self.store = (Store(network=self.network) if watch_window is None
                      else Store(event_log_size=watch_window, network=self.network))
        self.store.platform = platform
        self.clock = SimClock(time_scale)
        self.controllers = ControllerSet(
            self.store, self.clock, pod_start_seconds=pod_start_seconds,
            termination_seconds=termination_seconds,
            operator_reconcile_seconds=operator_reconcile_seconds, namespace=namespace,
            node_monitor_grace_seconds=node_monitor_grace_seconds,
            readiness_probes=readiness_probes, operator_release=operator_release)
        access = AccessControl(allow_unauthenticated=insecure_port)
        self.server = ApiServer(self.store, faults=faults, access=access,
                                bookmark_seconds=self.clock.to_real(60), release=api_server)
        self.server.attach_operator(self.controllers.operator)
        self.url = ""
        self.summary: SeedSummary | None = None
        self.seed_seconds = 0.0
        self._tmpdir: str | None = None
        self._kubeconfig_path = Path(kubeconfig_path) if kubeconfig_path else None
        self._started = False
        self.tls = tls
        self.secure_url = ""  # the HTTPS listener (tls=True), where kubectl sends tokens
        self._certificate: Certificate | None = None
        self.images = Path(images) if images is not None else None
        self.runtime: ContainerRuntime | None = None  # with `images`, once started

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SimCluster:
        if self._started:
            return self
        began = time.perf_counter()
        self.summary = seed(self.store, nodes=self.nodes, stack=self.stack,
                            namespace=self.namespace, gpucluster_dcgm=self.gpucluster_dcgm,
                            release=self.release)
        if self.platform == openshift.OPENSHIFT:
            openshift.allocate_blocks(self.store, self.namespace)
        self.seed_seconds = time.perf_counter() - began
        self._started = True
        try:
            self._tmpdir = tempfile.mkdtemp(prefix="dcgm-migrate-sim-")
            if self.images is not None:
                self._attach_runtime(self.images, Path(self._tmpdir) / "pods")
            self.controllers.start()
            self.url = self.server.start("127.0.0.1", self.port)
            if self._kubeconfig_path is None:
                self._kubeconfig_path = Path(self._tmpdir) / "kubeconfig"
            write_kubeconfig(self._kubeconfig_path, self.url, self.namespace)
            if self.tls:
                self._certificate = make_certificate(Path(self._tmpdir) / "tls")
                self.secure_url = self.server.start_tls(self._certificate.server_context())
                if self.runtime is not None:
                    port = int(self.secure_url.rsplit(":", 1)[1])
                    self.runtime.connect(("127.0.0.1", port), self._certificate.pem)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop serving, stop the controllers, remove the temporary kubeconfig. Idempotent."""
        if not self._started:
            return
        self._started = False
        if self.runtime is not None:
            self.runtime.shutdown()  # the pods' processes first, while they can still talk
        self.server.stop()
        self.controllers.stop()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _attach_runtime(self, images: Path, folder: Path) -> None:
        """Load the image and give it to the kubelets (before they start)."""
        if not self.tls:
            raise ValueError("a container runtime (images) needs the TLS listener (tls=True)")
        from dcgm_sim.runtime.image import load
        from dcgm_sim.runtime.runtime import ContainerRuntime

        self.runtime = ContainerRuntime(load(images), self.clock, folder, self.server.access,
                                        self.network)
        kubelet = self.controllers.get("kubelet")
        assert isinstance(kubelet, Kubelet)
        kubelet.runtime = self.runtime
        self.server.backend.pod_logs = self.runtime

    # ---- access ------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> str:
        """Path of the kubeconfig file (valid while the cluster runs)."""
        if self._kubeconfig_path is None:
            raise RuntimeError("the simulated cluster is not started")
        return str(self._kubeconfig_path)

    # ---- node faults (also `POST /sim/v1/nodes/<name>/fail|heal|probe-flap`) -------------------

    def fail_node(self, name: str) -> None:
        """Stop the node's kubelet: after the grace period the node goes Unknown, is tainted
        unreachable and its pods are marked not Ready (controllers/nodelifecycle.py)."""
        annotate_node(self.store, name, NODE_FAILED_ANNOTATION, "true")

    def heal_node(self, name: str) -> None:
        """The node's kubelet is back: Ready again, taints removed, its pods resume."""
        annotate_node(self.store, name, NODE_FAILED_ANNOTATION, None)

    def flap_probes(self, name: str, seconds: float) -> None:
        """Fail the readiness probes of the node's Ready pods for `seconds` (simulated)."""
        annotate_node(self.store, name, PROBE_FLAP_ANNOTATION, None)
        annotate_node(self.store, name, PROBE_FLAP_ANNOTATION, f"{seconds:g}")

    # ---- the GPU Operator release (also `GET|PUT /sim/v1/operator`) ---------------------------

    @property
    def operator_release(self) -> str:
        """The release the operator imitation runs (the one the cluster was seeded for when the
        imitation is off)."""
        operator = self.controllers.operator
        return self.release if operator is None else operator.release

    def set_operator_release(self, release: str) -> None:
        """Upgrade (or downgrade) the running operator imitation to `release`: it takes effect
        at the next reconcile, which starts at once. Thread-safe. ValueError for an unknown
        release, RuntimeError when the imitation is off."""
        operator = self.controllers.operator
        if operator is None:
            raise RuntimeError("the operator imitation is off (operator_reconcile_seconds)")
        operator.set_release(release)

    def load_rbac(self, rbac_yaml_text: str) -> list[str]:
        """Create (or replace) the YAML's Roles, ClusterRoles and bindings in the store, as
        `kubectl apply -f` would; returns the users and ServiceAccounts they bind."""
        docs = rbac_documents(rbac_yaml_text)
        rbac.install(self.store, docs)
        return subjects(docs)

    def kubeconfig_for(self, user: str, path: str | Path | None = None, *,
                       token: str | None = None) -> Path:
        """A kubeconfig that authenticates as `user` over the HTTPS listener (tls=True), so
        kubectl runs as that user too: a new token (`issue_token`) unless one is given.
        `user` = ADMIN_USER gives the admin token (for `kubectl --as`)."""
        if self._certificate is None or self._tmpdir is None:
            raise RuntimeError("kubeconfig_for needs a started SimCluster(tls=True)")
        if token is None:
            token = (ADMIN_TOKEN if user == ADMIN_USER
                     else self.server.access.issue_token(user))
        target = Path(path) if path else Path(self._tmpdir) / f"{identity_slug(user)}.kubeconfig"
        return write_kubeconfig(target, self.secure_url, self.namespace, token=token,
                                ca_pem=self._certificate.pem, name=identity_slug(user))

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Block until no controller has pending work (real seconds); TimeoutError otherwise."""
        if not self.controllers.wait_idle(timeout):
            raise TimeoutError(f"simulated controllers still busy after {timeout}s")
        return True

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0) -> T:
        """Re-evaluate `predicate` on every store change until it is truthy; returns its value.
        TimeoutError after `timeout` real seconds."""
        return wait_for(self.store, predicate, timeout)


def wait_for(store: Store, predicate: Callable[[], T], timeout: float = 10.0) -> T:
    """`SimCluster.wait_for` for any store (tests of controllers on a bare Store)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = store.resource_version
        value = predicate()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"condition not met within {timeout}s")
        with store.changed:
            if store.resource_version == seen:
                store.changed.wait(min(remaining, 0.05))
