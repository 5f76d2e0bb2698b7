"""Kubernetes access: the only package that imports `kubernetes` (import-linter enforces it);
every request goes through one choke point (`transport.Transport.send`); objects are JSON dicts."""

from migrator.kube.client import Kube
from migrator.kube.transport import RetryPolicy

__all__ = ["Kube", "RetryPolicy"]
