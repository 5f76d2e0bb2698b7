"""The scheduler's InterPodAffinity filter, for the pods the DaemonSet controller creates.

Upstream, the DaemonSet controller decides only *whether* a node should run a pod
(`NodeShouldRunDaemonPod` in kubernetes/pkg/controller/daemon/daemon_controller.go: node name,
required node affinity and taints, `scheduling.node_should_run`); it never looks at other pods.
Since 1.12 it creates the pod pinned to the node by a `metadata.name` node-affinity term and the
default scheduler places it, running every Filter plugin, InterPodAffinity among them
(pkg/scheduler/framework/plugins/interpodaffinity/filtering.go). The sim binds a DaemonSet pod
when it creates it; this module is the filter that binding passes first, and the cache of
assigned pods it reads:

- **Required terms only** (`requiredDuringSchedulingIgnoredDuringExecution`); preferred terms
  only score, so they are ignored. A term's namespaces are its `namespaces` plus those its
  `namespaceSelector` selects (`{}`: all); neither given, the pod's own namespace
  (`GetNamespacesFromPodAffinityTerm`). `matchLabelKeys` / `mismatchLabelKeys` are merged into
  the selector as `key in (value)` / `key notin (value)` of the term owner's labels, as the API
  server does when the pod is created. A null selector matches nothing, `{}` everything.
- **Filter order and reasons** (`Filter`): the incoming pod's affinity (for every term, a pod
  matching *all* its terms in the node's topology domain; the first pod of a group that matches
  its own terms passes when no pod matches anywhere) — "node(s) didn't match pod affinity
  rules", not resolvable by preemption; its anti-affinity (no matching pod in the node's domain
  of any term) — "node(s) didn't match pod anti-affinity rules"; then the symmetric rule,
  existing pods' anti-affinity (no assigned pod whose term matches the incoming pod has the
  node in its domain) — "node(s) didn't satisfy existing pods anti-affinity rules". A node
  without a term's topology key: affinity fails, anti-affinity does not apply.
- **Which pods count** (the scheduler cache): pods bound to a node, terminating ones included
  until they are gone; terminal (Succeeded/Failed) pods are left out.
- **A pod that fails** stays Pending without `spec.nodeName`, its `PodScheduled` condition False,
  reason `Unschedulable`, with the `FitError` message (schedule_one.go: the NodeAffinity
  PreFilter narrowed the pinned pod to its node, so every other node is "didn't satisfy
  plugin(s) [NodeAffinity]"; the preemption part as `DefaultPreemption` words it when no
  lower-priority pod can be evicted — the sim does not preempt). It is retried when an assigned
  pod is added, deleted or relabelled, or a node is added or relabelled (the plugin's
  `EventsToRegister`), and bound then (`pods/binding`: `spec.nodeName` and `PodScheduled`
  True).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dcgm_sim import labelselectors
from dcgm_sim.controllers import pods as P
from dcgm_sim.jsoncopy import clone

Obj = dict[str, Any]
NamespaceLabels = Callable[[str], Mapping[str, str] | None]

AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_RULES = "node(s) didn't satisfy existing pods anti-affinity rules"
OTHER_NODES = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"


# ---- terms -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Term:
    """A processed `PodAffinityTerm` (upstream `framework.AffinityTerm`)."""

    selector: Mapping[str, Any] | None
    namespaces: frozenset[str]
    namespace_selector: Mapping[str, Any] | None
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, str],
                namespace_labels: NamespaceLabels) -> bool:
        """`AffinityTerm.Matches`: the pod's namespace is the term's, then its selector."""
        if namespace not in self.namespaces:
            if self.namespace_selector is None:
                return False
            if not selector_matches(self.namespace_selector, namespace_labels(namespace) or {}):
                return False
        return selector_matches(self.selector, labels)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """`metav1.LabelSelectorAsSelector(...).Matches` (`labelselectors`): a null selector
    matches nothing, an empty one everything. The API server refuses a pod whose affinity
    selector does not parse, so one that does not (a pod written around admission) selects
    nothing rather than stopping the scheduler."""
    try:
        return labelselectors.label_selector_as_selector(selector).matches(labels)
    except labelselectors.SelectorError:
        return False


def _merged_selector(raw: Mapping[str, Any], labels: Mapping[str, str]) -> Obj | None:
    """The term's selector with `matchLabelKeys` / `mismatchLabelKeys` merged in (keys the
    owner does not carry are skipped, as the API server does)."""
    selector = raw.get("labelSelector")
    if selector is None:
        return None
    out: Obj = clone(dict(selector))
    extra = [{"key": k, "operator": op, "values": [labels[k]]}
             for field, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
             for k in raw.get(field) or [] if k in labels]
    if extra:
        out["matchExpressions"] = [*(out.get("matchExpressions") or []), *extra]
    return out


def required_terms(pod: Mapping[str, Any], kind: str) -> tuple[Term, ...]:
    """The pod's required `podAffinity` or `podAntiAffinity` terms (`kind`), processed."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    labels = meta.get("labels") or {}
    section = ((pod.get("spec") or {}).get("affinity") or {}).get(kind) or {}
    out = []
    for raw in section.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        names = frozenset(str(n) for n in raw.get("namespaces") or [])
        ns_selector = raw.get("namespaceSelector")
        if not names and ns_selector is None:
            names = frozenset({namespace})
        out.append(Term(_merged_selector(raw, labels), names, ns_selector,
                        str(raw.get("topologyKey") or "")))
    return tuple(out)


def has_required_terms(pod: Mapping[str, Any]) -> bool:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    return any(((affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution"))
               for kind in ("podAffinity", "podAntiAffinity"))


# ---- the scheduler cache ---------------------------------------------------------------------


@dataclass(frozen=True)
class Placed:
    """What the filter reads of one assigned pod."""

    uid: str
    namespace: str
    node: str
    labels: Mapping[str, str]
    anti: tuple[Term, ...]

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> Placed:
        meta = pod["metadata"]
        return cls(str(meta.get("uid", "")), str(meta.get("namespace") or ""), P.node_name(pod),
                   dict(meta.get("labels") or {}), required_terms(pod, "podAntiAffinity"))


def counts(pod: Mapping[str, Any]) -> bool:
    """Whether the scheduler cache holds this pod: bound, not terminal."""
    return bool(P.node_name(pod)) and not P.is_pod_terminal(pod)


class Placement:
    """Assigned pods by node, and the Filter over them; `nodes` is the caller's node lister."""

    def __init__(self, nodes: Mapping[str, Mapping[str, Any]],
                 namespace_labels: NamespaceLabels) -> None:
        self.nodes = nodes
        self.namespace_labels = namespace_labels
        self.by_node: dict[str, dict[str, Placed]] = {}
        self._where: dict[str, Placed] = {}
        self._topology: dict[str, dict[str, list[str]]] = {}
        self.anti_keys: Counter[str] = Counter()  # topology keys of assigned pods' anti terms

    def nodes_changed(self) -> None:
        """Forget the topology domains (a node was added, removed or relabelled)."""
        self._topology.clear()

    def put(self, pod: Mapping[str, Any]) -> bool:
        """Note a pod version; True when the change may let a pending pod schedule."""
        uid = str(pod["metadata"].get("uid", ""))
        old = self._where.get(uid)
        if not counts(pod):
            return self.drop(uid)
        new = Placed.of(pod)
        if old == new:
            return False
        if old is not None:
            self.drop(uid)
        self._where[uid] = new
        self.by_node.setdefault(new.node, {})[uid] = new
        self.anti_keys.update(t.topology_key for t in new.anti)
        return True

    def drop(self, uid: str) -> bool:
        old = self._where.pop(uid, None)
        if old is None:
            return False
        group = self.by_node.get(old.node) or {}
        group.pop(uid, None)
        if not group:
            self.by_node.pop(old.node, None)
        self.anti_keys.subtract(t.topology_key for t in old.anti)
        self.anti_keys = +self.anti_keys
        return True

    def _domain(self, key: str, node: Mapping[str, Any]) -> list[str]:
        """The nodes sharing `node`'s value of topology key `key` (none without the key)."""
        value = (node.get("metadata", {}).get("labels") or {}).get(key)
        if value is None:
            return []
        index = self._topology.get(key)
        if index is None:
            index = {}
            for name, other in self.nodes.items():
                v = (other.get("metadata", {}).get("labels") or {}).get(key)
                if v is not None:
                    index.setdefault(v, []).append(name)
            self._topology[key] = index
        return index.get(value, [])

    def _pods_in(self, key: str, node: Mapping[str, Any]) -> Iterable[Placed]:
        for name in self._domain(key, node):
            yield from (self.by_node.get(name) or {}).values()

    def check(self, pod: Mapping[str, Any], node_name: str) -> str | None:
        """`Filter` for `pod` on `node_name`: None when it fits, else the failure reason."""
        node = self.nodes.get(node_name)
        if node is None:
            return None  # the DaemonSet controller and the pod GC handle a missing node
        affinity = required_terms(pod, "podAffinity")
        anti = required_terms(pod, "podAntiAffinity")
        if not affinity and not anti and not self.anti_keys:
            return None
        if affinity and not self._affinity_ok(pod, affinity, node):
            return AFFINITY_RULES
        ns = str(pod["metadata"].get("namespace") or "")
        labels = pod["metadata"].get("labels") or {}
        for term in anti:
            if any(term.matches(p.namespace, p.labels, self.namespace_labels)
                   for p in self._pods_in(term.topology_key, node)):
                return ANTI_AFFINITY_RULES
        if self.anti_keys and self._existing_anti(ns, labels, node):
            return EXISTING_ANTI_AFFINITY_RULES
        return None

    def _matches_all(self, terms: tuple[Term, ...], p: Placed) -> bool:
        return all(t.matches(p.namespace, p.labels, self.namespace_labels) for t in terms)

    def _affinity_ok(self, pod: Mapping[str, Any], terms: tuple[Term, ...],
                     node: Mapping[str, Any]) -> bool:
        """`satisfyPodAffinity`."""
        labels = node.get("metadata", {}).get("labels") or {}
        if any(t.topology_key not in labels for t in terms):
            return False
        if all(any(self._matches_all(terms, p) for p in self._pods_in(t.topology_key, node))
               for t in terms):
            return True
        # The first pod of a group with affinity to itself: no pod anywhere matches.
        anywhere = any(self._matches_all(terms, p) and any(
            t.topology_key in (self.nodes.get(p.node, {}).get("metadata", {}).get("labels") or {})
            for t in terms) for group in self.by_node.values() for p in group.values())
        ns = str(pod["metadata"].get("namespace") or "")
        own = pod["metadata"].get("labels") or {}
        return not anywhere and all(t.matches(ns, own, self.namespace_labels) for t in terms)

    def _existing_anti(self, namespace: str, labels: Mapping[str, str],
                       node: Mapping[str, Any]) -> bool:
        """`satisfyExistingPodsAntiAffinity` failed: an assigned pod's anti-affinity term
        matches the incoming pod and `node` is in that term's domain of the pod's node."""
        for key in list(self.anti_keys):
            for p in self._pods_in(key, node):
                if any(t.topology_key == key and t.matches(namespace, labels,
                                                           self.namespace_labels)
                       for t in p.anti):
                    return True
        return False


# ---- what the scheduler writes ---------------------------------------------------------------


def _histogram(reasons: Mapping[str, int]) -> str:
    """`FitError.Error()`'s reason list: "<count> <reason>", sorted as strings."""
    return ", ".join(sorted(f"{n} {r}" for r, n in reasons.items() if n))


def fit_error(nodes: int, reason: str) -> str:
    """`FitError.Error()` for a DaemonSet pod pinned to one node that `reason` rejected (the
    other nodes left out by the NodeAffinity PreFilter), and the `DefaultPreemption`
    post-filter message after it (no lower-priority pod to evict)."""
    total = max(nodes, 1)
    others = total - 1
    filtered = _histogram({reason: 1, OTHER_NODES: others})
    victims = NOT_HELPFUL if reason == AFFINITY_RULES else NO_VICTIMS
    preempt = _histogram({NOT_HELPFUL: total} if victims == NOT_HELPFUL else
                         {NO_VICTIMS: 1, NOT_HELPFUL: others})
    return (f"0/{total} nodes are available: {filtered}. preemption: 0/{total} nodes are "
            f"available: {preempt}.")


def unschedulable(pod: Mapping[str, Any], message: str) -> Obj:
    """The pod as created when the filter rejects it: no `spec.nodeName`, Pending,
    `PodScheduled` False / Unschedulable (a fresh copy of the parts it changes)."""
    spec = dict(pod["spec"])
    spec.pop("nodeName", None)
    status = dict(pod.get("status") or {}, phase="Pending",
                  conditions=[scheduled_condition(False, message)])
    return dict(pod, metadata=dict(pod["metadata"]), spec=spec, status=status)


def scheduled_condition(ok: bool, message: str = "") -> Obj:
    cond: Obj = {"type": "PodScheduled", "status": "True" if ok else "False",
                 "lastProbeTime": None, "lastTransitionTime": P.now_rfc3339()}
    if not ok:
        cond.update(reason="Unschedulable", message=message)
    return cond


def with_scheduled(status: Mapping[str, Any], cond: Obj) -> Obj:
    """`status` with its PodScheduled condition replaced by `cond`."""
    rest = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    return dict(status, conditions=[cond, *rest])


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    cond = P.condition(pod, "PodScheduled")
    return cond is not None and cond.get("status") == "False" and (
        cond.get("reason") == "Unschedulable")


def target_node(pod: Mapping[str, Any]) -> str:
    """`util.GetTargetNodeName`: `spec.nodeName`, else the node the DaemonSet controller's
    `metadata.name` node-affinity term pins it to."""
    bound = P.node_name(pod)
    if bound:
        return bound
    required = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and len(field.get("values") or []) == 1:
                return str(field["values"][0])
    return ""
