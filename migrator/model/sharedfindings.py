"""Kept for old imports: the guard's shared slices are judged in `model/traffic.py`."""

from migrator.model.traffic import lease_live, shared_findings

__all__ = ["lease_live", "shared_findings"]
