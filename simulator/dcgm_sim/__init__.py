"""The simulated GPU cluster: a Kubernetes API server stand-in on loopback plus the controllers
the migration's gates depend on (DaemonSet, pod readiness, EndpointSlice, garbage collector, an
imitation of the GPU Operator's reconcile loop).

It is a server, not part of the tool's layers: it may import `migrator.model` and nothing else
of the tool, and nothing in the tool's engine imports it (only the CLI's `sim`/`demo` commands).
"""
