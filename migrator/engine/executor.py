"""One step's Kubernetes write, idempotent or guarded (json-patch `test`, delete preconditions):
a retried or resumed write cannot clobber someone else's."""

from __future__ import annotations

from functools import singledispatch
from typing import TYPE_CHECKING

from migrator.errors import APIConflict, APINotFound, APITestFailed, GateFailed
from migrator.model import kinds
from migrator.model import objects as o
from migrator.model.stacks import Catalog
from migrator.model.steps import (
    CreateAlias,
    DeleteAlias,
    HoldStrategy,
    RestoreStrategy,
    SetLabels,
    SetSelector,
    Step,
)

if TYPE_CHECKING:
    from migrator.kube.client import Kube


@singledispatch
def execute(step: Step, kube: Kube, namespace: str, catalog: Catalog, dry_run: bool = False
            ) -> str | None:
    """Write the step (`dry_run`: with `dryRun=All`); a note when accepted but not yet in effect
    (an alias delete held by finalizers). Pod-by-pod steps are not one write."""
    raise TypeError(f"{type(step).__name__} is not one write: the loop runs it "
                    "(pod_by_pod)")


@execute.register(SetLabels)
@execute.register(HoldStrategy)
@execute.register(RestoreStrategy)
def _set_labels(step: SetLabels | HoldStrategy | RestoreStrategy, kube: Kube, namespace: str,
                catalog: Catalog, dry_run: bool = False) -> str | None:
    kube.patch(kinds.DAEMONSET, step.daemonset, namespace, step.patch(), patch_type="merge",
               dry_run=dry_run)
    return None


@execute.register(SetSelector)
def _set_selector(step: SetSelector, kube: Kube, namespace: str,
                  catalog: Catalog, dry_run: bool = False) -> str | None:
    try:
        kube.patch(kinds.SERVICE, step.service, namespace, step.patch(), patch_type="json",
                   dry_run=dry_run)
    except APITestFailed as exc:  # the json-patch `test` failed (other 422s are raised)
        if step.satisfied(kube.get(kinds.SERVICE, step.service, namespace)):
            return None  # or an earlier attempt of this patch landed, its answer lost
        raise GateFailed(
            f"Service/{step.service}: its selector changed outside the tool; not switching",
            "run `dcgm-migrate plan` to see the current selector") from exc
    return None


@execute.register(CreateAlias)
def _create_alias(step: CreateAlias, kube: Kube, namespace: str,
                  catalog: Catalog, dry_run: bool = False) -> str | None:
    try:
        kube.create(step.body, dry_run=dry_run)
    except APIConflict as exc:
        live = kube.get(kinds.SERVICE, step.service, namespace)
        if o.terminating(live):
            raise GateFailed(
                f"Service/{step.service} is still being deleted ({o.terminating(live)}); "
                "it cannot be created again until it is gone",
                "wait for its finalizers (or remove them), then run again") from exc
        if not step.satisfied(live):
            raise GateFailed(
                f"Service/{step.service} appeared while the tool was creating it and is not "
                "the tool's; it was not touched", "see docs/runbook.md, 'coexistence'"
            ) from exc
    return None


@execute.register(DeleteAlias)
def _delete_alias(step: DeleteAlias, kube: Kube, namespace: str,
                  catalog: Catalog, dry_run: bool = False) -> str | None:
    live = kube.get(kinds.SERVICE, step.service, namespace)
    if live is None:
        return None
    if not catalog.common.tool_owned(live) or o.annotations_of(live).get(
            catalog.common.alias_of_annotation) != step.source:
        raise GateFailed(f"Service/{step.service} is no longer the tool's; not deleting it")
    try:
        kube.delete(kinds.SERVICE, step.service, namespace,
                    uid=str(o.meta(live).get("uid")),
                    resource_version=str(o.meta(live).get("resourceVersion")), dry_run=dry_run)
    except APINotFound:
        return None
    why = None if dry_run else o.terminating(kube.get(kinds.SERVICE, step.service, namespace))
    return (f"Service/{step.service}: deletion accepted but not done: {why}; it goes once they "
            "are removed") if why else None


def delete_pod(kube: Kube, namespace: str, name: str, uid: str) -> None:
    try:
        kube.delete(kinds.POD, name, namespace, uid=uid)
    except APINotFound:
        return
