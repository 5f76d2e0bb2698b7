"""DRA for pods: the resourceclaim controller (kubernetes/pkg/controller/resourceclaim/
controller.go) and the scheduler's DRA plugin (pkg/scheduler/framework/plugins/
dynamicresources) in one loop, over the pure rules of `dcgm_sim.dra`.

For each live pod with `spec.resourceClaims`: a claim from each `resourceClaimTemplateName`
(`<pod>-<claim>-xxxxx`, owned by the pod, annotated `resource.kubernetes.io/pod-claim-name`),
recorded in the pod's `status.resourceClaimStatuses`; then each claim allocated on the pod's
node and reserved for the pod. The sim's pods are bound when created (the DaemonSet controller
pins them), so a claim that cannot be allocated turns the pod's `PodScheduled` condition False
(reason `Unschedulable`, as the scheduler reports it) and the kubelet does not start it
(`dra.claims_ready`); it is retried when the node changes (a cleared fault) or the template
appears. Generated claims go with their pod (garbage collector, ownerReference).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping
from typing import Any

from dcgm_sim import dra, kinds
from dcgm_sim.clock import SimClock
from dcgm_sim.controllers import pods as P
from dcgm_sim.controllers.base import Controller, NodeCache
from dcgm_sim.jsoncopy import clone
from dcgm_sim.store import Event, Store, StoreError

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodKey = tuple[str, str]


class ResourceClaimController(Controller):
    """Creates, allocates and reserves the claims of pods that declare them."""

    name = "resourceclaim"
    resources = frozenset({kinds.POD.key, kinds.NODE.key, kinds.RESOURCE_CLAIM_TEMPLATE.key,
                           kinds.RESOURCE_CLAIM.key})

    def __init__(self, store: Store, clock: SimClock) -> None:
        super().__init__(store, clock)
        self._nodes = NodeCache()
        self._waiting: dict[PodKey, str] = {}  # pods not yet done -> their node
        self._done: set[str] = set()  # pod uids whose claims are all reserved
        # pod uid -> pod claim name -> generated claim: `lookupClaimForPod` without a list
        self._made: dict[str, dict[str, str]] = {}

    def prime(self) -> None:
        self._nodes.prime(self.store)
        for claim in self.store.list(kinds.RESOURCE_CLAIM)[0]:
            self._note_claim(claim, deleted=False)
        for pod in self.store.list(kinds.POD)[0]:
            if dra.pod_claims(pod):
                self.schedule(("pod", pod["metadata"]["namespace"], pod["metadata"]["name"]), 0)

    def wants(self, event: Event) -> bool:
        """Pods without claims, and pods already set up, cost nothing."""
        if event.resource is not kinds.POD:
            return event.resource is not kinds.RESOURCE_CLAIM or event.type != "MODIFIED"
        obj = event.object
        if event.type == "DELETED":
            return obj["metadata"]["uid"] in self._done or _key(obj) in self._waiting
        return bool(dra.pod_claims(obj)) and obj["metadata"]["uid"] not in self._done

    def handle(self, events: list[Event], due: list[Hashable]) -> None:
        todo: set[PodKey] = set()
        for item in due:
            if isinstance(item, tuple) and len(item) == 3:
                todo.add((str(item[1]), str(item[2])))
        for ev in events:
            obj = ev.object
            if ev.resource is kinds.NODE:
                old = self._nodes.get(obj["metadata"]["name"])
                name = self._nodes.note(ev)
                if ev.type == "DELETED":
                    continue
                if old is None or dra.node_devices(old) != dra.node_devices(obj):
                    todo.update(k for k, n in self._waiting.items() if n == name)
            elif ev.resource is kinds.POD:
                if ev.type == "DELETED":
                    self._done.discard(obj["metadata"]["uid"])
                    self._made.pop(obj["metadata"]["uid"], None)
                    self._waiting.pop(_key(obj), None)
                else:
                    todo.add(_key(obj))
            elif ev.resource is kinds.RESOURCE_CLAIM_TEMPLATE:
                ns = obj["metadata"]["namespace"]
                todo.update(k for k in self._waiting if k[0] == ns)
            else:
                self._note_claim(obj, deleted=ev.type == "DELETED")
                if ev.type == "DELETED":  # its pod (if any is left) needs it again
                    todo.update(k for k in self._waiting if k[0] == obj["metadata"]["namespace"])
        for key in sorted(todo):
            try:
                self._sync(key)
            except StoreError as err:
                log.info("resourceclaim: pod %s/%s: %s; retrying", key[0], key[1], err.message)
                self.schedule(("pod", *key), 1.0)

    # ---- one pod ---------------------------------------------------------------------------

    def _sync(self, key: PodKey) -> None:
        pod = self.store.find(kinds.POD, key[0], key[1])
        if pod is None or P.is_deleting(pod) or P.is_pod_terminal(pod) or not dra.pod_claims(pod):
            self._waiting.pop(key, None)
            return
        statuses = dra.claim_statuses(pod)
        problem = ""
        for pod_claim in dra.pod_claims(pod):
            name = dra.claim_name_of(pod, pod_claim)
            if name is None:
                name = self._create_claim(pod, pod_claim)
                if name is None:
                    problem = problem or (f'waiting for resource claim template '
                                          f'"{pod_claim.get("resourceClaimTemplateName")}"')
                    continue
                statuses[str(pod_claim["name"])] = name
            if not self._allocate(pod, name):
                problem = dra.CANNOT_ALLOCATE
        self._write_pod(pod, statuses, problem)
        if problem:
            self._waiting[key] = P.node_name(pod)
        else:
            self._waiting.pop(key, None)
            self._done.add(pod["metadata"]["uid"])

    def _note_claim(self, claim: Mapping[str, Any], *, deleted: bool) -> None:
        ref = P.controller_ref(claim) or {}
        pod_claim = (claim["metadata"].get("annotations") or {}).get(
            dra.POD_CLAIM_NAME_ANNOTATION)
        if ref.get("kind") != "Pod" or pod_claim is None:
            return
        made = self._made.setdefault(str(ref.get("uid")), {})
        if deleted:
            made.pop(pod_claim, None)
            if not made:
                del self._made[str(ref.get("uid"))]
        else:
            made[pod_claim] = claim["metadata"]["name"]

    def _create_claim(self, pod: Obj, pod_claim: Mapping[str, Any]) -> str | None:
        """`handleClaim`: the claim already made for this pod claim, else a new one."""
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        claim_name = str(pod_claim.get("name"))
        made = self._made.get(uid, {}).get(claim_name)
        if made is not None and self.store.find(kinds.RESOURCE_CLAIM, ns, made) is not None:
            return made
        template_name = pod_claim.get("resourceClaimTemplateName")
        template = self.store.find(kinds.RESOURCE_CLAIM_TEMPLATE, ns, str(template_name or ""))
        if template is None:
            return None
        generate = dra.generate_name(pod["metadata"]["name"], claim_name)
        for _ in range(5):
            try:
                claim = dra.claim_from_template(pod, pod_claim, template,
                                                generate + P.random_suffix())
                created = self.store.create(kinds.RESOURCE_CLAIM, claim)
                self._note_claim(created, deleted=False)
                return str(created["metadata"]["name"])
            except StoreError as err:
                if err.reason != "AlreadyExists":
                    raise
        return None

    def _allocate(self, pod: Obj, name: str) -> bool:
        """Allocate the claim on the pod's node (if not yet) and reserve it for the pod."""
        claim = self.store.find(kinds.RESOURCE_CLAIM, pod["metadata"]["namespace"], name)
        if claim is None:
            return False
        if dra.reserved_for(claim, pod):
            return True
        status = clone(claim.get("status") or {})
        if not status.get("allocation"):
            node = self._nodes.get(P.node_name(pod))
            allocation = dra.allocate(claim, node, self._taken(claim, P.node_name(pod)))
            if allocation is None:
                return False
            status["allocation"] = allocation
        status["reservedFor"] = [*(status.get("reservedFor") or []), dra.reservation(pod)]
        body = {"metadata": {"name": name, "namespace": claim["metadata"]["namespace"]},
                "status": status}
        self.store.update(kinds.RESOURCE_CLAIM, body, subresource="status")
        return True

    def _taken(self, claim: Mapping[str, Any], node: str) -> int:
        """Devices of `node` allocated without admin access to other claims (only read when
        the claim has a request without admin access)."""
        requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
        if all((r.get("exactly") or {}).get("adminAccess") for r in requests):
            return 0
        taken = 0
        for other in self.store.list(kinds.RESOURCE_CLAIM)[0]:
            results = (((other.get("status") or {}).get("allocation") or {}).get("devices")
                       or {}).get("results") or []
            taken += sum(1 for r in results if r.get("pool") == node and not r.get("adminAccess"))
        return taken

    def _write_pod(self, pod: Obj, statuses: dict[str, str], problem: str) -> None:
        status = dict(pod.get("status") or {})
        order = [str(c.get("name")) for c in dra.pod_claims(pod)]
        listed = [{"name": n, "resourceClaimName": statuses[n]} for n in order if n in statuses]
        if listed:
            status["resourceClaimStatuses"] = listed
        status["conditions"] = _scheduled(status.get("conditions") or [], problem,
                                          len(self._nodes))
        if status == (pod.get("status") or {}):
            return
        meta = pod["metadata"]
        body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "uid": meta["uid"]}, "status": status}
        self.store.update(kinds.POD, body, subresource="status")


def _scheduled(conditions: list[Obj], problem: str, nodes: int) -> list[Obj]:
    """The PodScheduled condition as the scheduler leaves it: True once bound, or False with
    reason Unschedulable and the filter's message while a claim cannot be allocated."""
    old = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    new: Obj = {"type": "PodScheduled", "status": "True", "lastProbeTime": None}
    if problem == dra.CANNOT_ALLOCATE:
        others = (f", {nodes - 1} node(s) didn't match Pod's node affinity/selector"
                  if nodes > 1 else "")
        new = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": f"0/{max(nodes, 1)} nodes are available: 1 {problem}{others}.",
               "lastProbeTime": None}
    elif problem:
        new = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": problem, "lastProbeTime": None}
    if old is not None and all(old.get(k) == v for k, v in new.items()):
        return conditions
    if old is not None and old.get("status") == new["status"]:
        new["lastTransitionTime"] = old.get("lastTransitionTime")
    else:
        new["lastTransitionTime"] = P.now_rfc3339()
    if old is None:
        return [*conditions, new]
    return [new if c.get("type") == "PodScheduled" else c for c in conditions]


def _key(pod: Mapping[str, Any]) -> PodKey:
    return (pod["metadata"]["namespace"], pod["metadata"]["name"])
