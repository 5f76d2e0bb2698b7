"""What each GPU Operator stack runs, read from `plans/*.yaml` (data, not code).

The engine takes every object name and label from here and nowhere else. Loading reads package
data only; everything else in this module is pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from migrator.model import yamldoc
from migrator.model.selectors import parse

STACK_NAMES = ("clusterpolicy", "gpucluster")


@dataclass(frozen=True)
class Label:
    key: str
    value: str

    def as_dict(self) -> dict[str, str]:
        return {self.key: self.value}


@dataclass(frozen=True)
class Component:
    """One DaemonSet + Service pair of a stack (DCGM or DCGM Exporter)."""

    stack: str
    component: str  # "dcgm" | "dcgm-exporter"
    daemonset: str
    app_label: str
    service: str
    common_label: Label
    local_traffic: bool
    exporter: bool = False
    alias: str | None = None

    @property
    def app_selector(self) -> dict[str, str]:
        return {"app": self.app_label}

    @property
    def common_selector(self) -> dict[str, str]:
        return self.common_label.as_dict()


@dataclass(frozen=True)
class CustomResource:
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


@dataclass(frozen=True)
class Stack:
    name: str
    cr: CustomResource
    components: tuple[Component, ...]

    def component(self, name: str) -> Component | None:
        return next((c for c in self.components if c.component == name), None)


@dataclass(frozen=True)
class Common:
    canonical_scrape_service: str
    managed_by: Label
    alias_of_annotation: str
    operator_state_label: str
    operator_hash_annotation: str
    state_configmap: str

    def tool_owned(self, obj: Mapping[str, Any]) -> bool:
        """The object carries the tool's managed-by label (an alias, the state ConfigMap)."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(self.managed_by.key) == self.managed_by.value)


@dataclass(frozen=True)
class Release:
    """A GPU Operator release that manages the stable names itself (`plans/releases.yaml`)."""

    name: str
    shared_label: Label  # on every stable Service its reconciler manages
    component_labels: Mapping[str, Label]  # component → what its DaemonSets render
    deletes_services: tuple[str, ...]

    def manages(self, service: Mapping[str, Any]) -> bool:
        """This release's reconciler manages the Service (its shared label is on it)."""
        labels = (service.get("metadata") or {}).get("labels") or {}
        return bool(labels.get(self.shared_label.key) == self.shared_label.value)


@dataclass(frozen=True)
class Catalog:
    """Both stacks plus the shared settings."""

    stacks: tuple[Stack, ...]
    common: Common
    releases: tuple[Release, ...] = ()

    def release(self, name: str) -> Release:
        for r in self.releases:
            if r.name == name:
                return r
        raise KeyError(name)

    def managed_by_release(self, service: Mapping[str, Any] | None) -> Release | None:
        """The operator release whose own reconciler manages this Service (a stable name
        handed over: the tool never writes it again), or None."""
        if service is None:
            return None
        return next((r for r in self.releases if r.manages(service)), None)

    def release_label(self, comp: Component, services: Mapping[str, Mapping[str, Any]]
                      ) -> tuple[Release, Label] | None:
        """The operator release that manages this component's stable name now, and the
        label its Service selects the component's pods by; None while the tool's is used."""
        release = self.managed_by_release(services.get(comp.alias or comp.service))
        label = release.component_labels.get(comp.component) if release else None
        return (release, label) if release is not None and label is not None else None

    def stack(self, name: str) -> Stack:
        for s in self.stacks:
            if s.name == name:
                return s
        raise KeyError(name)

    @property
    def components(self) -> tuple[Component, ...]:
        return tuple(c for s in self.stacks for c in s.components)


def stray_selectors(components: Iterable[Component]) -> list[str]:
    """One label selector per common label key of these components: pods with it and none of
    their app labels (strays; a `notin` also matches pods without an `app` label)."""
    comps = list(components)
    apps = ",".join(sorted({c.app_label for c in comps}))
    return [f"{key},app notin ({apps})" for key in sorted({c.common_label.key for c in comps})]


def pod_selectors(components: Iterable[Component], *, per_app: bool = False) -> list[str]:
    """The one definition of the pods that belong to these components (every pod their gates
    look at), as label selectors whose union they are: their app labels, then the strays, so
    DaemonSet pods that phase 1 labelled are not read twice. `per_app`: one selector per app
    label (a reflector each, so a rollout re-lists only its own)."""
    comps = list(components)
    if not comps:
        return []
    apps = sorted({c.app_label for c in comps})
    own = [f"app={a}" for a in apps] if per_app else [f"app in ({','.join(apps)})"]
    return [*own, *stray_selectors(comps)]


def belongs(components: Iterable[Component]) -> Callable[[Mapping[str, str]], bool]:
    """Does a pod with these labels belong to the components: `pod_selectors` as a predicate
    (for pods already in hand, such as a cache's)."""
    selectors = [parse(s) for s in pod_selectors(components)]
    return lambda labels: any(s.matches(labels) for s in selectors)


def _label(d: dict[str, Any]) -> Label:
    return Label(str(d["key"]), str(d["value"]))


def parse_stack(doc: dict[str, Any]) -> Stack:
    name = str(doc["stack"])
    cr = CustomResource(**{k: str(v) for k, v in doc["cr"].items()})
    comps = tuple(
        Component(
            stack=name,
            component=str(c["component"]),
            daemonset=str(c["daemonset"]),
            app_label=str(c["app_label"]),
            service=str(c["service"]),
            common_label=_label(c["common_label"]),
            local_traffic=bool(c.get("local_traffic", False)),
            exporter=bool(c.get("exporter", False)),
            alias=c.get("alias"),
        )
        for c in doc["components"]
    )
    return Stack(name, cr, comps)


def parse_common(doc: dict[str, Any]) -> Common:
    return Common(
        canonical_scrape_service=str(doc["canonical_scrape_service"]),
        managed_by=_label(doc["managed_by"]),
        alias_of_annotation=str(doc["alias_of_annotation"]),
        operator_state_label=str(doc["operator_state_label"]),
        operator_hash_annotation=str(doc["operator_hash_annotation"]),
        state_configmap=str(doc["state_configmap"]),
    )


def parse_releases(doc: dict[str, Any]) -> tuple[Release, ...]:
    return tuple(
        Release(name=str(r["name"]), shared_label=_label(r["shared_label"]),
                component_labels={str(k): _label(v)
                                  for k, v in (r.get("component_labels") or {}).items()},
                deletes_services=tuple(str(s) for s in r.get("deletes_services") or ()))
        for r in doc.get("releases") or ())


def load_catalog() -> Catalog:
    """The shipped plans (package data `plans/*.yaml`), parsed on each call (about 2 ms; a
    command loads it once and passes it down: no module-level cache)."""
    root = resources.files("migrator.plans")

    def load(name: str) -> Any:
        return yamldoc.safe_load(root.joinpath(f"{name}.yaml").read_text())

    stacks = tuple(parse_stack(load(n)) for n in STACK_NAMES)
    return Catalog(stacks, parse_common(load("common")), parse_releases(load("releases")))
