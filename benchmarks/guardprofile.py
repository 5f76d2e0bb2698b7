"""Where a takeover's reaction goes, from the sim's request log (`python3 -m benchmarks.guard
--profile`): the benchmark's only HTTP client is the guard, so every record after a takeover
is the guard's.

For one stable name's reaction (takeover write → the tool's slices cover every GPUCluster node
again), in milliseconds from the takeover: when the guard's pass first reached the API server
(its read of the state ConfigMap), when its first and last EndpointSlice writes arrived and were
answered, how many it sent and their bytes, and how long the sim took to answer each (the
request log's `duration_ms`: the sim's handler, from the request's first byte to its answer,
waiting for the store lock and the interpreter included). Wall-clock stamps (`time.time()`),
which equal simulated time at the benchmark's time scale of 1.0. Pure but for the records given.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Breakdown:
    """One reaction, its parts in ms from the takeover (None: no such request)."""

    name: str
    reaction_ms: float
    pass_read_ms: float | None  # the guard's pass reached the server (state ConfigMap GET)
    first_write_ms: float | None  # the first slice write's arrival
    last_answer_ms: float | None  # the last slice write's answer
    writes: int
    write_bytes: int  # answers' bytes
    server_ms_median: float
    server_ms_max: float
    server_ms_sum: float

    def line(self) -> str:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.0f}"
        return (f"{self.name}: reaction {self.reaction_ms:.0f} ms; pass read at "
                f"{ms(self.pass_read_ms)}, writes {ms(self.first_write_ms)}-"
                f"{ms(self.last_answer_ms)} ms: {self.writes} writes, "
                f"{self.write_bytes / 1e6:.2f} MB answered, sim per write median "
                f"{self.server_ms_median:.1f} / max {self.server_ms_max:.1f} ms "
                f"(sum {self.server_ms_sum:.0f} ms)")


def breakdown(name: str, takeover_wall: float, reaction_s: float, records: Sequence[Any],
              state_configmap: str) -> Breakdown:
    """The reaction of `name`, from the request records that arrived after its takeover
    (`takeover_wall`, time.time()) and were answered before it ended."""
    end = takeover_wall + reaction_s
    def arrived(r: Any) -> float:
        return float(r.time) - float(r.duration_ms) / 1000.0
    inside = [r for r in records if takeover_wall <= float(r.time) <= end + 0.001]
    reads = [arrived(r) for r in inside
             if r.resource == "configmaps" and r.name == state_configmap and r.verb == "get"]
    writes = [r for r in inside if r.resource == "endpointslices" and r.is_write]
    durations = [float(r.duration_ms) for r in writes]
    def rel(t: float | None) -> float | None:
        return None if t is None else (t - takeover_wall) * 1000.0
    return Breakdown(
        name=name, reaction_ms=reaction_s * 1000.0,
        pass_read_ms=rel(min(reads) if reads else None),
        first_write_ms=rel(min(map(arrived, writes)) if writes else None),
        last_answer_ms=rel(max(float(r.time) for r in writes) if writes else None),
        writes=len(writes), write_bytes=sum(int(r.bytes_sent) for r in writes),
        server_ms_median=statistics.median(durations) if durations else 0.0,
        server_ms_max=max(durations, default=0.0), server_ms_sum=sum(durations))
