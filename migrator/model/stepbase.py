"""What every step shares (`model/steps.py` holds the steps): the change a plan shows, and the
answers most steps give the loop, which a step that differs overrides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from migrator.model.kinds import Kind

SelectorChange = tuple[Mapping[str, str], Mapping[str, str]]  # (before, after)
LabelMap = Mapping[str, str | None]  # None = the key is absent / removed


@dataclass(frozen=True)
class Change:
    """One field of one object, before → after (None = absent)."""

    object: str
    field: str
    before: Any
    after: Any

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def labels_match(actual: Mapping[str, str], wanted: LabelMap) -> bool:
    return all(actual.get(k) == v for k, v in wanted.items())


@dataclass(frozen=True)
class StepBase:
    """What most steps answer; a step that differs says so itself."""

    kind: ClassVar[Kind]
    id_prefix: ClassVar[str]  # the state records a step as "<id_prefix>/<name>"
    pod_by_pod: ClassVar[bool] = False  # True: the loop runs it pod by pod (engine/ondelete)
    creates: ClassVar[bool] = False  # True: the write creates its object (not a patch of it)

    @property
    def name(self) -> str:
        """The name of the object the step writes (its kind is `kind`): its first field."""
        return str(getattr(self, fields(self)[0].name))

    @classmethod
    def id_of(cls, name: str) -> str:
        """The id of this type's step on the object `name` (what the state records it under)."""
        return f"{cls.id_prefix}/{name}"

    @property
    def id(self) -> str:
        return self.id_of(self.name)

    @property
    def object(self) -> str:
        return f"{self.kind.kind}/{self.name}"

    def rolls_pods(self) -> bool:  # does this write replace pods (pods read before are stale)?
        return False

    def labels_pods(self) -> bool:
        """Does it label pods (rolled or in place)? An operator's re-render drops those labels
        (the state's `wroteLabels`, the drift risk)."""
        return self.rolls_pods()

    def rollout_of(self) -> str | None:  # the DaemonSet whose rollout it starts (waited on)
        return None

    def selector_change(self, service: str) -> SelectorChange | None:  # of `service`'s selector
        return None

    def pod_labels(self) -> LabelMap:  # labels the pods carry once it has rolled out (None: absent)
        return {}

    def stop_hint(self, rollback: bool) -> str:  # what to do when a pre-gate stops this write
        return "fix what the gate names, then run the same command again"
