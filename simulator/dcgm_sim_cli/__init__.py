"""The tool's `demo` and `sim` commands, shipped with the simulated cluster they run on
(simulator/pyproject.toml: entry point group `dcgm_migrate.commands`)."""
