"""Steps: one Kubernetes write each, as data. Every step knows its inverse (None when there is
none), whether the live object already shows its effect (so a resumed run skips it), how to
present itself in a plan, and what the loop must do around it — which object it targets
(`kind`, `name`), whether it moves pods, which rollout it starts, which selector it changes,
whether it is run pod by pod, what to tell the user when a gate stops it. The loop asks;
it never branches on a step's type.

Steps serialise to plain dicts for the state ConfigMap, so rollback is built from what was
recorded, not from what the cluster looks like now.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from migrator.model import kinds, labelmarks
from migrator.model import objects as o
from migrator.model.kinds import Kind
from migrator.model.stepbase import Change, LabelMap, SelectorChange, StepBase, labels_match

Obj = dict[str, Any]
@dataclass(frozen=True)
class SetLabels(StepBase):
    """Set (or remove, value None) labels on a DaemonSet's metadata and pod template."""

    type: ClassVar[str] = "set-labels"
    kind: ClassVar[Kind] = kinds.DAEMONSET
    daemonset: str
    meta_after: LabelMap
    template_after: LabelMap
    meta_before: LabelMap
    template_before: LabelMap
    in_place: bool = False  # the DaemonSet is held on OnDelete: its pods are relabelled

    id_prefix: ClassVar[str] = "labels/daemonset"
    # The rollback's write (built by `inverse()`): it removes phase 1's mark (labelmarks.py)
    # where the forward write sets it.
    undo: bool = False

    @property
    def name(self) -> str:
        return self.daemonset

    def changes(self) -> list[Change]:
        out = [Change(self.object, f"metadata.labels[{k}]", self.meta_before.get(k), v)
               for k, v in self.meta_after.items() if self.meta_before.get(k) != v]
        out += [Change(self.object, f"spec.template.metadata.labels[{k}]",
                       self.template_before.get(k), v)
                for k, v in self.template_after.items() if self.template_before.get(k) != v]
        return out

    def satisfied(self, live: Obj | None) -> bool:
        return live is not None and labels_match(o.labels(live), self.meta_after) and \
            labels_match(o.template_labels(live), self.template_after) and not (
                self.undo and labelmarks.LABELS_MARK in o.annotations_of(live))

    def patch(self) -> Obj:
        """A JSON merge patch: only these keys change; None deletes a key. The forward write
        marks the DaemonSet with the labels' values before it (model/labelmarks.py), the
        rollback's removes the mark."""
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
class _Strategy(StepBase):
    """The in-place path's hold of a DaemonSet on `OnDelete`: `strategy` is its own."""

    kind: ClassVar[Kind] = kinds.DAEMONSET
    daemonset: str
    strategy: Mapping[str, Any] = field(hash=False)

    @property
    def name(self) -> str:
        return self.daemonset


@dataclass(frozen=True)
class HoldStrategy(_Strategy):
    """Set `OnDelete` (the template change that follows rolls nothing), recording the
    DaemonSet's own strategy in `HELD_STRATEGY`."""

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
class RollPods(StepBase):
    """OnDelete DaemonSets: delete pods whose labels differ from the template, one node at a
    time, each after the previous node's new pod is Ready."""

    type: ClassVar[str] = "roll-pods"
    kind: ClassVar[Kind] = kinds.DAEMONSET
    pod_by_pod: ClassVar[bool] = True
    daemonset: str
    label_keys: tuple[str, ...]

    id_prefix: ClassVar[str] = "roll/daemonset"

    @property
    def name(self) -> str:
        return self.daemonset

    def changes(self) -> list[Change]:
        return [Change(self.object, "pods", "old template", "deleted one node at a time")]

    def satisfied(self, live: Obj | None) -> bool:
        """Every scheduled pod runs the DaemonSet's current template, by its status (the
        controller counts `updatedNumberScheduled` for OnDelete too), for the current spec.
        Which pods still need deleting is the apply back end's per-pod read (engine/ondelete.py)."""
        if live is None:
            return True  # nothing left to roll
        status = live.get("status") or {}
        generation = o.meta(live).get("generation")
        return bool((generation is None or status.get("observedGeneration") == generation)
                    and status.get("updatedNumberScheduled", 0)
                    == status.get("desiredNumberScheduled", 0))

    def rolls_pods(self) -> bool:
        return True

    def inverse(self) -> None:
        """A deleted pod cannot be undeleted; rolling back phase 1 restores the labels and
        plans its own RollPods for the old template."""
        return None


@dataclass(frozen=True)
class RelabelPods(RollPods):
    """The in-place path: every pod on the revision before the current one gets the current
    template's labels and `controller-revision-hash` by a JSON patch testing its uid and old
    hash, once the two revisions' data prove only labels differ (engine/inplace.py); a pod it
    cannot relabel is left to the rollout `RestoreStrategy` lets the controller make.
    `rendered`: the operator's last-applied hash annotation when planned (another one now:
    the operator re-rendered the DaemonSet, which then rolls)."""

    type: ClassVar[str] = "relabel-pods"
    rendered: str | None = None
    id_prefix: ClassVar[str] = "relabel/daemonset"

    def changes(self) -> list[Change]:
        return [Change(self.object, "pods", "old revision",
                       "relabelled in place (labels and controller-revision-hash)")]

    def rolls_pods(self) -> bool:
        return False


@dataclass(frozen=True)
class CreateAlias(StepBase):
    """Create a tool-owned Service alias of a source Service."""

    type: ClassVar[str] = "create-alias"
    kind: ClassVar[Kind] = kinds.SERVICE
    creates: ClassVar[bool] = True
    service: str
    source: str
    body: Obj = field(hash=False)

    id_prefix: ClassVar[str] = "alias/service"

    @property
    def name(self) -> str:
        return self.service

    def changes(self) -> list[Change]:
        spec = self.body.get("spec", {})
        return [Change(self.object, "(object)", None, f"alias of {self.source}"),
                Change(self.object, "spec.selector", None, spec.get("selector"))]

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
class DeleteAlias(StepBase):
    """Delete an alias, only while it is still the tool's (checked by the executor)."""

    type: ClassVar[str] = "delete-alias"
    kind: ClassVar[Kind] = kinds.SERVICE
    service: str
    source: str

    id_prefix: ClassVar[str] = "unalias/service"

    @property
    def name(self) -> str:
        return self.service

    def changes(self) -> list[Change]:
        return [Change(self.object, "(object)", f"alias of {self.source}", None)]

    def satisfied(self, live: Obj | None) -> bool:
        """Gone, or its deletion already accepted (Terminating: finalizers remove it later;
        deleting it again would change nothing)."""
        return live is None or o.terminating(live) is not None

    def inverse(self) -> None:
        """The alias body is not recorded with its deletion (rollback records only what it
        removed): re-creating it is phase 2 planned again, from the live source Service."""
        return None


@dataclass(frozen=True)
class SetSelector(StepBase):
    """Replace a Service's selector (guarded by a json-patch `test` of the expected one)."""

    type: ClassVar[str] = "set-selector"
    kind: ClassVar[Kind] = kinds.SERVICE
    service: str
    before: Mapping[str, str]
    after: Mapping[str, str]
    local: bool
    operator_owned: bool = False
    allow_foreign: bool = False  # switched with --allow-foreign-pods (kept in the state)

    id_prefix: ClassVar[str] = "selector/service"

    @property
    def name(self) -> str:
        return self.service

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
_TYPES: dict[str, type[Any]] = {
    t.type: t for t in (SetLabels, RollPods, CreateAlias, DeleteAlias, SetSelector,
                        HoldStrategy, RestoreStrategy, RelabelPods)
}


def to_record(step: Step) -> dict[str, Any]:
    """A JSON-safe dict for the state ConfigMap."""
    data = asdict(step)
    data["type"] = step.type
    return data


def from_record(record: Mapping[str, Any]) -> Step:
    data = dict(record)
    cls = _TYPES[str(data.pop("type"))]
    if cls in (RollPods, RelabelPods):
        data["label_keys"] = tuple(data["label_keys"])
    result: Step = cls(**data)
    return result
