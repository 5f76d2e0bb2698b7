"""Parse `--timeout 10m`-style durations (Go/kubectl style: 1h2m3.5s, or bare seconds)."""

from __future__ import annotations

import re

from migrator.errors import UsageError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str = "--timeout") -> float:
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        pos, value = 0, 0.0
        for m in _PART.finditer(raw):
            if m.start() != pos:
                break
            value += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(raw) or not raw:
            raise UsageError(f"{option} {text!r} is not a duration.",
                             f"use a number of seconds or a duration like 90s, 10m or 1h30m "
                             f"for {option}") from None
    if value < 0:
        raise UsageError(f"{option} cannot be negative.", f"pass a positive {option}")
    return value
