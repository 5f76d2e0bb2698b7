"""OnDelete DaemonSets left half-rolled: a template changed (by phase 1, its rollback, an
operator re-render after a CR edit) while `updateStrategy: OnDelete` replaces a pod only when
it is deleted (upstream kubernetes `pkg/controller/daemon/daemon_controller.go`, `syncDaemonSet`:
`rollingUpdate` runs for RollingUpdate only). What `--roll-on-delete` finishes, and what a
fix line says about one, since `kubectl rollout status` refuses OnDelete DaemonSets
("rollout status is only available for RollingUpdate strategy type",
kubectl `pkg/polymorphichelpers/rollout_status.go`, `DaemonSetStatusViewer.Status`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from migrator.model import gates as g
from migrator.model import objects as o
from migrator.model.gates import GateResult
from migrator.model.snapshot import PodView, Snapshot

# The deprecated labels the DaemonSet controller still writes (upstream
# `apps/v1.DaemonSetTemplateGenerationKey`, `DefaultDaemonSetUniqueLabelKey`): a pod is updated
# when its template generation is the DaemonSet's (`daemon/util.IsPodUpdated`).
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
POD_GENERATION = "pod-template-generation"


def on_delete(ds: Mapping[str, Any]) -> bool:
    return o.update_strategy(ds) == "OnDelete"


def behind(ds: Mapping[str, Any]) -> bool:
    """The controller counts pods that do not run the current template."""
    updated, _, desired = g.rollout_counts(dict(ds))
    return updated < desired


def stale_pods(snapshot: Snapshot, ds: Mapping[str, Any],
               keys: Iterable[str]) -> list[PodView]:
    """The live pods of an OnDelete DaemonSet that need deleting, by node: those whose labels
    `keys` differ from the template's, and, while the controller counts pods not updated,
    those of another template generation (`IsPodUpdated`'s generation test; a pod it counts
    updated by its revision hash alone runs an identical template and is rolled once more)."""
    want = {k: o.template_labels(ds).get(k) for k in keys}
    generation = o.annotations_of(ds).get(TEMPLATE_GENERATION)
    old_generation = behind(ds) and generation is not None
    return sorted((p for p in snapshot.pods_of(o.name(ds)) if not p.deleting and (
        any(p.labels.get(k) != v for k, v in want.items())
        or (old_generation and p.labels.get(POD_GENERATION) != generation))),
        key=lambda p: p.node)


def health_gate(snapshot: Snapshot, ds: Mapping[str, Any], roll_on_delete: bool) -> GateResult:
    """`rollout-complete` before phase 1 writes: a rollout complete, except that an OnDelete
    DaemonSet the tool rolls itself (`--roll-on-delete`) only needs every pod available —
    pods of an older template are what its `RollPods` step finishes."""
    result = g.daemonset_healthy(snapshot, dict(ds))
    if result.ok or not (roll_on_delete and on_delete(ds)):
        return result
    updated, available, desired = g.rollout_counts(dict(ds))
    observed = int((ds.get("status") or {}).get("observedGeneration") or 0)
    if available < desired or observed < int(o.meta(ds).get("generation") or 0):
        return result
    return GateResult(result.name, True, f"updated {updated}/{desired}, available "
                      f"{available}/{desired}: OnDelete, the tool rolls the older pods itself "
                      "(--roll-on-delete)")


def rollout_fix(snapshot: Snapshot, ds: Mapping[str, Any]) -> str:
    """The fix for an OnDelete DaemonSet whose rollout is not complete (`kubectl rollout
    status` refuses one): the first pod of an older template to delete, and how to list the
    rest; `--roll-on-delete` does it for the tool's own writes."""
    name, ns = o.name(ds), snapshot.namespace
    generation = o.annotations_of(ds).get(TEMPLATE_GENERATION)
    old = [p for p in snapshot.pods_of(name) if not p.deleting
           and generation is not None and p.labels.get(POD_GENERATION) != generation]
    first = (f"delete `kubectl -n {ns} delete pod {old[0].name}` (on {old[0].node}) first, "
             if old else "delete them ")
    return (f"updateStrategy OnDelete replaces a pod only when it is deleted: {first}then the "
            f"others one node at a time, each after the last one's replacement is Ready "
            f"(`kubectl -n {ns} get pods -l app={name} -L {POD_GENERATION}` lists them; the "
            f"template is generation {generation}); after dcgm-migrate's own apply or rollback "
            "of phase 1, rerunning it with --roll-on-delete does this")
