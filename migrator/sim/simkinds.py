"""The kinds the simulated API server serves: the tool's table (`migrator.model.kinds`) plus
the ones only the sim needs, so the tool's table stays what the tool reads or writes.

- core/v1 `endpoints` (kind Endpoints, namespaced, short name `ep`, no status subresource;
  singular `endpoints`, as upstream's discovery lists it), kept by the endpoints controller.
- `monitoring.coreos.com/v1` `podmonitors` (kind PodMonitor) is in the tool's table; it is
  re-exported here, so the sim names every kind it adds or serves beyond the core ones from
  one place.

Every part of the sim that serves or tracks "all kinds" (store, routing, discovery, garbage
collector) reads `ALL` / `BY_KEY` / `BY_KIND` here. A kind the tool's table gains later is
taken from there, never listed twice. Pure.
"""

from __future__ import annotations

from migrator.model import kinds
from migrator.model.kinds import Kind

ENDPOINTS: Kind = kinds.BY_KEY.get(
    "endpoints", Kind("", "v1", "endpoints", "Endpoints", True, ("ep",)))
POD_MONITOR: Kind = kinds.POD_MONITOR

SIM_ONLY: tuple[Kind, ...] = tuple(k for k in (ENDPOINTS,) if k.key not in kinds.BY_KEY)
ALL: tuple[Kind, ...] = kinds.ALL + SIM_ONLY
BY_KEY: dict[str, Kind] = {k.key: k for k in ALL}
BY_KIND: dict[str, Kind] = {k.kind: k for k in ALL}
