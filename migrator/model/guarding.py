"""What the guard decides, as pure functions: a Snapshot in, corrections to the tool-owned aliases
out: **hold** (template lost the common label: back to the app label), **release** (phase 3's
gates pass again), **sync** (patched back to what phase 2 would create), **create again**.
A held alias carries `dcgm-migrate/guard-held: <reason>`, telling a deliberate hold from drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migrator.model import aliasing
from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.objects import rendered_by
from migrator.model.snapshot import Snapshot
from migrator.model.stacks import Catalog, Component

Obj = dict[str, Any]
HELD_ANNOTATION = "dcgm-migrate/guard-held"
HOLD, RELEASE, CLEAR, SYNC = "hold", "release", "clear", "sync"
NOBODY, TOOL, OTHER = "", "dcgm-migrate", "other"  # holders of a stable name (`holder`)


def _pointer(key: str) -> str:
    """A JSON Pointer segment (RFC 6901): `~` → `~0`, `/` → `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


HELD_PATH = f"/metadata/annotations/{_pointer(HELD_ANNOTATION)}"


@dataclass(frozen=True)
class Correction:
    """One write to one alias: a selector move (hold/release) or a config re-sync."""

    action: str  # hold | release | clear | sync
    service: str
    reason: str
    selector_before: Mapping[str, str] = field(default_factory=dict)
    selector_after: Mapping[str, str] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)  # sync: spec field → wanted value
    resource_version: str = ""  # the version of the Service the correction was decided on
    held: bool = False  # the Service carries the held annotation now

    def patch(self) -> list[Obj]:
        """A JSON patch testing the resourceVersion decided on and, for a move, the old selector."""
        ops: list[Obj] = [{"op": "test", "path": "/metadata/resourceVersion",
                           "value": self.resource_version}] if self.resource_version else []
        if self.action == SYNC:
            ops += [{"op": "add", "path": f"/metadata/annotations/{_pointer(key)}",
                     "value": value}
                    for key, value in sorted((self.fields.get("annotations") or {}).items())]
            ops += [{"op": "add", "path": f"/spec/{key}", "value": value}
                    for key, value in sorted(self.fields.items()) if key != "annotations"]
            return ops
        ops.append({"op": "test", "path": "/spec/selector", "value": dict(self.selector_before)})
        if self.action == CLEAR:
            return [*ops, {"op": "remove", "path": HELD_PATH}]
        ops.append({"op": "replace", "path": "/spec/selector", "value": dict(self.selector_after)})
        if self.action == HOLD:
            ops.append({"op": "add", "path": HELD_PATH, "value": self.reason})
        elif self.held:
            ops.append({"op": "remove", "path": HELD_PATH})
        return ops

    def satisfied(self, live: Obj | None) -> bool:
        """The live Service already shows this correction (an earlier attempt landed)."""
        if live is None:
            return False
        if self.action == SYNC:
            wanted = {"spec": {k: v for k, v in self.fields.items() if k != "annotations"},
                      "metadata": {"annotations": self.fields.get("annotations") or {}}}
            return not aliasing.differences(live, wanted)
        if self.action == CLEAR:
            return HELD_ANNOTATION not in o.annotations_of(live)
        return dict(o.dig(live, "spec", "selector") or {}) == dict(self.selector_after)

    def as_dict(self) -> dict[str, Any]:
        return {"action": self.action, "service": self.service, "reason": self.reason,
                "selectorBefore": dict(self.selector_before) or None,
                "selectorAfter": dict(self.selector_after) or None,
                "fields": sorted(self.fields)}


class Alias:
    """A tool-owned alias Service and the component it stands for."""

    def __init__(self, service: Obj, component: Component) -> None:
        self.service, self.component, self.name = service, component, o.name(service)
        self.selector: dict[str, str] = dict(o.dig(service, "spec", "selector") or {})
        self.held = HELD_ANNOTATION in o.annotations_of(service)
        self.resource_version = o.resource_version(service)


def aliases(snapshot: Snapshot, catalog: Catalog) -> list[Alias]:
    """The Services the tool owns as aliases of the catalog's sources, no release managing them."""
    common = catalog.common
    out = []
    for name, svc in sorted(snapshot.services.items()):
        if not common.tool_owned(svc) or catalog.managed_by_release(svc):
            continue
        source = o.annotations_of(svc).get(common.alias_of_annotation)
        comp = next((c for c in catalog.components
                     if c.alias == name and c.service == source), None)
        if comp is not None:
            out.append(Alias(svc, comp))
    return out


def holds(snapshot: Snapshot, catalog: Catalog) -> list[Correction]:
    """Aliases on the common label whose DaemonSet's template lost it: back to the app label."""
    out = []
    for alias in aliases(snapshot, catalog):
        comp = alias.component
        ds = snapshot.daemonsets.get(comp.daemonset)
        key, value = comp.common_label.key, comp.common_label.value
        if (alias.selector != comp.common_selector or ds is None  # no DaemonSet: nothing rolls
                or o.template_labels(ds).get(key) == value):
            continue
        reason = (f"DaemonSet/{comp.daemonset}'s pod template lost {key}={value} (an operator "
                  "re-render?); the alias selects the app label until it is back and rolled "
                  "out")
        out.append(Correction(HOLD, alias.name, reason, alias.selector, comp.app_selector,
                              resource_version=alias.resource_version, held=alias.held))
    return out


def release_gates(snapshot: Snapshot, comp: Component,
                  forward: Mapping[str, str]) -> list[g.GateResult]:
    """Before a held alias goes forward: template labelled, rolled out, pods labelled, superset."""
    ds = snapshot.daemonsets.get(comp.daemonset)
    if ds is None:
        return [g.GateResult(f"exists/{comp.daemonset}", False,
                             f"DaemonSet/{comp.daemonset} is gone")]
    key, value = comp.common_label.key, comp.common_label.value
    has = o.template_labels(ds).get(key) == value
    out = [g.GateResult(f"template-labelled/{comp.daemonset}", has,
                        f"template {'carries' if has else 'lacks'} {key}={value}")]
    if has:
        out.append(g.rollout_complete(ds))
        out.append(g.pods_carry(snapshot, comp.daemonset, {key: value}, gate="mixed-rollout"))
        superset, _ = g.selector_superset(snapshot, comp.alias or "", comp.app_selector,
                                          forward, comp.local_traffic, [comp.daemonset])
        out.append(superset)
    return out


def _held_switched(snapshot: Snapshot, catalog: Catalog,
                   switched: Mapping[str, Mapping[str, str]]) -> list[Alias]:
    return [a for a in aliases(snapshot, catalog) if a.held and a.name in switched
            and a.selector == a.component.app_selector]


def release_pending(snapshot: Snapshot, catalog: Catalog,
                    switched: Mapping[str, Mapping[str, str]]) -> bool:
    """Could a held alias be released, judging by its DaemonSet alone (then read the pods)?"""
    daemonsets = Snapshot(snapshot.namespace, daemonsets=snapshot.daemonsets)
    return any(all(r.ok for r in release_gates(daemonsets, a.component, switched[a.name])[:2])
               for a in _held_switched(snapshot, catalog, switched))


def releases(snapshot: Snapshot, catalog: Catalog,
             switched: Mapping[str, Mapping[str, str]]) -> list[Correction]:
    """Release the held aliases phase 3 switched (alias → its selector) once every gate passes."""
    out = []
    for alias in _held_switched(snapshot, catalog, switched):
        comp = alias.component
        forward = switched[alias.name]
        if all(r.ok for r in release_gates(snapshot, comp, forward)):
            out.append(Correction(RELEASE, alias.name, f"DaemonSet/{comp.daemonset} carries "
                                  f"{comp.common_label.key} again and is rolled out",
                                  alias.selector, dict(forward),
                                  resource_version=alias.resource_version, held=True))
    return out


def clears(snapshot: Snapshot, catalog: Catalog) -> list[Correction]:
    """A held mark on an alias no longer on the app label is stale: removed."""
    return [Correction(CLEAR, a.name, "no longer held: the alias left the app label",
                       a.selector, a.selector, resource_version=a.resource_version, held=True)
            for a in aliases(snapshot, catalog)
            if a.held and a.selector != a.component.app_selector]


def syncs(snapshot: Snapshot, catalog: Catalog,
          desired: Mapping[str, Mapping[str, Any]]) -> list[Correction]:
    """Aliases differing from what phase 2 would create now (`desired`: alias → that body)."""
    out = []
    for alias in aliases(snapshot, catalog):
        want = desired.get(alias.name)
        if want is not None and (diff := aliasing.differences(alias.service, want)):
            out.append(Correction(SYNC, alias.name,
                                  f"differs from Service/{alias.component.service} in "
                                  f"{aliasing.describe(diff)}", fields=diff,
                                  resource_version=alias.resource_version))
    return out


def _owner_of_source(source: Mapping[str, Any]) -> Obj | None:
    """The source's controller CR, as `aliasing.alias_body` takes it (the Role reads no CR)."""
    ref = o.controller_owner(source)
    return {"apiVersion": ref.get("apiVersion"), "kind": ref.get("kind"),
            "metadata": {"name": ref.get("name"), "uid": ref.get("uid")}} if ref else None


def missing_aliases(snapshot: Snapshot, catalog: Catalog,
                    switched: Mapping[str, Mapping[str, str]]) -> list[Obj]:
    """Alias bodies to create again (held on the app label where phase 3 had switched it)."""
    out = []
    for comp in catalog.components:
        source = snapshot.services.get(comp.service)
        if (not comp.alias or comp.daemonset not in snapshot.daemonsets or source is None
                or comp.alias in snapshot.services or o.terminating(source)):
            continue
        body = aliasing.alias_body(snapshot.namespace, catalog.common, comp, source,
                                   _owner_of_source(source))
        if comp.alias in switched:
            body["metadata"]["annotations"][HELD_ANNOTATION] = (
                "created again by the guard on the app label; moved to the selector phase 3 "
                "recorded once its gates pass")
        out.append(body)
    return out


def decide(snapshot: Snapshot, catalog: Catalog, switched: Mapping[str, Mapping[str, str]],
           desired: Mapping[str, Mapping[str, Any]]) -> list[Correction]:
    """Every correction of a full pass, holds first (they protect endpoints)."""
    return [*holds(snapshot, catalog), *releases(snapshot, catalog, switched),
            *clears(snapshot, catalog), *syncs(snapshot, catalog, desired)]


def holder(service: Mapping[str, Any] | None, catalog: Catalog) -> str:
    """Who holds a stable name (by name, not uid): NOBODY, the ClusterPolicy rendering it,
    TOOL, `<Kind>/<name>` of another controller, else OTHER."""
    if service is None or o.terminating(service):
        return NOBODY
    rendered = rendered_by(service)
    if rendered is not None:
        return rendered
    if catalog.common.tool_owned(service) and not catalog.managed_by_release(service):
        return TOOL
    ref = o.controller_owner(service)
    return f"{ref.get('kind')}/{ref.get('name')}" if ref else OTHER


def changed_hands(before: str | None, after: str) -> bool:
    """Did a stable name change hands (`before` None: a first look)? Losing it counts."""
    return before is not None and after != before
