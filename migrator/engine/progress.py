"""What the engine reports while it runs, and a command's warnings, each said once (the
reports before and after a run and the run itself warn about the same things). The CLI renders
these; the engine never prints."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from migrator.model.gates import GateResult
from migrator.model.planning import PhasePlan
from migrator.model.steps import Step

# Warnings that count objects and name an example: read again, they name other pods; one kept.
COUNTED = ("duplicate scraping now", "possible duplicate scraping",
           "duplicate scraping through the tool's aliases")


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


def kind(text: str) -> str:
    """What makes two warnings the same one: a counted warning's kind, else its text."""
    head = text.split(":", 1)[0]
    return head if head in COUNTED else text


def merged(*groups: Iterable[str]) -> tuple[str, ...]:
    """Each kind once, where it first came up, in its newest wording."""
    out: dict[str, str] = {}
    for group in groups:
        for text in group:
            out[kind(text)] = text
    return tuple(out.values())


@dataclass
class Told:
    """A command's warnings: each kind said (`show`) only the first time, its newest wording
    kept for the report after the run."""

    show: Callable[[str], None]
    said: dict[str, str] = field(default_factory=dict)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self.said.values())

    def warn(self, text: str) -> None:
        key = kind(text)
        if key not in self.said:
            self.show(text)
        self.said[key] = text

    def say(self, texts: Iterable[str]) -> tuple[str, ...]:
        """Each of a report's warnings, then all the command's so far."""
        for text in texts:
            self.warn(text)
        return self.warnings


class Listener:
    """What the runner tells as it goes; `Listener()` ignores it all. `warning` is the one way
    a warning travels: within a command (`command()`) each kind is shown once."""

    told: Told | None = None  # the command's warnings; None: each one is shown

    def phase(self, event: PhaseEvent) -> None: ...
    def step(self, event: StepEvent) -> None: ...
    def rollout(self, progress: RolloutProgress) -> None: ...
    def endpoints(self, progress: EndpointProgress) -> None: ...
    def settle(self, seconds_left: float) -> None: ...
    def message(self, text: str) -> None: ...
    def show_warning(self, text: str) -> None: ...

    def warning(self, text: str) -> None:
        if self.told is None:
            self.show_warning(text)
        else:
            self.told.warn(text)

    def command(self) -> Told:
        """A new command's warnings, kept beside this listener."""
        self.told = Told(self.show_warning)
        return self.told
