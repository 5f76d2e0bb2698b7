"""The migration state (docs/design.md, "State and resume"), one concept in one package:

    document.py   the state document (schema 1): phases, step records, history; timestamps
                  from the injected Clock
    configmap.py  the ConfigMap's layout: keys, checksum, managed-by label (from the catalog)
    backends.py   one ConfigMap as the store works over it (the tests add an in-memory one)
    lock.py       the run lock's data (annotations) and who holds it, where it runs
    liveness.py   whether a lock's holder is provably gone (its process, its pod)
    store.py      load/save and lock/renew/release with resourceVersion-guarded writes
    session.py    one run's hold on it: lock, save, heartbeat (what `commands` opens)

The names below are the package's surface for the rest of the engine and the commands.
"""

from migrator.engine.state.document import PhaseRecord, State
from migrator.engine.state.liveness import default_holder
from migrator.engine.state.session import RunSession
from migrator.engine.state.store import ConfigMapStateStore, StateStore
from migrator.model.phasestatus import PhaseStatus, holds

__all__ = ["ConfigMapStateStore", "PhaseRecord", "PhaseStatus", "RunSession", "State",
           "StateStore", "default_holder", "holds"]
