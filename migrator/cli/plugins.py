"""Commands that another installed distribution adds to `dcgm-migrate`.

The simulated cluster is a distribution of its own (simulator/pyproject.toml), installed for the
demo, the tests and the benchmarks and never with the tool itself or in its image. It offers
`demo` and `sim` as entry points of the group `dcgm_migrate.commands`, each a typer app; the
CLI looks one up only when that command is invoked, so a run of any other command reads no
entry point and imports nothing of the simulator. Where none is installed, the CLI's own
`demo` and `sim` stand in and refuse (migrator/cli/app.py).
"""

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
    """The click command an installed plugin provides as `name`, or None (also where its
    distribution's metadata is found but its modules are not: a half-removed install)."""
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
