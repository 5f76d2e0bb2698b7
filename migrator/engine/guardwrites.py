"""The guard's writers: the Service patches (corrections to the tool's aliases, aliases created
again) and the shared EndpointSlice writes. What to write is decided before (`model/guarding.py`,
`model/sharing.py`); here it is sent, counted, logged and recorded as an Event, and what was not
written comes back as a typed `Refusal`, never as text a caller parses.

Every write first asks the `fence` whether this replica may still write: the guard's leader
election (`engine/elector.py`) closes it the moment a renewal fails past its renew deadline, which
is before any other replica can take the Lease, so two replicas never write at once. A write the
fence stops is a `NOT_LEADING` refusal; nothing is sent.

Corrections are JSON patches with a `test` of the resourceVersion they were decided on (and of
the old selector for a move): an alias changed meanwhile is re-decided on the next pass, never
overwritten. Slice writes carry the resourceVersion decided on; up to `concurrency` are in flight
at once, in the order `engine/slicewrites.py` gives.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from migrator.engine import slicewrites
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
Fence = Callable[[], bool]  # may this replica write now? (the elector's `leading`)
# Correction action → the Event on the alias: (type, reason, action). A hold is a Warning: the
# operator rendered a DaemonSet without the common label, and someone must bring it back.
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
    """One write that did not land: the object, what was to be done, and the API Status
    (`status`, `reason`) with its message and causes, as the API server answered."""

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


class Writers:
    """Sends what the reconciler decided (module docstring)."""

    def __init__(self, kube: Kube, namespace: str, clock: Clock, metrics: GuardMetrics,
                 recorder: Recorder, *, log: Log, note: Log, fence: Fence = lambda: True,
                 concurrency: int = slicewrites.WORKERS) -> None:
        self.kube, self.namespace, self.clock = kube, namespace, clock
        self.metrics, self.recorder, self.log, self.note = metrics, recorder, log, note
        self.fence = fence
        self.concurrency = concurrency
        self.written: list[Correction] = []  # every correction written, oldest first
        self.slice_writes: list[SliceWrite] = []  # every shared-slice write, oldest first
        self.last_written: dict[str, float] = {}  # stable name → its last slice write's answer
        # Service patches the API server refused as invalid, by (Service, the patch): the
        # patch tests the resourceVersion it was decided on, so the same patch is the same
        # request on the same object and would be refused again; a changed Service makes
        # another patch, which is sent.
        self.refused: dict[tuple[str, str], Refusal] = {}

    def _refused(self, refusal: Refusal) -> Refusal:
        if refusal.outcome is not Outcome.NOT_LEADING:  # nothing was sent
            self.metrics.wrote(refusal.kind, refusal.outcome.value)
        return refusal

    # ---- Services ----------------------------------------------------------------------------

    def apply(self, corrections: Sequence[Correction], *, since: float | None = None
              ) -> tuple[list[Correction], list[Refusal]]:
        """Write the corrections (guarded JSON patches): (written, not written). `since`: when
        the event that made them needed arrived (monotonic), for the repair-time histogram."""
        done: list[Correction] = []
        skipped: list[Refusal] = []
        for c in corrections:
            svc = kinds.SERVICE.kind
            if not self.fence():
                skipped.append(Refusal(Outcome.NOT_LEADING, svc, c.service, c.action, c.service))
                continue
            key = (c.service, json.dumps(c.patch(), sort_keys=True))
            refused = self.refused.get(key)
            if refused is not None:  # the same patch of the same version: refused again
                skipped.append(refused)
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
            except APIInvalid as exc:  # refused as such: an immutable field, a policy
                refusal = self._refused(Refusal.of(exc, Outcome.REFUSED, svc, c.service,
                                                   c.action, c.service))
                self.refused = {k: r for k, r in self.refused.items() if k[0] != c.service}
                self.refused[key] = refusal
                skipped.append(refusal)
                self.log(f"{refusal}; not sent again until Service/{c.service} changes")
                continue
            except APINotFound as exc:
                skipped.append(self._refused(Refusal.of(exc, Outcome.GONE, svc, c.service,
                                                        c.action, c.service)))
                continue
            done.append(c)
            self.written.append(c)
            self.metrics.wrote(svc, "ok")
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
            if not self.fence():
                self.log(str(Refusal(Outcome.NOT_LEADING, kinds.SERVICE.kind, name, "create",
                                     name)))
                continue
            try:
                created = self.kube.create(body)
            except APIConflict as exc:
                self.log(str(self._refused(Refusal.of(exc, Outcome.CONFLICT, kinds.SERVICE.kind,
                                                      name, "create", name))))
                continue
            done.append(name)
            self.metrics.wrote(kinds.SERVICE.kind, "ok")
            self.log(f"create Service/{name}: {RECREATED}")
            self.recorder.record(typed(kinds.SERVICE, created), NORMAL, "AliasCreated",
                                 "Create", f"created as the tool's alias: {RECREATED}")
        return done

    # ---- shared EndpointSlices ---------------------------------------------------------------

    def write_slices(self, writes: Sequence[SliceWrite], *,
                     covered: dict[str, set[str]] | None = None
                     ) -> tuple[list[SliceWrite], list[Refusal]]:
        """Create, update (at the version decided on) or delete shared slices: (written,
        refused). A slice changed meanwhile is re-decided on the next pass (logged, not
        returned); one the API server refuses (invalid, forbidden) is returned, noted once, and
        the rest are still written.

        Up to `concurrency` at once, the writes that give nodes of `covered` (stable name →
        nodes with a ready endpoint now) their first endpoint first, deletes once the rest is
        answered (`engine/slicewrites.py`)."""
        first, deletes = slicewrites.ordered(writes, covered or {})
        results = slicewrites.run((first, deletes), self._write_slice, self.concurrency)
        done: list[SliceWrite] = []
        refused: list[Refusal] = []
        self.last_written = {}
        for w, (refusal, at) in results:
            if refusal is None:
                self.metrics.wrote(kinds.ENDPOINTSLICE.kind, "ok")
                done.append(w)
                self.slice_writes.append(w)
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
        """One slice write, on a pool thread: (None when written, else why not; when its
        answer came)."""
        def refusal(exc: APIError, outcome: Outcome) -> tuple[Refusal | None, float]:
            return (Refusal.of(exc, outcome, kinds.ENDPOINTSLICE.kind, w.name, w.action,
                               w.service), self.clock.monotonic())

        if not self.fence():
            return (Refusal(Outcome.NOT_LEADING, kinds.ENDPOINTSLICE.kind, w.name, w.action,
                            w.service), self.clock.monotonic())
        try:
            if w.action == sharing.CREATE:
                self.kube.create(w.body)
            elif w.action == sharing.UPDATE:
                body = {**w.body, "metadata": {**w.body["metadata"],
                                               "resourceVersion": w.resource_version}}
                self.kube.replace(body)
            else:
                self.kube.delete(kinds.ENDPOINTSLICE, w.name, self.namespace,
                                 resource_version=w.resource_version)
        except (APIConflict, APINotFound) as exc:
            return refusal(exc, Outcome.CONFLICT)
        except APIError as exc:
            return refusal(exc, Outcome.REFUSED)
        return None, self.clock.monotonic()
