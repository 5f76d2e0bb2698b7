"""The order and concurrency of one pass's shared-slice writes.

An operator takeover of a 15,000-node cluster leaves 7,500 nodes without the stable names at
once: 75 slices of 100 endpoints per name to create. One request after another that took
12.5 s (median) to 17 s per name on the simulated cluster, while its API server was busy
creating the operator's 15,000 pods (docs/performance.md, "Guard with both stacks").

What upstream does instead, and what is taken here:

- **Independent writes in parallel, bounded.** The EndpointSlice controller reconciles
  `--concurrent-service-endpoint-syncs` (5) Services at once, each a burst of slice writes,
  through a client whose QPS the API server's priority and fairness bounds. The writes of one
  pass touch different slices (the model never moves an endpoint between existing slices:
  `sharing._family_writes`), so they commute; WORKERS of them are in flight at once. A small
  pool, not one thread per slice: the API server queues what it cannot serve, and a client
  that floods it only moves the wait into the server.
- **What restores reach first.** Writes that give nodes without any ready endpoint of the name
  their first one go before writes that only refresh endpoints that are reachable already,
  most nodes first; within a rank, the model's order (one stable name, then the other), so
  the first name is whole before the second rather than both at the very end.
- **Deletes last.** A slice is deleted once every create and update of the pass has been
  answered, so the endpoints a deleted slice still lists are never missing in between.
- **Not waiting for the EndpointSlice controller.** After a takeover, the controller's slices
  of the name still list the GPUCluster pods the tool's alias selected, until it rewrites them;
  those endpoints are read as already gone (`caught_up`).

Fuller slices were considered and not taken: `MAX_ENDPOINTS` stays the controller's 100
because every kube-proxy and every `role: endpointslice` scraper receives a whole slice on each
change; at 1,000 endpoints a single pod's restart would resend ten times the bytes to every
node of the cluster (docs/performance.md). The takeover pays for it with 150 requests instead
of 16, which against an API server that answers a write in a few milliseconds, WORKERS at a
time, is about ten round trips: measured with the sim's write latency modelled that way
(`benchmarks.guard --api-write-ms`), what was left of a takeover's reaction was the guard's
own decision before its first write, not its writes, and that is what was made cheaper
(`sharing._endpoints_of`: each slice's endpoints shaped once per version). More workers were
not taken either: the requests are built and their answers decoded on the guard's one
interpreter, so past a few in flight they only queue there instead of at the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from migrator.model import objects as o
from migrator.model import sharing
from migrator.model.sharing import SliceWrite

WORKERS = 16
R = TypeVar("R")


def _pod(ep: Mapping[str, Any]) -> str:
    ref = ep.get("targetRef") or {}
    return str(ref.get("uid") or ref.get("name") or "")


def caught_up(slices: Iterable[Mapping[str, Any]], sources: Mapping[str, str]
              ) -> list[Mapping[str, Any]]:
    """The slices as the EndpointSlice controller will have them once it has caught up with a
    takeover. `sources`: each shared stable name → the GPUCluster Service whose pods join it.
    The operator's Service of a shared name selects only its own pods (`sharing.shared_names`),
    so an endpoint of a GPUCluster pod in the controller's slices of that name is one the
    controller has not removed yet: the alias it served was just replaced. Read as covering
    its node, it would hold the guard's slices back until the controller rewrites them (a
    second, at 15,000 nodes, behind the takeover); left out, the guard's slices are written at
    once, and kube-proxy dedups the pod's address while both list it."""
    rows = [sl for sl in slices]
    joining: dict[str, set[str]] = {}
    for sl in rows:
        labels = o.labels(sl)
        if labels.get(sharing.MANAGED_BY_LABEL) == sharing.CONTROLLER_NAME:
            name = labels.get(sharing.SERVICE_NAME_LABEL, "")
            if name in sources.values():
                joining.setdefault(name, set()).update(
                    _pod(ep) for ep in sl.get("endpoints") or [])
    out: list[Mapping[str, Any]] = []
    for sl in rows:
        labels = o.labels(sl)
        name = labels.get(sharing.SERVICE_NAME_LABEL, "")
        pods = joining.get(sources.get(name, ""), set())
        if labels.get(sharing.MANAGED_BY_LABEL) == sharing.CONTROLLER_NAME and pods:
            kept = [ep for ep in sl.get("endpoints") or [] if _pod(ep) not in pods]
            if len(kept) != len(sl.get("endpoints") or []):
                sl = {**sl, "endpoints": kept}
        out.append(sl)
    return out


def covered_nodes(slices: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Stable name → the nodes on which any of its slices lists a ready endpoint."""
    out: dict[str, set[str]] = {}
    for sl in slices:
        name = o.labels(sl).get(sharing.SERVICE_NAME_LABEL)
        if not name:
            continue
        nodes = out.setdefault(name, set())
        for ep in sl.get("endpoints") or []:
            if (ep.get("conditions") or {}).get("ready", True) and ep.get("nodeName"):
                nodes.add(str(ep["nodeName"]))
    return out


def gain(write: SliceWrite, covered: Mapping[str, set[str]]) -> int:
    """Nodes this write gives their first ready endpoint of its name."""
    if write.action == sharing.DELETE:
        return 0
    have = covered.get(write.service, set())
    return len({str(ep.get("nodeName")) for ep in write.body.get("endpoints") or []
                if (ep.get("conditions") or {}).get("ready", True) and ep.get("nodeName")}
               - have)


def ordered(writes: Sequence[SliceWrite], covered: Mapping[str, set[str]]
            ) -> tuple[list[SliceWrite], list[SliceWrite]]:
    """(creates and updates, most nodes restored first; deletes), each stable in the model's
    order within a rank."""
    rest = [w for w in writes if w.action != sharing.DELETE]
    ranked = sorted(range(len(rest)), key=lambda i: (-gain(rest[i], covered), i))
    return [rest[i] for i in ranked], [w for w in writes if w.action == sharing.DELETE]


def run(batches: Iterable[Sequence[SliceWrite]], write: Callable[[SliceWrite], R],
        workers: int = WORKERS) -> list[tuple[SliceWrite, R]]:
    """`write` every write of each batch, at most `workers` at once, a batch only once the one
    before it is answered; results in the order given."""
    out: list[tuple[SliceWrite, R]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers),
                            thread_name_prefix="guard-slice-write") as pool:
        for batch in batches:
            out += zip(batch, pool.map(write, batch), strict=True)
    return out
