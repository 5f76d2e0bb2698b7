"""The guard's writers: Service patches and shared EndpointSlice writes, sent, counted, logged
and recorded as Events; what did not land comes back as a `Refusal`. Every write first asks the
`fence` (the elector's `leading`). Slice writes go as the EndpointSlice controller's do: WORKERS
in flight, those restoring reach to the most nodes first, deletes once the rest is answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from migrator.engine.clock import Clock
from migrator.engine.events import NORMAL, WARNING, Recorder, typed
from migrator.engine.serving import GuardMetrics
from migrator.errors import APIConflict, APIError, APIInvalid, APINotFound, APITestFailed
from migrator.model import guarding, kinds, sharing
from migrator.model import objects as o
from migrator.model.guarding import Correction
from migrator.model.sharing import SliceWrite

if TYPE_CHECKING:
    from migrator.kube.client import Kube

Obj = dict[str, Any]
Log = Callable[[str], None]
R = TypeVar("R")
WORKERS = 16
# Correction action → the Event on the alias (type, reason, action); a hold needs someone's fix.
CORRECTION_EVENTS = {guarding.HOLD: (WARNING, "SelectorHeld", "Hold"),
                     guarding.RELEASE: (NORMAL, "SelectorReleased", "Release"),
                     guarding.CLEAR: (NORMAL, "HoldCleared", "Release"),
                     guarding.SYNC: (NORMAL, "ConfigResynced", "Resync")}
RECREATED = "the GPUCluster stack needs the stable name and no Service holds it any more"


class Outcome(Enum):
    """Why a write was not written (the `result` label of `dcgm_migrate_writes_total`)."""

    CONFLICT = "conflict"  # changed meanwhile: re-decided on the next pass
    GONE = "gone"  # the object no longer exists
    REFUSED = "refused"  # the API server refused it (invalid, forbidden): tried every pass
    NOT_LEADING = "not-leading"  # the fence was closed: not sent at all


@dataclass(frozen=True)
class Refusal:
    """One write that did not land, with the API Status the server answered."""

    outcome: Outcome
    kind: str  # Service | EndpointSlice
    name: str
    action: str  # hold | release | clear | sync | create | update | delete
    service: str  # the stable Service it is for
    status: int = 0
    reason: str = ""  # the Status reason: Conflict, Invalid, Forbidden, NotFound, ...
    message: str = ""
    causes: tuple[str, ...] = ()

    @staticmethod
    def of(exc: APIError, outcome: Outcome, kind: str, name: str, action: str,
           service: str) -> Refusal:
        return Refusal(outcome, kind, name, action, service, exc.status, exc.reason,
                       exc.message, exc.causes)

    def __str__(self) -> str:
        """The line the log, `guard --once` and the Event show."""
        target = (f"{self.kind}/{self.name}" if self.kind == kinds.SERVICE.kind
                  else f"{self.action} {self.kind}/{self.name} for Service/{self.service}")
        why = {Outcome.CONFLICT: f"changed meanwhile; {self.action} re-decided on the next pass",
               Outcome.GONE: "gone", Outcome.NOT_LEADING: "not written: this replica stopped "
               "leading"}.get(self.outcome, self.message)
        return f"{target}: {why}"


def _ready_nodes(endpoints: Iterable[Mapping[str, Any]]) -> set[str]:
    return {str(ep["nodeName"]) for ep in endpoints
            if (ep.get("conditions") or {}).get("ready", True) and ep.get("nodeName")}


def _pod(ep: Mapping[str, Any]) -> str:
    ref = ep.get("targetRef") or {}
    return str(ref.get("uid") or ref.get("name") or "")


def caught_up(slices: Iterable[Mapping[str, Any]], sources: Mapping[str, str]
              ) -> list[Mapping[str, Any]]:
    """The slices as the EndpointSlice controller will have them once caught up with a takeover
    (`sources`: shared name → its GPUCluster Service): pods it has not removed yet left out."""
    rows = [(sl, o.labels(sl).get(o.MANAGED_BY_LABEL) == o.CONTROLLER_NAME,
             o.labels(sl).get(o.SERVICE_NAME_LABEL, "")) for sl in slices]
    joining: dict[str, set[str]] = {}
    for sl, mine, name in rows:
        if mine and name in sources.values():
            joining.setdefault(name, set()).update(_pod(ep) for ep in sl.get("endpoints") or [])
    out: list[Mapping[str, Any]] = []
    for sl, mine, name in rows:
        eps, pods = sl.get("endpoints") or [], joining.get(sources.get(name, ""))
        kept = [ep for ep in eps if _pod(ep) not in pods] if mine and pods else eps
        out.append({**sl, "endpoints": kept} if len(kept) != len(eps) else sl)
    return out


def covered_nodes(slices: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Stable name → the nodes on which any of its slices lists a ready endpoint."""
    out: dict[str, set[str]] = {}
    for sl in slices:
        name = o.labels(sl).get(o.SERVICE_NAME_LABEL)
        if name:
            out.setdefault(name, set()).update(_ready_nodes(sl.get("endpoints") or []))
    return out


def ordered(writes: Sequence[SliceWrite], covered: Mapping[str, set[str]]
            ) -> tuple[list[SliceWrite], list[SliceWrite]]:
    """(creates and updates, most nodes given a first ready endpoint first; deletes)."""
    def gain(w: SliceWrite) -> int:
        return len(_ready_nodes(w.body.get("endpoints") or []) - covered.get(w.service, set()))

    rest = [w for w in writes if w.action != sharing.DELETE]
    return (sorted(rest, key=lambda w: -gain(w)),  # sorted() is stable
            [w for w in writes if w.action == sharing.DELETE])


def run(batches: Iterable[Sequence[SliceWrite]], write: Callable[[SliceWrite], R],
        workers: int = WORKERS) -> list[tuple[SliceWrite, R]]:
    """`write` each batch, `workers` at once, a batch once the one before is answered."""
    out: list[tuple[SliceWrite, R]] = []
    with ThreadPoolExecutor(max_workers=max(1, workers),
                            thread_name_prefix="guard-slice-write") as pool:
        for batch in batches:
            out += zip(batch, pool.map(write, batch), strict=True)
    return out


class Writers:
    """Sends what the reconciler decided."""

    def __init__(self, kube: Kube, namespace: str, clock: Clock, metrics: GuardMetrics,
                 recorder: Recorder, *, log: Log, note: Log) -> None:
        self.kube, self.namespace, self.clock = kube, namespace, clock
        self.metrics, self.recorder, self.log, self.note = metrics, recorder, log, note
        self.fence: Callable[[], bool] = lambda: True  # the elector's `leading` while `run` runs
        self.written: list[Correction] = []  # every correction written, oldest first
        self.last_written: dict[str, float] = {}  # stable name → its last slice write's answer
        # Patches refused as invalid, by (Service, patch): the same patch would be refused again.
        self.refused: dict[tuple[str, str], Refusal] = {}

    def _unfenced(self, kind: str, name: str, action: str, service: str) -> Refusal | None:
        """None while this replica may write; else why nothing is sent."""
        return None if self.fence() else Refusal(Outcome.NOT_LEADING, kind, name, action, service)

    def _refused(self, refusal: Refusal) -> Refusal:
        if refusal.outcome is not Outcome.NOT_LEADING:  # nothing was sent
            self.metrics.writes.labels(refusal.kind, refusal.outcome.value).inc()
        return refusal

    def apply(self, corrections: Sequence[Correction], *, since: float | None = None
              ) -> tuple[list[Correction], list[Refusal]]:
        """(written, not written). `since`: when the event that made them needed arrived."""
        done: list[Correction] = []
        skipped: list[Refusal] = []
        svc = kinds.SERVICE.kind
        for c in corrections:
            key = (c.service, json.dumps(c.patch(), sort_keys=True))
            # Unfenced, or the same patch of the same version refused before: refused again.
            unsent = self._unfenced(svc, c.service, c.action, c.service) or self.refused.get(key)
            if unsent is not None:
                skipped.append(unsent)
                continue
            live: Obj | None
            try:
                live = self.kube.patch(kinds.SERVICE, c.service, self.namespace, c.patch(),
                                       patch_type="json")
            except APITestFailed as exc:  # changed meanwhile (or ours landed)
                live = self.kube.get(kinds.SERVICE, c.service, self.namespace)
                if not c.satisfied(live):
                    skipped.append(self._refused(Refusal.of(exc, Outcome.CONFLICT, svc,
                                                            c.service, c.action, c.service)))
                    continue
            except (APIInvalid, APINotFound) as exc:
                gone = isinstance(exc, APINotFound)
                refusal = self._refused(Refusal.of(exc, Outcome.GONE if gone else
                                                   Outcome.REFUSED, svc, c.service, c.action,
                                                   c.service))
                skipped.append(refusal)
                if not gone:  # refused as such: an immutable field, a policy
                    self.refused = {k: r for k, r in self.refused.items() if k[0] != c.service}
                    self.refused[key] = refusal
                    self.log(f"{refusal}; not sent again until Service/{c.service} changes")
                continue
            done.append(c)
            self.written.append(c)
            self.metrics.writes.labels(svc, "ok").inc()
            if since is not None:
                self.metrics.repaired(c.action, self.clock.monotonic() - since)
            self.log(f"{c.action} Service/{c.service}: {c.reason}")
            type_, reason, action = CORRECTION_EVENTS.get(c.action, (NORMAL, "Corrected", "Patch"))
            if live is not None:
                self.recorder.record(typed(kinds.SERVICE, live), type_, reason, action,
                                     c.reason)
        for s in skipped:
            if s.outcome is not Outcome.REFUSED:  # a refusal is said once, as it comes
                self.log(str(s))
        return done, skipped

    def create_aliases(self, bodies: Sequence[Obj]) -> list[str]:
        """Create the aliases again; one taken meanwhile is re-decided on the next pass."""
        done = []
        for body in bodies:
            name = o.name(body)
            unsent = self._unfenced(kinds.SERVICE.kind, name, "create", name)
            if unsent is not None:
                self.log(str(unsent))
                continue
            try:
                created = self.kube.create(body)
            except APIConflict as exc:
                self.log(str(self._refused(Refusal.of(exc, Outcome.CONFLICT, kinds.SERVICE.kind,
                                                      name, "create", name))))
                continue
            done.append(name)
            self.metrics.writes.labels(kinds.SERVICE.kind, "ok").inc()
            self.log(f"create Service/{name}: {RECREATED}")
            self.recorder.record(typed(kinds.SERVICE, created), NORMAL, "AliasCreated",
                                 "Create", f"created as the tool's alias: {RECREATED}")
        return done

    def write_slices(self, writes: Sequence[SliceWrite], *,
                     covered: dict[str, set[str]] | None = None
                     ) -> tuple[list[SliceWrite], list[Refusal]]:
        """(written, refused). `covered`: stable name → nodes with a ready endpoint now."""
        results = run(ordered(writes, covered or {}), self._write_slice)
        done: list[SliceWrite] = []
        refused: list[Refusal] = []
        self.last_written = {}
        for w, (refusal, at) in results:
            if refusal is None:
                self.metrics.writes.labels(kinds.ENDPOINTSLICE.kind, "ok").inc()
                done.append(w)
                self.last_written[w.service] = max(at, self.last_written.get(w.service, at))
                self.log(f"{w.action} EndpointSlice/{w.name} for Service/{w.service}: "
                         f"{w.reason}")
                continue
            self._refused(refusal)
            if refusal.outcome is Outcome.REFUSED:
                refused.append(refusal)
                self.note(f"{refusal}; the other slices are written, this one is tried again "
                          "on every pass")
            else:
                self.log(str(refusal))
        return done, refused

    def _write_slice(self, w: SliceWrite) -> tuple[Refusal | None, float]:
        """One slice write on a pool thread: (None or why not, when its answer came)."""
        refusal = self._unfenced(kinds.ENDPOINTSLICE.kind, w.name, w.action, w.service)
        if refusal is None:
            try:
                if w.action == sharing.CREATE:
                    self.kube.create(w.body)
                elif w.action == sharing.UPDATE:
                    self.kube.replace({**w.body, "metadata": {
                        **w.body["metadata"], "resourceVersion": w.resource_version}})
                else:
                    self.kube.delete(kinds.ENDPOINTSLICE, w.name, self.namespace,
                                     resource_version=w.resource_version)
            except APIError as exc:
                outcome = (Outcome.CONFLICT if isinstance(exc, APIConflict | APINotFound)
                           else Outcome.REFUSED)
                refusal = Refusal.of(exc, outcome, kinds.ENDPOINTSLICE.kind, w.name, w.action,
                                     w.service)
        return refusal, self.clock.monotonic()
