"""What each GPU Operator stack runs, read from `plans/*.yaml` (data, not code): the engine takes
every object name and label from here. Loading reads package data; the rest is pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from migrator.model import yamldoc
from migrator.model.kinds import Kind
from migrator.model.selectors import parse

STACK_NAMES = ("clusterpolicy", "gpucluster")


@dataclass(frozen=True)
class Label:
    key: str
    value: str

    def as_dict(self) -> dict[str, str]:
        return {self.key: self.value}

    def on(self, obj: Mapping[str, Any] | None) -> bool:
        """The object carries this label."""
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        return bool(labels.get(self.key) == self.value)


@dataclass(frozen=True)
class Component:
    """One DaemonSet + Service pair of a stack (DCGM or DCGM Exporter)."""

    stack: str
    component: str  # "dcgm" | "dcgm-exporter"
    daemonset: str
    app_label: str
    service: str
    common_label: Label
    local_traffic: bool = False
    exporter: bool = False
    alias: str | None = None

    @property
    def app_selector(self) -> dict[str, str]:
        return {"app": self.app_label}

    @property
    def common_selector(self) -> dict[str, str]:
        return self.common_label.as_dict()


@dataclass(frozen=True)
class Stack:
    name: str
    cr: Kind
    components: tuple[Component, ...]


@dataclass(frozen=True)
class Common:
    managed_by: Label
    alias_of_annotation: str
    operator_hash_annotation: str
    state_configmap: str

    def tool_owned(self, obj: Mapping[str, Any]) -> bool:
        """The object carries the tool's managed-by label (an alias, the state ConfigMap)."""
        return self.managed_by.on(obj)


@dataclass(frozen=True)
class Release:
    """A GPU Operator release that manages the stable names itself (`plans/releases.yaml`)."""

    name: str
    shared_label: Label  # on every stable Service its reconciler manages
    component_labels: Mapping[str, Label]  # component → what its DaemonSets render
    deletes_services: tuple[str, ...]

    def manages(self, service: Mapping[str, Any]) -> bool:
        """This release's reconciler manages the Service (its shared label is on it)."""
        return self.shared_label.on(service)


@dataclass(frozen=True)
class Catalog:
    """Both stacks plus the shared settings."""

    stacks: tuple[Stack, ...]
    common: Common
    releases: tuple[Release, ...] = ()

    def release(self, name: str) -> Release:
        return {r.name: r for r in self.releases}[name]

    def stack(self, name: str) -> Stack:
        return {s.name: s for s in self.stacks}[name]

    def managed_by_release(self, service: Mapping[str, Any] | None) -> Release | None:
        """The release whose reconciler manages this Service (the tool never writes it again)."""
        return next((r for r in self.releases if r.manages(service)), None) if service else None

    def release_label(self, comp: Component, services: Mapping[str, Mapping[str, Any]]
                      ) -> tuple[Release, Label] | None:
        """The operator release that manages this component's stable name now, and the
        label its Service selects the component's pods by; None while the tool's is used."""
        release = self.managed_by_release(services.get(comp.alias or comp.service))
        label = release.component_labels.get(comp.component) if release else None
        return (release, label) if release is not None and label is not None else None

    @property
    def components(self) -> tuple[Component, ...]:
        return tuple(c for s in self.stacks for c in s.components)


def pod_selectors(components: Iterable[Component], *, per_app: bool = False) -> list[str]:
    """The one definition of the pods of these components, as label selectors whose union they
    are: their app labels (`per_app`: one each), then per common label key the strays (pods with
    it and none of these app labels; a `notin` also matches pods without one), so none is read
    twice."""
    comps = list(components)
    if not comps:
        return []
    apps = sorted({c.app_label for c in comps})
    own = [f"app={a}" for a in apps] if per_app else [f"app in ({','.join(apps)})"]
    keys = sorted({c.common_label.key for c in comps})
    return [*own, *(f"{key},app notin ({','.join(apps)})" for key in keys)]


def belongs(components: Iterable[Component]) -> Callable[[Mapping[str, str]], bool]:
    """`pod_selectors` as a predicate on a pod's labels (for pods already in hand)."""
    selectors = [parse(s) for s in pod_selectors(components)]
    return lambda labels: any(s.matches(labels) for s in selectors)


def _label(d: dict[str, Any]) -> Label:
    return Label(str(d["key"]), str(d["value"]))


def _component(stack: str, c: dict[str, Any]) -> Component:
    """One component entry of a plan, by its known keys (others are ignored)."""
    return Component(stack=stack, component=str(c["component"]), daemonset=str(c["daemonset"]),
                     app_label=str(c["app_label"]), service=str(c["service"]),
                     common_label=_label(c["common_label"]),
                     local_traffic=bool(c.get("local_traffic", False)),
                     exporter=bool(c.get("exporter", False)), alias=c.get("alias"))


def load_catalog() -> Catalog:
    """The shipped plans (package data), parsed on each call: a command loads them once."""
    root = resources.files("migrator.plans")

    def load(name: str) -> Any:
        return yamldoc.safe_load(root.joinpath(f"{name}.yaml").read_text())

    stacks = tuple(
        Stack(doc["stack"], Kind(**doc["cr"], namespaced=False),
              tuple(_component(doc["stack"], c) for c in doc["components"]))
        for doc in map(load, STACK_NAMES))
    common = load("common")
    releases = tuple(
        Release(name=str(r["name"]), shared_label=_label(r["shared_label"]),
                component_labels={str(k): _label(v)
                                  for k, v in (r.get("component_labels") or {}).items()},
                deletes_services=tuple(str(s) for s in r.get("deletes_services") or ()))
        for r in load("releases").get("releases") or ())
    return Catalog(stacks, Common(_label(common["managed_by"]), common["alias_of_annotation"],
                                  common["operator_hash_annotation"], common["state_configmap"]),
                   releases)
