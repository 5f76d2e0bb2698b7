"""Phase 1's mark on each DaemonSet it labels (`LABELS_MARK`): the labels' values before its first
write, so a rollback needs no state and a rerun never takes the tool's labels for the originals."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migrator.model import objects as o

LABELS_MARK = "dcgm-migrate/labels-before"


@dataclass(frozen=True)
class LabelsMark:
    """What the mark on one DaemonSet says: each label the tool set, and its value before."""

    daemonset: str
    meta_before: Mapping[str, str | None]
    template_before: Mapping[str, str | None]


def encode(meta_before: Mapping[str, str | None],
           template_before: Mapping[str, str | None]) -> str:
    """The annotation's value (sorted JSON: the same labels give the same text)."""
    return json.dumps({"metadata": dict(meta_before), "template": dict(template_before)},
                      sort_keys=True, separators=(",", ":"))


def read(daemonset: Mapping[str, Any]) -> LabelsMark | None:
    """The DaemonSet's mark, or None: absent, or not one this tool wrote (unreadable)."""
    try:
        doc = json.loads(o.annotations_of(daemonset).get(LABELS_MARK) or "null")
    except ValueError:
        return None
    meta, template = o.dig(doc, "metadata"), o.dig(doc, "template")
    if not all(isinstance(m, Mapping) and all(isinstance(k, str) and isinstance(v, str | None)
                                              for k, v in m.items()) for m in (meta, template)):
        return None
    return LabelsMark(o.name(daemonset), dict(meta), dict(template))


def marked(daemonsets: Mapping[str, Mapping[str, Any]]) -> list[LabelsMark]:
    return [m for _, ds in sorted(daemonsets.items()) if (m := read(ds)) is not None]


def described(mark: LabelsMark) -> str:
    """How a lost state's marks name this one (`lostState`, the refusal)."""
    return f"DaemonSet/{mark.daemonset} (labelled by the tool's phase 1)"
