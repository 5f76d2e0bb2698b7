"""Pure helpers on raw objects that several controllers share (no store, no I/O).

They mirror the Kubernetes helpers of the same names (`podutil.IsPodReady`,
`IsPodAvailable`, `metav1.GetControllerOf`, `intstr.GetScaledValueFromIntOrPercent`), so every
controller reads readiness, ownership and percentages exactly the same way.
"""

from __future__ import annotations

import json
import math
import random
import struct
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dcgm_sim.store import now_rfc3339 as now_rfc3339  # the one stamp, re-exported

Obj = dict[str, Any]

# The alphabet Kubernetes uses for generated names and hashes (k8s.io/apimachinery/pkg/util/rand).
SAFE_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
POD_PHASES_TERMINAL = frozenset({"Succeeded", "Failed"})


def parse_rfc3339(value: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, None when absent or malformed."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def random_suffix(rng: random.Random | None = None, n: int = 5) -> str:
    """`names.SimpleNameGenerator`'s suffix: n characters of the safe alphabet."""
    pick = rng.choice if rng is not None else random.choice
    return "".join(pick(SAFE_ALPHANUMS) for _ in range(n))


def safe_encode(text: str) -> str:
    """`rand.SafeEncodeString`: map each byte onto the safe alphabet."""
    return "".join(SAFE_ALPHANUMS[ord(c) % len(SAFE_ALPHANUMS)] for c in text)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def template_hash(template: Mapping[str, Any], collision_count: int = 0) -> str:
    """`controller.ComputeHash` (kubernetes/pkg/controller/controller_utils.go): fnv32a of the
    pod template (upstream hashes its Go value as spew prints it, the sim its canonical JSON),
    then of the collision count as 8 bytes, little-endian uint32 first; safe-encoded (a
    `controller-revision-hash` label value such as `7c9b5d4f8`). Upstream adds the count when
    the pointer is set; the sim's callers pass 0 for unset, and nothing sets it to 0."""
    data = canonical_json(template).encode()
    if collision_count:
        data += struct.pack("<I", collision_count & 0xFFFFFFFF) + bytes(4)
    return safe_encode(str(fnv32a(data)))


# ---- metadata --------------------------------------------------------------------------------


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def controller_ref(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """`metav1.GetControllerOf`: the ownerReference with `controller: true`, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_reference(owner: Mapping[str, Any], *, controller: bool = True) -> dict[str, Any]:
    """`metav1.NewControllerRef`: the reference a controller puts on what it creates."""
    meta = owner["metadata"]
    ref: dict[str, Any] = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if controller:
        ref["controller"] = True
        ref["blockOwnerDeletion"] = True
    return ref


def is_deleting(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


# ---- pod state -------------------------------------------------------------------------------


def condition(obj: Mapping[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return None


def is_pod_ready(pod: Mapping[str, Any]) -> bool:
    """`podutil.IsPodReady`: the Ready condition is True."""
    cond = condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def is_pod_terminal(pod: Mapping[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in POD_PHASES_TERMINAL


def pod_ips(pod: Mapping[str, Any]) -> list[str]:
    """Every pod IP, primary first: `status.podIPs`, or `podIP` alone when that is unset."""
    status = pod.get("status") or {}
    ips = [str(i["ip"]) for i in status.get("podIPs") or [] if i.get("ip")]
    return ips or ([str(status["podIP"])] if status.get("podIP") else [])


def pod_ip(pod: Mapping[str, Any]) -> str | None:
    status = pod.get("status", {})
    ip = status.get("podIP")
    if ip:
        return str(ip)
    ips = status.get("podIPs") or []
    return str(ips[0]["ip"]) if ips else None


def node_name(pod: Mapping[str, Any]) -> str:
    return str(pod.get("spec", {}).get("nodeName") or "")


def creation_sort_key(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    """`podByCreationTimestampAndPhase`: scheduled first, then oldest, then by name."""
    meta = pod.get("metadata", {})
    scheduled = 0 if node_name(pod) else 1
    return (scheduled, str(meta.get("creationTimestamp", "")), meta.get("name", ""))


# ---- int-or-percent --------------------------------------------------------------------------


def scaled_value(value: int | str | None, total: int, *, round_up: bool, default: int) -> int:
    """`intstr.GetScaledValueFromIntOrPercent` (a missing value is `default`)."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise ValueError(f"invalid int or percent {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if text.endswith("%"):
        pct = int(text[:-1])
        exact = pct * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(text)
