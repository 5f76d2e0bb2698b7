"""A command's warnings, each said once (the reports before and after a run and the run itself
warn about the same things)."""

from __future__ import annotations

from collections.abc import Iterable

from migrator.engine.progress import (
    EndpointProgress,
    Listener,
    PhaseEvent,
    RolloutProgress,
    StepEvent,
)

# Warnings that count objects and name an example: read again, they name other pods; one kept.
COUNTED = ("duplicate scraping now", "possible duplicate scraping",
           "duplicate scraping through the tool's aliases")


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


class Warned(Listener):
    """Passes every event on and keeps the warnings, saying each kind only the first time."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self._said: dict[str, str] = {}

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self._said.values())

    def warning(self, text: str) -> None:
        if kind(text) not in self._said:
            self.listener.warning(text)
        self._said[kind(text)] = text

    def say(self, texts: Iterable[str]) -> tuple[str, ...]:
        """Each of a report's warnings, then all the command's so far."""
        for text in texts:
            self.warning(text)
        return self.warnings

    def phase(self, event: PhaseEvent) -> None:
        self.listener.phase(event)

    def step(self, event: StepEvent) -> None:
        self.listener.step(event)

    def rollout(self, progress: RolloutProgress) -> None:
        self.listener.rollout(progress)

    def endpoints(self, progress: EndpointProgress) -> None:
        self.listener.endpoints(progress)

    def settle(self, seconds_left: float) -> None:
        self.listener.settle(seconds_left)

    def message(self, text: str) -> None:
        self.listener.message(text)
