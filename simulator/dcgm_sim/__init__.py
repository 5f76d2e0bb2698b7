"""The simulated GPU cluster: a Kubernetes API server stand-in on loopback plus the controllers
the migration's gates depend on (DaemonSet, pod readiness, EndpointSlice, garbage collector, an
imitation of the GPU Operator's reconcile loop).

It is a server, not part of the tool's layers, and the judge of the tool: it imports nothing of
the tool (its resource catalog is `kinds`, its label selectors `labelselectors`, its field
selectors `fieldselectors`), so a misreading in the tool cannot be shared by the sim; nothing in
the tool's engine imports it (only the CLI's `sim`/`demo` commands). `.importlinter` keeps both
directions so.
"""
