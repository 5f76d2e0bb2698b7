"""The migration state (docs/design.md, "State and resume"): `document` (the state document),
`configmap` (its ConfigMap's layout), `lock` (the run lock, and whether its holder is gone),
`store` (guarded load/save/lock, and `RunSession`: one run's hold on it)."""

from migrator.engine.state.document import PhaseRecord, State
from migrator.engine.state.lock import default_holder
from migrator.engine.state.runs import unfinished
from migrator.engine.state.store import ConfigMapStateStore, RunSession, StateStore
from migrator.model.phasestatus import PhaseStatus, holds

__all__ = ["ConfigMapStateStore", "PhaseRecord", "PhaseStatus", "RunSession", "State",
           "StateStore", "default_holder", "holds", "unfinished"]
