"""A stack change prepared as docs/runbook.md "Changing stack" says, on the simulated cluster:
the new CR's manifest as a user keeps it (the operator labels the nodes for the new stack
itself), and node labels set as a user would. One place for the e2e tests, the crash and signal
tests and the benchmark."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from dcgm_sim.cluster import SimCluster
from dcgm_sim.controllers.rendering import DEPLOY_LABELS
from dcgm_sim.seed import seeded_cr
from migrator.model import kinds
from migrator.model.stackchange import clean_cr


def label_nodes(sim: SimCluster, stack: str, value: str = "true") -> None:
    """`kubectl label nodes -l nvidia.com/gpu.present=true --overwrite ...=value` for `stack`'s
    DCGM components (written to the store: not one of the API writes the tests count)."""
    for node in sim.store.list(kinds.NODE)[0]:
        node = copy.deepcopy(node)
        node["metadata"]["labels"].update({k: value for k in DEPLOY_LABELS[stack]})
        sim.store.update(kinds.NODE, node)


def manifest(folder: Path, stack: str) -> Path:
    """`stack`'s CR written to `folder` as a user keeps it (no status, no server fields)."""
    path = folder / f"{stack}.yaml"
    path.write_text(yaml.safe_dump(clean_cr(seeded_cr(stack))))
    return path
