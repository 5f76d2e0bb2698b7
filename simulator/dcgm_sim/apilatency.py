"""A write's latency as a real API server has it, instead of the sim's own handling time.

Without a model, a client of the sim waits for its write as long as the sim's Python takes:
admission, validation, the store lock (held meanwhile by the simulated controllers, which at
fleet scale create thousands of pods in the same interpreter), the commit's watch fan-out,
and the interpreter's one core shared with all of it. At a time scale of 1.0 every real
second of that is a simulated second, so a benchmark of a client's reaction measured the
sim's slowness: 250 ms per EndpointSlice write, median, during a 15,000-node operator
takeover (docs/performance.md, "Guard with both stacks").

A real API server answers a single-object write in a few milliseconds: etcd commits one in
under a millisecond under light load on common cloud machines (etcd's performance guide,
"Understanding performance"), and the API server's decode, admission, validation and encode
of one object add a few more, on as many cores as it has, for many clients at once
(upstream's scalability SLO is a ceiling on the 99th percentile, 1 s, not the typical
figure: sig-scalability `slos/api_call_latency.md`).

`WriteLatency` serves each mutating request as such a server would, in simulated time: the
modelled `seconds` pass first (the clock runs, and concurrent writes overlap, as on a server
with cores to spare), then the sim does the write with simulated time held
(`SimClock.held`), so its own handling costs no simulated time. What a client measures
between sending the write and seeing its watch event is then the model's latency, plus the
client's own time and the sim's delivery of the answer. Reads are not modelled (the clients
measured read from watches). Opt-in: `ApiServer.model_writes`; without it the sim keeps
answering in its own time, as every test expects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from dcgm_sim.clock import SimClock

R = TypeVar("R")
DEFAULT_WRITE_SECONDS = 0.005  # a few ms per single-object write (see the module docstring)


@dataclass(frozen=True)
class WriteLatency:
    """Each write costs `seconds` of simulated time, and the sim's handling of it none."""

    clock: SimClock
    seconds: float = DEFAULT_WRITE_SECONDS

    def serve(self, handle: Callable[[], R]) -> R:
        self.clock.sleep(self.seconds)
        with self.clock.held():
            return handle()
