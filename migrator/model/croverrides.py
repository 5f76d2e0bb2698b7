"""Where the CR rendering a DaemonSet sets its reserved label to another value, which the
operator's next re-render writes back over phase 1's: phase 1 warns, naming the CR field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migrator.model import objects as o
from migrator.model.planning import PlanContext
from migrator.model.stacks import Component

# The per-component CR sections that may carry labels (besides `daemonsets`, for all).
CR_SECTIONS = {"dcgm": "dcgm", "dcgm-exporter": "dcgmExporter"}


def cr_overrides(ctx: PlanContext, comp: Component,
                 ds: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(CR field path, value) wherever the owning CR sets the reserved label otherwise."""
    kind, _, name = (ctx.operator_owner(ds) or "").partition("/")
    crs = ctx.snapshot.gpu_clusters if kind == "GPUCluster" else ctx.snapshot.cluster_policies
    cr = next((cr for cr in crs if name and o.name(cr) == name), None)
    if cr is None:
        return []
    key, want = comp.common_label.key, comp.common_label.value
    paths = [("daemonsets", "labels"), (CR_SECTIONS.get(comp.component, comp.component), "labels")]
    out = []
    for path in paths:
        labels = o.dig(cr, "spec", *path)
        if isinstance(labels, Mapping) and key in labels and str(labels[key]) != want:
            field = f"{cr.get('kind')}/{o.name(cr)} spec.{'.'.join(path)}[{key!r}]"
            out.append((field, str(labels[key])))
    return out
