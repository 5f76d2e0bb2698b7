"""A deep copy of JSON-shaped data (dicts, lists, strings, numbers, booleans, None), about three
times faster than `copy.deepcopy`: the store hands out and takes in copies of every object on
every request and reconcile, and `deepcopy`'s generality (memo, reductions) was a sixth of the
simulated cluster's CPU. Anything else falls back to `copy.deepcopy`."""

from __future__ import annotations

import copy
from typing import TypeVar

T = TypeVar("T")
_ATOMIC = frozenset({str, int, float, bool, type(None)})


def clone(value: T) -> T:
    """A copy sharing nothing mutable with `value` (a dict or list shared twice inside it is
    copied twice: JSON has no shared references)."""
    kind = type(value)
    if kind is dict:
        return {k: clone(v) for k, v in value.items()}  # type: ignore[attr-defined,return-value]
    if kind is list:
        return [clone(v) for v in value]  # type: ignore[attr-defined,return-value]
    if kind in _ATOMIC:
        return value
    return copy.deepcopy(value)
