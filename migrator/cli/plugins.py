"""Commands another installed distribution (the simulated cluster) adds as entry points of
`dcgm_migrate.commands`, looked up only when invoked; without it app.py's stand-ins refuse."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import typer
from typer.main import get_command

GROUP = "dcgm_migrate.commands"
# The commands an installed plugin may provide (every other name is the tool's own).
PLUGGABLE = ("demo", "sim")
# Where to get them when they are missing.
INSTALL_HINT = ("install the simulated cluster beside the tool from the source checkout: "
                "`python3 -m pip install ./simulator`")


def command(name: str) -> Any | None:
    """The click command an installed plugin provides as `name`, or None."""
    if name not in PLUGGABLE:
        return None
    for found in entry_points(group=GROUP, name=name):
        try:
            app = found.load()
        except ImportError:
            continue
        if isinstance(app, typer.Typer):
            return get_command(app)
    return None
