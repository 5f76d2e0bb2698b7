"""The simulated cluster's controllers: DaemonSet, kubelet (pod start/readiness/termination and
pod GC), the scheduler (pods without a node), Deployment, ReplicaSet, Job, EndpointSlice,
Endpoints, garbage collector, node lifecycle (node failure), DRA resource claims (with the
scheduler's claim allocation), and an optional GPU Operator imitation.

All run on one thread (`base.ControllerLoop`), are fed by `Store.subscribe` (the callback only
enqueues) and by timers on the injectable `SimClock`, and write straight into the store, never
over HTTP, so the API request log shows only what clients did. Import `dcgm_sim` only, never
the tool.
"""

from dcgm_sim.controllers.runner import ControllerSet

__all__ = ["ControllerSet"]
