"""A container runtime for the simulated kubelet: pods whose image is the tool's own OCI image
(`sim serve --images DIR`) run for real, every other pod stays simulated.

Daemonless, as tests/image run the image: its layers unpacked once (`image`), each container a
process in a private mount namespace chrooted into that root filesystem as the pod's user
(`launch`, after the pure `containerspec`), each pod a network namespace of its own holding
only loopback, its pod IPs and the `kubernetes` Service address, where a relay forwards to the
sim's HTTPS listener (`netns`, `relay`). `worker` runs one pod's containers (restart policy,
CrashLoopBackOff, graceful stop, probes from `prober`), `logs` keeps their output in the CRI
log format the pods/log subresource serves (`podlog`), `status` turns a worker's state into
the pod status the kubelet writes, and `runtime` ties them to the kubelet. Needs root.
"""
