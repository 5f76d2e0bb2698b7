"""A CR's overrides of a reserved label: now in model/stackchange.py, named here for phase 1."""

from migrator.model.stackchange import cr_overrides

__all__ = ["cr_overrides"]
