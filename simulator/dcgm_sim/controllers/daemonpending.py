"""The default scheduler's part in placing DaemonSet pods, beside the DaemonSet controller.

The controller creates a pod pinned to its node; the scheduler binds it when the filter
(`interpod.Placement`: the assigned pods it filters against) passes, and otherwise leaves it
Pending with an Unschedulable condition, retried when an assigned pod is added, removed or
relabelled, or a node changes (see `interpod`).
"""

from __future__ import annotations

import logging
from typing import Any

from dcgm_sim import kinds
from dcgm_sim.controllers import interpod as I
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import NodeCache
from dcgm_sim.store import Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class PendingPods:
    """The scheduler cache and the Pending DaemonSet pods; `retry` says another scheduling
    attempt is due (`schedule`)."""

    def __init__(self, store: Store, nodes: NodeCache) -> None:
        self.store = store
        self._nodes = nodes
        self._placement = I.Placement(nodes, self._namespace_labels)
        self._pending: dict[tuple[str, str], Obj] = {}
        self.retry = False

    def primed(self) -> None:
        """After the initial snapshot: the Pending pods found get an attempt."""
        self.retry = bool(self._pending)

    def _namespace_labels(self, namespace: str) -> dict[str, str] | None:
        found = self.store.find(kinds.NAMESPACE, None, namespace)
        return None if found is None else dict(found["metadata"].get("labels") or {})

    def nodes_changed(self) -> None:
        self._placement.nodes_changed()
        self.retry = True

    def note(self, pod: Obj, *, deleted: bool) -> None:
        """Keep the scheduler cache and the Pending DaemonSet pods; an assigned pod added,
        removed or relabelled queues the Pending ones for another attempt."""
        uid = str(pod["metadata"].get("uid", ""))
        changed = self._placement.drop(uid) if deleted else self._placement.put(pod)
        self.retry = self.retry or changed
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        ref = P.controller_ref(pod) or {}
        if (deleted or P.node_name(pod) or P.is_deleting(pod) or P.is_pod_terminal(pod)
                or ref.get("kind") != "DaemonSet"):
            self._pending.pop(key, None)
        else:
            self._pending[key] = pod

    def placed(self, pod: Obj, node: str) -> Obj:
        """A new pod for `node` as the scheduler will leave it: bound (as created), or Pending
        with the filter's reason."""
        reason = self._placement.check(pod, node)
        if reason is None:
            return pod
        return I.unschedulable(pod, I.fit_error(len(self._nodes), reason))

    def schedule(self) -> None:
        """Another scheduling attempt for each Pending DaemonSet pod: bound when the filter
        passes now (`pods/binding`), else its Unschedulable condition kept."""
        self.retry = False
        for key in sorted(self._pending):
            pod = self._pending[key]
            node = I.target_node(pod)
            reason = self._placement.check(pod, node)
            try:
                if reason is None:
                    self._bind(pod, node)
                elif not I.is_unschedulable(pod):
                    message = I.fit_error(len(self._nodes), reason)
                    self._write_status(pod, I.scheduled_condition(False, message))
            except StoreError as err:
                if err.code not in (404, 409):
                    raise
                self.retry = True  # its next event brings it back

    def _bind(self, pod: Obj, node: str) -> None:
        bound = self.store.update(kinds.POD, dict(pod, spec=dict(pod["spec"], nodeName=node)))
        self.note(bound, deleted=False)
        self._write_status(bound, I.scheduled_condition(True))
        log.info("scheduler bound pod %s/%s to %s", pod["metadata"]["namespace"],
                 pod["metadata"]["name"], node)

    def _write_status(self, pod: Obj, cond: Obj) -> None:
        meta = pod["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": I.with_scheduled(pod.get("status") or {}, cond)}
        self.note(self.store.update(kinds.POD, body, subresource="status"), deleted=False)
