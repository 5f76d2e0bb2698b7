"""What a phase is given to plan with, and the plan it hands the loop back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.model import objects as o
from migrator.model.discovery import OPERATOR_CRS
from migrator.model.gates import GateResult, ServiceBaseline, describe
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component
from migrator.model.steps import Step


@dataclass(frozen=True)
class Options:
    include_operator_owned: bool = False
    roll_on_delete: bool = False
    allow_foreign_pods: bool = False  # phase 3 may switch a selector that picks up other pods
    prepare_for: str = ""  # a release (plans/releases.yaml) whose labels phase 1 adds too
    rolling: bool = False  # phase 1 (and its rollback) rolls the pods instead of relabelling

    def flags(self) -> tuple[str, ...]:
        """The command-line flags for these options, which a resumed run repeats (`resume:`)."""
        named = (("--include-operator-owned", self.include_operator_owned),
                 ("--roll-on-delete", self.roll_on_delete), ("--rolling", self.rolling),
                 ("--allow-foreign-pods", self.allow_foreign_pods))
        prepare = ("--prepare-for", self.prepare_for) if self.prepare_for else ()
        return tuple(flag for flag, on in named if on) + prepare


@dataclass(frozen=True)
class PlanContext:
    """Everything a phase needs to plan, verify or roll back: pure inputs only."""

    snapshot: Snapshot
    catalog: Catalog
    components: tuple[Component, ...]  # the components present in this namespace
    options: Options = Options()
    recorded: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # step id → record

    def daemonset(self, comp: Component) -> dict[str, Any] | None:
        return self.snapshot.daemonsets.get(comp.daemonset)

    def service(self, name: str) -> dict[str, Any] | None:
        return self.snapshot.services.get(name)

    def is_tool_owned(self, service: Mapping[str, Any]) -> bool:
        return self.catalog.common.tool_owned(service)

    def operator_owner(self, obj: Mapping[str, Any]) -> str | None:
        """`Kind/name` of the operator CR that controls this object, if any."""
        ref = o.controller_owner(obj) or {}
        return f"{ref['kind']}/{ref.get('name')}" if ref.get("kind") in OPERATOR_CRS else None

    def daemonsets_with_label(self, key: str) -> list[str]:
        return [c.daemonset for c in self.components if c.common_label.key == key]


@dataclass(frozen=True, kw_only=True)
class PhasePlan:
    """What a phase hands the loop (always built with keywords)."""

    number: int
    name: str
    steps: tuple[Step, ...] = ()
    gates: tuple[GateResult, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    blocked: str | None = None  # why this phase cannot run now (a gate that no write can fix)
    fix: str | None = None  # what to do when it is (the refusal's `fix:` line)
    guarded: tuple[ServiceBaseline, ...] = ()  # Services whose endpoints the phase must keep
    tolerance: Mapping[str, int] = field(default_factory=dict)  # per Service, phase 1 only
    # Steps the live objects already show: no write, but their post-gates must still pass.
    checks: tuple[Step, ...] = ()

    @property
    def refusal(self) -> str | None:
        """Why the phase must not write at all: blocked, or a gate fails now. Checked before the
        first write, so no half phase lands before a later step's gate stops it."""
        failed = describe(g for g in self.gates if not (self.blocked and g.detail in self.blocked))
        return "; ".join(filter(None, [self.blocked, failed])) or None
