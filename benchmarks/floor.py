"""The rollout floor: how long the simulated rollouts of phase 1 alone take (pure).

Phase 1 rolls each DCGM/Exporter DaemonSet in turn (the runner finishes one rollout before it
labels the next). A RollingUpdate with `maxUnavailable` M and no surge replaces M nodes' pods per
wave; each wave costs the old pod's termination plus the new pod's start plus its readiness
probe's `initialDelaySeconds` (to Ready), so one DaemonSet needs ceil(desired / M) waves. The
floor is the sum over the rolled DaemonSets, in real seconds at the sim's time scale. Nothing
the tool does can finish sooner.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def scaled(value: Any, total: int, default: int = 1) -> int:
    """An int-or-percent (`"10%"`) scaled against `total`, rounded up (as the DaemonSet
    controller does for maxUnavailable)."""
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * float(value[:-1]) / 100.0)
    return int(value)


def probe_delay(ds: Mapping[str, Any]) -> float:
    """The largest `readinessProbe.initialDelaySeconds` of the template's containers: the sim's
    kubelet holds Ready that long after the containers start (as the kubelet's prober does)."""
    template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    return max([0.0] + [float((c.get("readinessProbe") or {}).get("initialDelaySeconds") or 0)
                        for c in template.get("containers") or []])


@dataclass(frozen=True)
class RolloutFloor:
    daemonset: str
    desired: int
    max_unavailable: int
    waves: int
    seconds: float  # real seconds

    def as_dict(self) -> dict[str, Any]:
        return {"daemonset": self.daemonset, "desired": self.desired,
                "max_unavailable": self.max_unavailable, "waves": self.waves,
                "seconds": round(self.seconds, 3)}


def daemonset_floor(ds: Mapping[str, Any], *, pod_start_seconds: float,
                    termination_seconds: float, time_scale: float) -> RolloutFloor:
    """One DaemonSet's rollout floor (real seconds)."""
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled") or 0)
    strategy = (ds.get("spec") or {}).get("updateStrategy") or {}
    rolling = strategy.get("rollingUpdate") or {}
    max_unavailable = max(1, scaled(rolling.get("maxUnavailable"), desired))
    waves = math.ceil(desired / max_unavailable) if desired else 0
    per_wave = (termination_seconds + pod_start_seconds + probe_delay(ds)) * time_scale
    name = str((ds.get("metadata") or {}).get("name", ""))
    return RolloutFloor(name, desired, max_unavailable, waves, waves * per_wave)


def phase1_floor(daemonsets: Iterable[Mapping[str, Any]], *, pod_start_seconds: float,
                 termination_seconds: float, time_scale: float) -> tuple[float, list[RolloutFloor]]:
    """The floor of phase 1: the rolled DaemonSets one after the other."""
    parts = [daemonset_floor(ds, pod_start_seconds=pod_start_seconds,
                             termination_seconds=termination_seconds, time_scale=time_scale)
             for ds in daemonsets]
    return sum(p.seconds for p in parts), parts
