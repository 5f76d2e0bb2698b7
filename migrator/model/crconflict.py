"""Both GPU Operator CRs at once: now in model/stackchange.py, named here for its importers."""

from migrator.model.stackchange import CHECK, STALLED, findings, refusal

__all__ = ["CHECK", "STALLED", "findings", "refusal"]
