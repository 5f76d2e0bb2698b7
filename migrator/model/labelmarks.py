"""The mark phase 1 leaves on each DaemonSet it labels: the annotation `LABELS_MARK`, written in
the same patch as the labels, holding the labels' values before the tool's first write
(`{"metadata": {...}, "template": {...}}`, None for a key that was absent). A rollback of
phase 1 removes it with the labels.

It is what tells a lost state from a fresh cluster after phase 1, as an alias's
`dcgm-migrate/alias-of` annotation does after phase 2: common labels without the mark may
be an operator's or a person's; with it they are the tool's, and the mark says what they
replaced, so phase 1 can be rolled back without the state (engine/recovered.py) and a
rerun never takes the tool's own labels for the originals. An operator re-render drops it:
the GPU Operator updates a DaemonSet whose rendered hash changed with the rendered object
whole (upstream NVIDIA/gpu-operator `controllers/object_controls.go`, `DaemonSet`:
`client.Update(ctx, obj)`, a22dbf671), so labels gone while the mark stays were removed by
an edit, not by the operator (phases/label.py `verify`)."""

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


def _label_map(value: Any) -> dict[str, str | None] | None:
    if not isinstance(value, Mapping):
        return None
    out: dict[str, str | None] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not (val is None or isinstance(val, str)):
            return None
        out[key] = val
    return out


def read(daemonset: Mapping[str, Any]) -> LabelsMark | None:
    """The DaemonSet's mark, or None: absent, or not one this tool wrote (unreadable)."""
    text = o.annotations_of(daemonset).get(LABELS_MARK)
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    meta = _label_map(doc.get("metadata")) if isinstance(doc, Mapping) else None
    template = _label_map(doc.get("template")) if isinstance(doc, Mapping) else None
    if meta is None or template is None:
        return None
    return LabelsMark(o.name(daemonset), meta, template)


def marked(daemonsets: Mapping[str, Mapping[str, Any]]) -> list[LabelsMark]:
    """Every DaemonSet that carries the mark, by name."""
    return [m for _, ds in sorted(daemonsets.items()) if (m := read(ds)) is not None]


def described(mark: LabelsMark) -> str:
    """How a lost state's marks name this one (`lostState`, the refusal)."""
    return f"DaemonSet/{mark.daemonset} (labelled by the tool's phase 1)"
