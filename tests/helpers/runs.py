"""A `Run` with no API server behind it, for the apply back end's logic that reads only the
state and the clock (the settle countdown, the run context's shape): the state session saves
into an in-memory ConfigMap."""

from __future__ import annotations

from typing import cast

from migrator.engine.clock import Clock
from migrator.engine.loop import Run, RunSettings
from migrator.engine.progress import Listener
from migrator.engine.state import RunSession
from migrator.kube.client import Kube
from migrator.model.stacks import load_catalog
from tests.helpers.builders import NS
from tests.helpers.clock import FakeClock
from tests.helpers.memorystate import MemoryStateStore


def offline_run(clock: Clock | None = None, *, settings: RunSettings | None = None,
                listener: Listener | None = None) -> Run:
    clock = clock or FakeClock()
    listener = listener or Listener()
    session = RunSession(MemoryStateStore(clock=clock), version=None, holder="test@host pid 1",
                         clock=clock, listener=listener)
    return Run(cast(Kube, None), NS, load_catalog(), None, session, clock, listener,
               settings or RunSettings())
