"""The per-node gap meter: now in engine/stackchange.py, named here for its importers."""

from migrator.engine.stackchange import GapMeter

__all__ = ["GapMeter"]
