"""Kubernetes access: the only package that imports `kubernetes` (import-linter enforces it).

Everything the tool sends goes through one choke point (`transport.Transport.send`) that adds
auth, timeouts and retries and turns failures into the typed errors of `migrator.errors`.
Objects are plain JSON dicts, never the client's generated model classes.
"""

from migrator.kube.client import Kube, Obj, ObjList, Page, kind_of
from migrator.kube.retrying import RetryPolicy

__all__ = ["Kube", "Obj", "ObjList", "Page", "RetryPolicy", "kind_of"]
