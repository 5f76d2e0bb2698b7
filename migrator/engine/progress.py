"""What the engine reports while it runs. The CLI renders these; the engine never prints."""

from __future__ import annotations

from dataclasses import dataclass

from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan
from migrator.model.steps import Step


@dataclass(frozen=True)
class RolloutProgress:
    daemonset: str
    updated: int
    available: int
    desired: int
    eta_seconds: float | None = None  # at the pace so far; None until a pod was updated


@dataclass(frozen=True)
class EndpointProgress:
    service: str
    ready: int
    baseline: int


@dataclass(frozen=True)
class StepEvent:
    phase: int
    step: Step
    status: str  # writing | done | skipped | restored | waiting


@dataclass(frozen=True)
class PhaseEvent:
    number: int
    name: str
    status: str  # planning | in-progress | completed | failed | rolled-back | drifted
    plan: PhasePlan | None = None
    gates: tuple[GateResult, ...] = ()
    message: str = ""


class Listener:
    """What the runner tells as it goes; `Listener()` ignores it all. `warning` is the one way
    a warning travels."""

    def phase(self, event: PhaseEvent) -> None: ...
    def step(self, event: StepEvent) -> None: ...
    def rollout(self, progress: RolloutProgress) -> None: ...
    def endpoints(self, progress: EndpointProgress) -> None: ...
    def settle(self, seconds_left: float) -> None: ...
    def message(self, text: str) -> None: ...
    def warning(self, text: str) -> None: ...
