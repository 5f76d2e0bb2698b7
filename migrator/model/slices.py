"""What marks an EndpointSlice and who renders a stable name: a leaf module, so the snapshot and
guard need not import `model/sharing.py` (which re-exports these names)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migrator.model import objects as o

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"  # the EndpointSlice controller's value
OPERATOR_KIND = "ClusterPolicy"  # the operator that replaces the stable names whole


def rendered_by(service: Mapping[str, Any]) -> str | None:
    """`ClusterPolicy/<name>` when its operator renders this Service (controller owner): a
    stable name the GPUCluster pods share, never take."""
    ref = o.controller_owner(service)
    if ref and ref.get("kind") == OPERATOR_KIND:
        return f"{OPERATOR_KIND}/{ref.get('name')}"
    return None
