"""Start, stop and watch over the simulated cluster's controllers as one unit."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dcgm_sim.clock import SimClock
from dcgm_sim.controllers.base import Controller, ControllerLoop, run_together
from dcgm_sim.controllers.daemonsets import DaemonSetController
from dcgm_sim.controllers.deployments import DeploymentController
from dcgm_sim.controllers.endpoints import EndpointsController
from dcgm_sim.controllers.endpointslices import EndpointSliceController
from dcgm_sim.controllers.garbage import GarbageCollector
from dcgm_sim.controllers.jobs import JobController
from dcgm_sim.controllers.kubelet import Kubelet
from dcgm_sim.controllers.nodelifecycle import GRACE_SECONDS, NodeLifecycleController
from dcgm_sim.controllers.operator import OperatorImitation
from dcgm_sim.controllers.releases import DEFAULT as DEFAULT_RELEASE
from dcgm_sim.controllers.replicasets import ReplicaSetController
from dcgm_sim.controllers.resourceclaims import ResourceClaimController
from dcgm_sim.controllers.scheduler import Scheduler
from dcgm_sim.store import Store


@dataclass
class ControllerSet:
    """kube-controller-manager, the kubelets and (optionally) the GPU Operator, for one store."""

    store: Store
    clock: SimClock
    pod_start_seconds: float = 2.0
    termination_seconds: float = 1.0
    operator_reconcile_seconds: float | None = None
    namespace: str = "gpu-operator"
    node_monitor_grace_seconds: float = GRACE_SECONDS
    readiness_probes: bool = True
    operator_release: str = DEFAULT_RELEASE  # releases.RELEASES
    controllers: list[Controller] = field(init=False, default_factory=list)
    _loop: ControllerLoop | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        # Priority order: the links of a rollout wave first (kubelet, DaemonSet controller),
        # then bookkeeping, which fills the waits for pod start and termination.
        self.controllers = [
            Kubelet(self.store, self.clock, pod_start_seconds=self.pod_start_seconds,
                    termination_seconds=self.termination_seconds,
                    readiness_probes=self.readiness_probes),
            DaemonSetController(self.store, self.clock),
            Scheduler(self.store, self.clock),
            ReplicaSetController(self.store, self.clock),
            DeploymentController(self.store, self.clock),
            JobController(self.store, self.clock),
            ResourceClaimController(self.store, self.clock),
            GarbageCollector(self.store, self.clock),
            EndpointSliceController(self.store, self.clock),
            EndpointsController(self.store, self.clock),
            NodeLifecycleController(self.store, self.clock,
                                    grace_seconds=self.node_monitor_grace_seconds),
        ]
        if self.operator_reconcile_seconds is not None:
            self.controllers.append(OperatorImitation(
                self.store, self.clock, period=self.operator_reconcile_seconds,
                namespace=self.namespace, release=self.operator_release))

    def start(self) -> None:
        self._loop = run_together(self.controllers, self.clock)

    def stop(self) -> None:
        for c in reversed(self.controllers):
            c.stop()
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    def idle(self) -> bool:
        """No controller has work queued or running, and the store did not move meanwhile."""
        before = self.store.resource_version
        if not all(c.idle() for c in self.controllers):
            return False
        return self.store.resource_version == before

    def wait_idle(self, timeout: float = 10.0, poll: float = 0.005) -> bool:
        """Block until `idle()` holds twice in a row (real seconds); False on timeout."""
        deadline = time.monotonic() + timeout
        streak = 0
        while time.monotonic() < deadline:
            streak = streak + 1 if self.idle() else 0
            if streak >= 2:
                return True
            time.sleep(poll)
        return False

    @property
    def errors(self) -> int:
        return sum(c.errors for c in self.controllers)

    def get(self, name: str) -> Controller | None:
        return next((c for c in self.controllers if c.name == name), None)

    @property
    def daemonsets(self) -> DaemonSetController:
        """kube-controller-manager's DaemonSet controller (always on)."""
        found = self.get("daemonset")
        assert isinstance(found, DaemonSetController)
        return found

    @property
    def operator(self) -> OperatorImitation | None:
        """The GPU Operator imitation, when on."""
        found = self.get("operator")
        return found if isinstance(found, OperatorImitation) else None
