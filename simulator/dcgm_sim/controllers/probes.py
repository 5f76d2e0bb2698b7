"""Readiness probes as the kubelet's prober runs them, reduced to their timing (pure helpers).

After kubernetes/pkg/kubelet/prober/worker.go: a readiness probe's result starts as Failure
and the worker does not probe before `initialDelaySeconds` have passed since the container
started, so a container with a probe is Ready only once that delay is over (the sim's probe
then succeeds at once; upstream the first probe lands within one `periodSeconds`). A
container without a readiness probe is Ready as soon as it runs. The pod is Ready when every
container is (`status.conditions[Ready]`, pkg/kubelet/status/generate.go), so its delay is the
largest of its containers'.

Probe flaps are a sim fault driven through the API: the Node annotation
`sim.dcgm-migrate/probe-flap: "<seconds>"` makes every Running, Ready pod on that node fail its
readiness probe for that many simulated seconds (Ready=False, containers keep running), then
pass again. Each new value starts a new flap; pods started later are not affected.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

PROBE_FLAP_ANNOTATION = "sim.dcgm-migrate/probe-flap"


def readiness_delay(pod: Mapping[str, Any]) -> float:
    """Seconds after the containers start before the pod can be Ready: the largest
    `readinessProbe.initialDelaySeconds` of its containers (0 without probes)."""
    delays = [0.0]
    for container in (pod.get("spec") or {}).get("containers") or []:
        probe = container.get("readinessProbe") or {}
        try:
            delays.append(max(0.0, float(probe.get("initialDelaySeconds") or 0)))
        except (TypeError, ValueError):
            continue
    return max(delays)


def flap_seconds(node: Mapping[str, Any] | None) -> float | None:
    """The node's probe-flap length in seconds, None when it has none (or a bad one)."""
    annotations = (node or {}).get("metadata", {}).get("annotations") or {}
    raw = annotations.get(PROBE_FLAP_ANNOTATION)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("ignoring bad %s annotation %r", PROBE_FLAP_ANNOTATION, raw)
        return None
    return value if value > 0 else None


def flap_key(node: Mapping[str, Any] | None) -> str | None:
    """What identifies one flap request: the raw annotation value (a new value, a new flap)."""
    annotations = (node or {}).get("metadata", {}).get("annotations") or {}
    raw = annotations.get(PROBE_FLAP_ANNOTATION)
    return None if raw is None else str(raw)
