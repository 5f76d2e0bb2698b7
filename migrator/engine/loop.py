"""What the loop (gate → write → record → gate) works with, as `commands` builds it, so the
parts of the loop outside the runner — `afterwrite` (a step's post-gates) and `ondelete`
(`RollPods`, pod by pod) — depend on this and never on `runner`:

    Run          one apply or rollback: built once by `commands` and passed down: the
                 connection, namespace, catalog, the run's cache, its state session, the clock,
                 the listener and the settings (nothing is found by registry)
    Loop         the loop as those parts use it (reads, the waiter, saves, the failure path);
                 `runner.Runner` is the one implementation
    PhaseWork    the phase the loop works on: its module, record, plan, baselines, direction
    RunSettings  what the command asked for (timeouts, settle, plan options)
    RunResult    what the run did, for the final report
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, NoReturn, Protocol

from migrator.engine.clock import Clock
from migrator.engine.informer import Informer
from migrator.engine.progress import Listener
from migrator.engine.state import PhaseRecord, RunSession
from migrator.engine.waiting import Waiter
from migrator.model.gates import ServiceBaseline
from migrator.model.planning import Options, PhasePlan, PlanContext
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog
from migrator.model.steps import Step
from migrator.phases import Phase

if TYPE_CHECKING:
    from migrator.engine.state.document import StepRecord
    from migrator.kube.client import Kube


@dataclass
class RunSettings:
    timeout: float = 600.0  # progress deadline: seconds a wait may go without any progress
    settle: float = 30.0  # seconds after a selector change before removing what it needed
    options: Options = field(default_factory=Options)


@dataclass(frozen=True)
class Run:
    """One apply or rollback: built once by `commands`, handed to the `Runner`, and from it to
    every read (the cache), save (the session) and wait (the clock) of the run."""

    kube: Kube
    namespace: str
    catalog: Catalog
    cache: Informer | None  # the run's cache (engine/informer.py); None: read the API server
    session: RunSession  # the lock, the state document's saves, the heartbeat
    clock: Clock
    listener: Listener
    settings: RunSettings = field(default_factory=RunSettings)


@dataclass
class RunResult:
    writes: int = 0
    lowest: dict[str, tuple[int, int]] = field(default_factory=dict)  # svc → (lowest, baseline)
    notes: list[str] = field(default_factory=list)  # what happened that did not stop the run


class Direction(Enum):
    FORWARD = "forward"  # `apply`: the phase's plan, recorded in the record's steps
    ROLLBACK = "rollback"  # `rollback`: its inverse, progress recorded in the record's undo


@dataclass(frozen=True)
class PhaseWork:
    """One phase as the loop runs it: which way, and what its steps' waits hold it to (the
    no-loss baselines and the plan's tolerances)."""

    module: Phase
    rec: PhaseRecord
    plan: PhasePlan
    bases: tuple[ServiceBaseline, ...]
    direction: Direction

    @property
    def rollback(self) -> bool:
        return self.direction is Direction.ROLLBACK

    @property
    def records(self) -> list[StepRecord]:
        """The step records of this direction: rollback keeps its own (`undo`)."""
        return self.rec.undo if self.rollback else self.rec.steps

    def mark(self, step: Step, status: str) -> None:
        self.rec.mark(step, status, undo=self.rollback)


class Loop(Protocol):
    """The loop, as `afterwrite` and `ondelete` use it (`runner.Runner` is one)."""

    kube: Kube
    namespace: str
    catalog: Catalog
    settings: RunSettings
    clock: Clock
    listener: Listener
    waiter: Waiter
    result: RunResult

    def snapshot(self) -> Snapshot:
        """The namespace from the run's cache, at least as new as the tool's last write."""
        ...

    def fresh(self, base: Snapshot) -> Snapshot:
        """What a step changes (DaemonSets, Services, pods, endpoints) read again onto `base`."""
        ...

    def context(self, snap: Snapshot) -> PlanContext:
        """The phases' view of a snapshot (no recorded originals)."""
        ...

    def quiet(self, daemonset: str) -> contextlib.AbstractContextManager[None]:
        """The cache stops following what this DaemonSet's rollout churns until it ends."""
        ...

    def save(self) -> None:
        """Write the state document (a write in flight finishes before a signal stops us)."""
        ...

    def fail(self, rec: PhaseRecord, message: str, hint: str) -> NoReturn:
        """Record the phase failed, save, report, and stop the run (`GateFailed`, exit 1)."""
        ...
