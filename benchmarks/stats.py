"""Median and spread of repeated measurements (pure)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def summary(values: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and the relative spread ((max - min) / median) of the runs."""
    if not values:
        return {"median": None, "min": None, "max": None, "spread": None, "values": []}
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    return {
        "median": round(med, 4),
        "min": round(lo, 4),
        "max": round(hi, 4),
        "spread": round((hi - lo) / med, 4) if med else 0.0,
        "values": [round(v, 4) for v in values],
    }


def median_of(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 4)
