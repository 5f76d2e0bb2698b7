"""The retry policy: now in transport.py, named here for its importers."""

from migrator.kube.transport import RetryPolicy

__all__ = ["RetryPolicy"]
