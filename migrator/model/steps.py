"""Steps: one Kubernetes write each, as data, that answer the loop's questions themselves (most
answers in `StepBase`); they serialise to plain dicts, so rollback is built from the state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, cast, get_args

from migrator.model import kinds, labelmarks
from migrator.model import objects as o
from migrator.model.kinds import Kind

Obj = dict[str, Any]
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
    # The field holding the name of the object the step writes: the state records it under
    # the kind's own word (`daemonset`, `service`), so the name is that field, not a new one.
    name_field: ClassVar[str]
    id_prefix: ClassVar[str]  # the state records a step as "<id_prefix>/<name>"
    pod_by_pod: ClassVar[bool] = False  # True: the loop runs it pod by pod (engine/inplace)
    creates: ClassVar[bool] = False  # True: the write creates its object (not a patch of it)

    @property
    def name(self) -> str:
        """The name of the object the step writes (its kind is `kind`)."""
        return str(getattr(self, self.name_field))

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


@dataclass(frozen=True)
class _OnDaemonSet(StepBase):
    kind: ClassVar[Kind] = kinds.DAEMONSET
    name_field: ClassVar[str] = "daemonset"
    daemonset: str


@dataclass(frozen=True)
class _OnService(StepBase):
    kind: ClassVar[Kind] = kinds.SERVICE
    name_field: ClassVar[str] = "service"
    service: str


@dataclass(frozen=True)
class SetLabels(_OnDaemonSet):
    """Set (or remove, value None) labels on a DaemonSet's metadata and pod template."""

    type: ClassVar[str] = "set-labels"
    id_prefix: ClassVar[str] = "labels/daemonset"
    meta_after: LabelMap
    template_after: LabelMap
    meta_before: LabelMap
    template_before: LabelMap
    in_place: bool = False  # the DaemonSet is held on OnDelete: its pods are relabelled
    undo: bool = False  # the rollback's write (`inverse()`): it removes phase 1's mark

    def changes(self) -> list[Change]:
        out = [Change(self.object, f"metadata.labels[{k}]", self.meta_before.get(k), v)
               for k, v in self.meta_after.items() if self.meta_before.get(k) != v]
        return out + [Change(self.object, f"spec.template.metadata.labels[{k}]",
                             self.template_before.get(k), v)
                      for k, v in self.template_after.items() if self.template_before.get(k) != v]

    def satisfied(self, live: Obj | None) -> bool:
        return live is not None and labels_match(o.labels(live), self.meta_after) and \
            labels_match(o.template_labels(live), self.template_after) and not (
                self.undo and labelmarks.LABELS_MARK in o.annotations_of(live))

    def patch(self) -> Obj:
        """A JSON merge patch (None deletes a key); the forward write also sets phase 1's mark
        (model/labelmarks.py), the rollback's removes it."""
        mark = None if self.undo else labelmarks.encode(self.meta_before, self.template_before)
        return {"metadata": {"labels": dict(self.meta_after),
                             "annotations": {labelmarks.LABELS_MARK: mark}},
                "spec": {"template": {"metadata": {"labels": dict(self.template_after)}}}}

    def rolls_pods(self) -> bool:
        return not self.in_place and self.labels_pods()

    def labels_pods(self) -> bool:
        return any(self.template_before.get(k) != v for k, v in self.template_after.items())

    def rollout_of(self) -> str | None:
        return None if self.in_place else self.daemonset

    def pod_labels(self) -> LabelMap:
        return self.template_after

    def inverse(self) -> SetLabels:
        return SetLabels(self.daemonset, self.meta_before, self.template_before,
                         self.meta_after, self.template_after, self.in_place,
                         undo=not self.undo)


@dataclass(frozen=True)
class _Strategy(_OnDaemonSet):
    strategy: Mapping[str, Any] = field(hash=False)


@dataclass(frozen=True)
class HoldStrategy(_Strategy):
    """The in-place path's hold on `OnDelete` (the template change that follows rolls nothing),
    recording the DaemonSet's own `strategy` in `HELD_STRATEGY`."""

    type: ClassVar[str] = "hold-strategy"
    id_prefix: ClassVar[str] = "hold/daemonset"

    def changes(self) -> list[Change]:
        return [Change(self.object, "spec.updateStrategy.type", self.strategy.get("type"),
                       "OnDelete (while its pods are relabelled in place)")]

    def satisfied(self, live: Obj | None) -> bool:
        return live is not None and o.held_strategy(live) is not None and \
            o.update_strategy(live) == "OnDelete"

    def patch(self) -> Obj:
        held = json.dumps(dict(self.strategy), sort_keys=True)
        return {"metadata": {"annotations": {o.HELD_STRATEGY: held}},
                "spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": None}}}

    def inverse(self) -> RestoreStrategy:
        return RestoreStrategy(self.daemonset, self.strategy)


@dataclass(frozen=True)
class RestoreStrategy(_Strategy):
    """Put back the recorded strategy; pods the in-place path left on an older revision then
    roll within the DaemonSet's own budget (its post-gates wait)."""

    type: ClassVar[str] = "restore-strategy"
    id_prefix: ClassVar[str] = "restore/daemonset"

    def changes(self) -> list[Change]:
        return [Change(self.object, "spec.updateStrategy.type", "OnDelete",
                       self.strategy.get("type"))]

    def satisfied(self, live: Obj | None) -> bool:
        return live is None or (o.held_strategy(live) is None and o.update_strategy(live)
                                == str(self.strategy.get("type") or "RollingUpdate"))

    def patch(self) -> Obj:
        return {"metadata": {"annotations": {o.HELD_STRATEGY: None}},
                "spec": {"updateStrategy": dict(self.strategy)}}

    def rollout_of(self) -> str | None:
        return self.daemonset

    def inverse(self) -> None:
        return None


@dataclass(frozen=True)
class RollPods(_OnDaemonSet):
    """OnDelete DaemonSets: delete pods whose labels differ from the template, one node at a
    time, each after the previous node's new pod is Ready (engine/inplace.py)."""

    type: ClassVar[str] = "roll-pods"
    id_prefix: ClassVar[str] = "roll/daemonset"
    pod_by_pod: ClassVar[bool] = True
    label_keys: tuple[str, ...]

    def changes(self) -> list[Change]:
        return [Change(self.object, "pods", "old template", "deleted one node at a time")]

    def satisfied(self, live: Obj | None) -> bool:
        """Every scheduled pod runs the current spec's template, by the status's counts (kept
        for OnDelete too); nothing left to roll once the DaemonSet is gone."""
        status = (live or {}).get("status") or {}
        return live is None or (o.observed(live) and status.get("updatedNumberScheduled", 0)
                                == status.get("desiredNumberScheduled", 0))

    def rolls_pods(self) -> bool:
        return True

    def inverse(self) -> None:  # a deleted pod cannot be undeleted; rollback plans its own
        return None


@dataclass(frozen=True)
class RelabelPods(RollPods):
    """The in-place path (engine/inplace.py); `rendered`: the operator's hash annotation when
    planned (another one now: the operator re-rendered it, and its pods roll)."""

    type: ClassVar[str] = "relabel-pods"
    id_prefix: ClassVar[str] = "relabel/daemonset"
    rendered: str | None = None

    def changes(self) -> list[Change]:
        return [Change(self.object, "pods", "old revision",
                       "relabelled in place (labels and controller-revision-hash)")]

    def rolls_pods(self) -> bool:
        return False


@dataclass(frozen=True)
class CreateAlias(_OnService):
    """Create a tool-owned Service alias of a source Service."""

    type: ClassVar[str] = "create-alias"
    id_prefix: ClassVar[str] = "alias/service"
    creates: ClassVar[bool] = True
    source: str
    body: Obj = field(hash=False)

    def changes(self) -> list[Change]:
        return [Change(self.object, "(object)", None, f"alias of {self.source}"),
                Change(self.object, "spec.selector", None, self.body.get("spec", {}).get(
                    "selector"))]

    def satisfied(self, live: Obj | None) -> bool:
        if live is None or o.terminating(live):
            return False  # a Terminating alias is on its way out, not an alias in place
        want = self.body["metadata"]
        return labels_match(o.labels(live), want.get("labels", {})) and labels_match(
            o.annotations_of(live), want.get("annotations", {}))

    def inverse(self) -> DeleteAlias:
        return DeleteAlias(self.service, self.source)

    def stop_hint(self, rollback: bool) -> str:
        return "see docs/runbook.md, 'coexistence'"


@dataclass(frozen=True)
class DeleteAlias(_OnService):
    """Delete an alias, only while it is still the tool's (checked by the executor)."""

    type: ClassVar[str] = "delete-alias"
    id_prefix: ClassVar[str] = "unalias/service"
    source: str

    def changes(self) -> list[Change]:
        return [Change(self.object, "(object)", f"alias of {self.source}", None)]

    def satisfied(self, live: Obj | None) -> bool:
        """Gone, or Terminating (its deletion accepted: deleting it again changes nothing)."""
        return live is None or o.terminating(live) is not None

    def inverse(self) -> None:  # the body is not recorded: phase 2 planned again re-creates it
        return None


@dataclass(frozen=True)
class SetSelector(_OnService):
    """Replace a Service's selector (guarded by a json-patch `test` of the expected one)."""

    type: ClassVar[str] = "set-selector"
    id_prefix: ClassVar[str] = "selector/service"
    before: Mapping[str, str]
    after: Mapping[str, str]
    local: bool
    operator_owned: bool = False
    allow_foreign: bool = False  # switched with --allow-foreign-pods (kept in the state)

    def changes(self) -> list[Change]:
        return [Change(self.object, "spec.selector", dict(self.before), dict(self.after))]

    def satisfied(self, live: Obj | None) -> bool:
        return live is not None and dict(o.dig(live, "spec", "selector") or {}) == dict(self.after)

    def patch(self) -> list[Obj]:
        return [{"op": "test", "path": "/spec/selector", "value": dict(self.before)},
                {"op": "replace", "path": "/spec/selector", "value": dict(self.after)}]

    def inverse(self) -> SetSelector:
        return SetSelector(self.service, self.after, self.before, self.local, self.operator_owned)

    def selector_change(self, service: str) -> SelectorChange | None:
        return (self.before, self.after) if service == self.service else None

    def stop_hint(self, rollback: bool) -> str:
        return ("wait until every pod carries the common label (phase 1 rollout), then rerun"
                if not rollback else "fix the pods the old selector needs, then rerun")


Step = (SetLabels | RollPods | CreateAlias | DeleteAlias | SetSelector | HoldStrategy
        | RestoreStrategy | RelabelPods)
_TYPES: dict[str, type[Any]] = {t.type: t for t in get_args(Step)}


def to_record(step: Step) -> dict[str, Any]:
    """A JSON-safe dict for the state ConfigMap."""
    return {**asdict(step), "type": step.type}


def from_record(record: Mapping[str, Any]) -> Step:
    data = dict(record)
    cls = _TYPES[str(data.pop("type"))]
    if "label_keys" in data:
        data["label_keys"] = tuple(data["label_keys"])
    return cast(Step, cls(**data))
