"""dcgm-migrate: move a live GPU Operator cluster to one stable DCGM identity."""

__version__ = "0.1.0"  # the one place the version lives
