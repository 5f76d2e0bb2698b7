"""`meta.k8s.io/v1` Table answers, as a real kube-apiserver gives them.

A client asks for a Table with `Accept: application/json;as=Table;v=v1;g=meta.k8s.io` (kubectl
for its human-readable output; the tool to follow a rollout in few bytes). Upstream sources:

- Columns and cells: `pkg/printers/internalversion/printers.go` (`AddHandlers`, `printPod`,
  `printDaemonSet`, `printNode`, `printDeployment`, `printReplicaSet`, `printJob`, `printCronJob`,
  `printServiceAccount`, `printRole`, `printRoleBinding`, ...). The server always renders the
  wide (priority 1) columns: `pkg/printers/storage` `TableConvertor.ConvertToTable` generates with
  `GenerateOptions{Wide: true}`; kubectl hides priority > 0 itself. Kinds without a printer
  here get NAME and AGE. Ages are `duration.HumanDuration` of the wall clock.
- `includeObject` (`TableOptions`): `k8s.io/apiserver/pkg/endpoints/handlers/response.go`
  `asTable`: `Object` embeds the whole object, `Metadata` or empty (the default) a
  `PartialObjectMetadata`, `None` nothing. The row's `object` is a `runtime.RawExtension`,
  a struct, so its `omitempty` does not apply under encoding/json and `RawExtension.MarshalJSON`
  writes `null`: `None` gives `"object":null`. Any other value is refused before anything is
  read, by `optionsForTransform` / `ValidateTableOptions`
  (`apimachinery/pkg/apis/meta/v1/validation`): 400 BadRequest "Unable to convert to Table as
  requested: includeObject: Invalid value: ...". (`asTable`'s own "unrecognized includeObject
  value" is unreachable behind that check.)
- Watches (`handlers/response.go` `watchEmbeddedEncoder.doEncode`): each event's object is a
  one-row Table; after the first event the encoder sets `NoHeaders`, so every later event has
  no column definitions. `Table.ColumnDefinitions` has no `omitempty`: they are sent as `null`.
  `HumanReadableGenerator.GenerateTable` (`pkg/printers/tablegenerator.go`) gives a single
  object's Table that object's resourceVersion.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from dcgm_sim import kinds, labelselectors, podprinter
from dcgm_sim.kinds import ENDPOINTS, Kind
from dcgm_sim.statuses import bad_request

Obj = dict[str, Any]
Row = tuple[list[Any], list[dict[str, str]] | None]  # cells, row conditions
Printer = tuple[list[Obj], Callable[[Obj, datetime], Row]]  # column definitions, row

INCLUDE_OBJECT, INCLUDE_METADATA, INCLUDE_NONE = "Object", "Metadata", "None"

# Field docs the printers use as column descriptions (`SwaggerDoc()` of ObjectMeta, PodSpec,
# PodStatus, DaemonSetSpec/Status of extensions/v1beta1), as upstream spells them.
_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in "
    "UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata")
_DS_DOC = "More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/"
_CONTAINERS_DOC = "Names of each container in the template."
_SUBSETS_DOC = (
    "The set of all endpoints is the union of all subsets. Addresses are placed into subsets "
    "according to the IPs they share. A single address with multiple ports, some of which are "
    "ready and some of which are not (because they come from different containers) will "
    "result in the address being displayed in different subsets for the different ports. No "
    "address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of "
    "addresses and ports that comprise a service.")
_IMAGES_DOC = "Images referenced by each container in the template."


def wants_table(accept: str) -> bool:
    return "as=Table" in accept and "g=meta.k8s.io" in accept


def include_object(query: Mapping[str, str]) -> str:
    """The request's `includeObject`, refused as the real server refuses a bad one."""
    value = query.get("includeObject", "")
    if value not in ("", INCLUDE_METADATA, INCLUDE_NONE, INCLUDE_OBJECT):
        raise bad_request(
            "Unable to convert to Table as requested: includeObject: Invalid value: "
            f"{json.dumps(value)}: must be 'Metadata', 'Object', 'None', or empty")
    return value


def human_duration(seconds: float) -> str:
    """`k8s.io/apimachinery/pkg/util/duration.HumanDuration`."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes, hours = s // 60, s // 3600
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // 24 // 365, (hours // 24) % 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


def human_age(created: str | None, now: datetime | None = None) -> str:
    """`translateTimestampSince`: the age of `created` (RFC 3339), "<unknown>" when unset."""
    when = podprinter.parse_time(created)
    if when is None:
        return "<unknown>"
    return human_duration(((now or datetime.now(UTC)) - when).total_seconds())


def _col(name: str, type_: str, description: str = "", priority: int = 0) -> Obj:
    return {"name": name, "type": type_, "format": "name" if name == "Name" else "",
            "description": description, "priority": priority}


_NAME_COL, _AGE_COL = _col("Name", "string", _NAME_DOC), _col("Age", "string", _AGE_DOC)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def _name_age(obj: Obj, now: datetime) -> tuple[str, str]:
    meta = _meta(obj)
    return str(meta.get("name", "")), human_age(meta.get("creationTimestamp"), now)


def format_labels(labels: Mapping[str, str] | None) -> str:
    """`labels.FormatLabels`: sorted `k=v,...`, "<none>" when empty."""
    return ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "<none>"


def format_label_selector(selector: Mapping[str, Any] | None) -> str:
    """`metav1.FormatLabelSelector`: `LabelSelectorAsSelector(...).String()`, "<none>" when
    that is empty, "<error>" when it does not convert."""
    try:
        return str(labelselectors.label_selector_as_selector(selector)) or "<none>"
    except labelselectors.SelectorError:
        return "<error>"


def _containers(template_spec: Obj) -> list[str]:
    """`layoutContainerCells`: container names and images, comma-joined."""
    containers = template_spec.get("containers") or []
    return [",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers)]


# ---- printers --------------------------------------------------------------------------------

def _pod_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    ready, status, restarts = podprinter.pod_cells(obj, now, human_duration)
    return ([name, ready, status, restarts, age, *podprinter.pod_wide_cells(obj)],
            podprinter.pod_conditions(obj))


def _daemonset_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    st = _status(obj)
    template = (_spec(obj).get("template") or {}).get("spec") or {}
    counts = [int(st.get(f) or 0) for f in ("desiredNumberScheduled", "currentNumberScheduled",
                                            "numberReady", "updatedNumberScheduled",
                                            "numberAvailable")]
    return ([name, *counts, format_labels(template.get("nodeSelector")), age,
             *_containers(template), format_label_selector(_spec(obj).get("selector"))], None)


def _ports(obj: Obj) -> str:
    ports = _spec(obj).get("ports") or []
    out = [f"{p.get('port')}:{p['nodePort']}/{p.get('protocol', 'TCP')}" if p.get("nodePort")
           else f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports]
    return ",".join(out) or "<none>"


def _service_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    spec = _spec(obj)
    return ([name, spec.get("type", ""), spec.get("clusterIP", ""), "<none>", _ports(obj), age,
             format_labels(spec.get("selector"))], None)


def _node_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    st = _status(obj)
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    status = ["Unknown" if ready is None else
              "Ready" if ready.get("status") == "True" else "NotReady"]
    if _spec(obj).get("unschedulable"):
        status.append("SchedulingDisabled")
    labels = _meta(obj).get("labels") or {}
    roles = {k[len("node-role.kubernetes.io/"):] for k in labels
             if k.startswith("node-role.kubernetes.io/")} - {""}
    roles |= {labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()
    info = st.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a.get("address", "") for a in st.get("addresses") or []
                     if a.get("type") == kind), "<none>")

    return ([name, ",".join(status), ",".join(sorted(roles)) or "<none>", age,
             info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
             info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
             info.get("containerRuntimeVersion") or "<unknown>"], None)


def _namespace_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    return [name, _status(obj).get("phase", ""), age], None


def _slice_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addresses[:3])
    endpoints = (shown + (f" + {len(addresses) - 3} more..." if len(addresses) > 3 else "")) \
        or "<unset>"
    ports = ",".join(str(p.get("port")) for p in obj.get("ports") or []) or "<unset>"
    return [name, obj.get("addressType", ""), ports, endpoints, age], None


def _endpoints_row(obj: Obj, now: datetime) -> Row:
    """`printEndpoints` / `formatEndpoints`: the first three ready ip:port pairs (an IP alone
    for a subset without ports), then "+ N more...", "<none>" without subsets."""
    name, age = _name_age(obj, now)
    shown: list[str] = []
    count = 0
    for ss in obj.get("subsets") or []:
        ips = [str(a.get("ip", "")) for a in ss.get("addresses") or []]
        for port in ss.get("ports") or [None]:
            count += len(ips)
            for ip in ips[:3 - len(shown)]:
                host = f"[{ip}]" if ":" in ip else ip
                shown.append(ip if port is None else f"{host}:{port.get('port')}")
    cell = ",".join(shown) + (f" + {count - 3} more..." if count > 3 else "")
    return [name, cell if obj.get("subsets") else "<none>", age], None


def _template_cells(obj: Obj, template: Obj, selector: Any) -> list[str]:
    """The wide Containers, Images, Selector cells of a workload."""
    return [*_containers(template.get("spec") or {}), format_label_selector(selector)]


def _deployment_row(obj: Obj, now: datetime) -> Row:
    """`printDeployment`: READY is ready/desired replicas."""
    name, age = _name_age(obj, now)
    spec, st = _spec(obj), _status(obj)
    ready = f"{int(st.get('readyReplicas') or 0)}/{int(spec.get('replicas') or 0)}"
    return ([name, ready, int(st.get("updatedReplicas") or 0),
             int(st.get("availableReplicas") or 0), age,
             *_template_cells(obj, spec.get("template") or {}, spec.get("selector"))], None)


def _replicaset_row(obj: Obj, now: datetime) -> Row:
    """`printReplicaSet`: DESIRED spec.replicas, CURRENT status.replicas, READY readyReplicas."""
    name, age = _name_age(obj, now)
    spec, st = _spec(obj), _status(obj)
    return ([name, int(spec.get("replicas") or 0), int(st.get("replicas") or 0),
             int(st.get("readyReplicas") or 0), age,
             *_template_cells(obj, spec.get("template") or {}, spec.get("selector"))], None)


def _has_condition(st: Obj, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True"
               for c in st.get("conditions") or [] if isinstance(c, dict))


def _job_row(obj: Obj, now: datetime) -> Row:
    """`printJob`: STATUS from the conditions (Running when none holds), COMPLETIONS
    succeeded/completions, DURATION from startTime to completionTime (or now)."""
    name, age = _name_age(obj, now)
    spec, st = _spec(obj), _status(obj)
    succeeded = int(st.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{int(spec['completions'])}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {int(spec['parallelism'])}"
    else:
        completions = f"{succeeded}/1"
    start = podprinter.parse_time(st.get("startTime"))
    end = podprinter.parse_time(st.get("completionTime")) or now
    duration = "" if start is None else human_duration((end - start).total_seconds())
    status = "Running"
    for cond, text in (("Complete", "Complete"), ("Failed", "Failed")):
        if _has_condition(st, cond):
            status = text
            break
    else:
        if _meta(obj).get("deletionTimestamp"):
            status = "Terminating"
        elif _has_condition(st, "Suspended"):
            status = "Suspended"
        elif _has_condition(st, "FailureTarget"):
            status = "FailureTarget"
        elif _has_condition(st, "SuccessCriteriaMet"):
            status = "SuccessCriteriaMet"
    return ([name, status, completions, duration, age,
             *_template_cells(obj, spec.get("template") or {}, spec.get("selector"))], None)


def _bool_ptr(value: Any) -> str:
    return "<unset>" if value is None else ("True" if value else "False")


def _cronjob_row(obj: Obj, now: datetime) -> Row:
    """`printCronJob`."""
    name, age = _name_age(obj, now)
    spec, st = _spec(obj), _status(obj)
    last = st.get("lastScheduleTime")
    job = (spec.get("jobTemplate") or {}).get("spec") or {}
    return ([name, str(spec.get("schedule", "")), spec.get("timeZone") or "<none>",
             _bool_ptr(spec.get("suspend")), len(st.get("active") or []),
             human_age(last, now) if last else "<none>", age,
             *_template_cells(obj, job.get("template") or {}, job.get("selector"))], None)


def _serviceaccount_row(obj: Obj, now: datetime) -> Row:
    name, age = _name_age(obj, now)
    return [name, len(obj.get("secrets") or []), age], None


def _created_at_row(obj: Obj, now: datetime) -> Row:
    """Role and ClusterRole: NAME, CREATED AT (RFC 3339, UTC)."""
    meta = _meta(obj)
    created = podprinter.parse_time(meta.get("creationTimestamp"))
    text = created.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if created else ""
    return [str(meta.get("name", "")), text], None


def _binding_row(obj: Obj, now: datetime) -> Row:
    """`printRoleBinding`/`printClusterRoleBinding`: ROLE is Kind/name; wide: users, groups,
    service accounts (namespace/name)."""
    name, age = _name_age(obj, now)
    ref = obj.get("roleRef") or {}
    subjects = [s for s in obj.get("subjects") or [] if isinstance(s, dict)]

    def named(kind: str) -> str:
        return ", ".join(str(s.get("name", "")) for s in subjects if s.get("kind") == kind)
    accounts = ", ".join(f"{s.get('namespace', '')}/{s.get('name', '')}" for s in subjects
                         if s.get("kind") == "ServiceAccount")
    return [name, f"{ref.get('kind', '')}/{ref.get('name', '')}", age, named("User"),
            named("Group"), accounts], None


def _default_row(obj: Obj, now: datetime) -> Row:
    return list(_name_age(obj, now)), None


_WORKLOAD_WIDE = [_col("Containers", "string", _CONTAINERS_DOC, 1),
                  _col("Images", "string", _IMAGES_DOC, 1)]
_ROLE_COLS = [_NAME_COL, _col("Created At", "date", _AGE_DOC)]


def _binding_cols(role_doc: str) -> list[Obj]:
    return [_NAME_COL, _col("Role", "string", role_doc), _AGE_COL,
            _col("Users", "string", "Users in the roleBinding", 1),
            _col("Groups", "string", "Groups in the roleBinding", 1),
            _col("ServiceAccounts", "string", "ServiceAccounts in the roleBinding", 1)]


_ROLE_REF_DOC = ("RoleRef can reference a Role in the current namespace or a ClusterRole in the "
                 "global namespace. If the RoleRef cannot be resolved, the Authorizer must "
                 "return an error. This field is immutable.")
_CLUSTER_ROLE_REF_DOC = ("RoleRef can only reference a ClusterRole in the global namespace. If "
                         "the RoleRef cannot be resolved, the Authorizer must return an error. "
                         "This field is immutable.")
_JOB_SELECTOR_DOC = ("A label query over pods that should match the pod count. Normally, the "
                     "system sets this field for you. More info: https://kubernetes.io/docs/"
                     "concepts/overview/working-with-objects/labels/#label-selectors")

PRINTERS: dict[str, Printer] = {
    kinds.DEPLOYMENT.key: ([
        _NAME_COL, _col("Ready", "string", "Number of the pod with ready state"),
        _col("Up-to-date", "integer", "Total number of non-terminated pods targeted by this "
             "deployment that have the desired template spec."),
        _col("Available", "integer", "Total number of available pods (ready for at least "
             "minReadySeconds) targeted by this deployment."),
        _AGE_COL, *_WORKLOAD_WIDE,
        _col("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods "
             "are selected by this will be the ones affected by this deployment.", 1),
    ], _deployment_row),
    kinds.REPLICA_SET.key: ([
        _NAME_COL,
        _col("Desired", "integer", "Replicas is the number of desired pods. This is a pointer "
             "to distinguish between explicit zero and unspecified. Defaults to 1. More info: "
             "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset/"
             "#how-a-replicaset-works"),
        _col("Current", "integer", "Replicas is the most recently observed number of non-"
             "terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/"
             "controllers/replicaset/#how-a-replicaset-works"),
        _col("Ready", "integer", "The number of non-terminating pods targeted by this "
             "ReplicaSet with a Ready Condition."),
        _AGE_COL, *_WORKLOAD_WIDE,
        _col("Selector", "string", "Label selector for pods. Existing ReplicaSets whose pods "
             "are selected by this will be the ones affected by this deployment.", 1),
    ], _replicaset_row),
    kinds.JOB.key: ([
        _NAME_COL, _col("Status", "string", "Status of the job."),
        _col("Completions", "string", "The number of pods which reached phase Succeeded."),
        _col("Duration", "string", "Time required to complete the job."), _AGE_COL,
        *_WORKLOAD_WIDE, _col("Selector", "string", _JOB_SELECTOR_DOC, 1),
    ], _job_row),
    kinds.CRON_JOB.key: ([
        _NAME_COL,
        _col("Schedule", "string", "The schedule in Cron format, see "
             "https://en.wikipedia.org/wiki/Cron."),
        _col("Timezone", "string", "The time zone name for the given schedule, see "
             "https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
        _col("Suspend", "boolean", "This flag tells the controller to suspend subsequent "
             "executions, it does not apply to already started executions.  Defaults to "
             "false."),
        _col("Active", "integer", "A list of pointers to currently running jobs."),
        _col("Last Schedule", "string", "Information when was the last time the job was "
             "successfully scheduled."),
        _AGE_COL, *_WORKLOAD_WIDE, _col("Selector", "string", _JOB_SELECTOR_DOC, 1),
    ], _cronjob_row),
    kinds.SERVICE_ACCOUNT.key: ([
        _NAME_COL,
        _col("Secrets", "string", "Secrets is a list of the secrets in the same namespace "
             "that pods running using this ServiceAccount are allowed to use."), _AGE_COL,
    ], _serviceaccount_row),
    kinds.ROLE.key: (_ROLE_COLS, _created_at_row),
    kinds.CLUSTER_ROLE.key: (_ROLE_COLS, _created_at_row),
    kinds.ROLE_BINDING.key: (_binding_cols(_ROLE_REF_DOC), _binding_row),
    kinds.CLUSTER_ROLE_BINDING.key: (_binding_cols(_CLUSTER_ROLE_REF_DOC), _binding_row),
    kinds.POD.key: ([
        _NAME_COL,
        _col("Ready", "string", "The aggregate readiness state of this pod for accepting "
             "traffic."),
        _col("Status", "string", "The aggregate status of the containers in this pod."),
        _col("Restarts", "string", "The number of times the containers in this pod have been "
             "restarted and when the last container in this pod has restarted."),
        _AGE_COL,
        _col("IP", "string", "podIP address allocated to the pod. Routable at least within the "
             "cluster. Empty if not yet allocated.", 1),
        _col("Node", "string", "NodeName indicates in which node this pod is scheduled. If "
             "empty, this pod is a candidate for scheduling by the scheduler defined in "
             "schedulerName. Once this field is set, the kubelet for this node becomes "
             "responsible for the lifecycle of this pod. This field should not be used to "
             "express a desire for the pod to be scheduled on a specific node. "
             "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
             1),
        _col("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts "
             "other pods on the node, but it cannot be scheduled right away as preemption "
             "victims receive their graceful termination periods. This field does not "
             "guarantee that the pod will be scheduled on this node. Scheduler may decide to "
             "place the pod elsewhere if other nodes become available sooner. Scheduler may "
             "also decide to give the resources on this node to a higher priority pod that is "
             "created after preemption. As a result, this field may be different than "
             "PodSpec.nodeName when the pod is scheduled.", 1),
        _col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated "
             "for pod readiness. A pod is ready when all its containers are ready AND all "
             "conditions specified in the readiness gates have status equal to \"True\" More "
             "info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
             1),
    ], _pod_row),
    kinds.DAEMONSET.key: ([
        _NAME_COL,
        _col("Desired", "integer", "The total number of nodes that should be running the "
             "daemon pod (including nodes correctly running the daemon pod). " + _DS_DOC),
        _col("Current", "integer", "The number of nodes that are running at least 1 daemon "
             "pod and are supposed to run the daemon pod. " + _DS_DOC),
        _col("Ready", "integer", "The number of nodes that should be running the daemon pod "
             "and have one or more of the daemon pod running and ready."),
        _col("Up-to-date", "integer", "The total number of nodes that are running updated "
             "daemon pod"),
        _col("Available", "integer", "The number of nodes that should be running the daemon "
             "pod and have one or more of the daemon pod running and available (ready for at "
             "least spec.minReadySeconds)"),
        _col("Node Selector", "string", "NodeSelector is a selector which must be true for the "
             "pod to fit on a node. Selector which must match a node's labels for the pod to be "
             "scheduled on that node. More info: "
             "https://kubernetes.io/docs/concepts/configuration/assign-pod-node/"),
        _AGE_COL,
        _col("Containers", "string", _CONTAINERS_DOC, 1),
        _col("Images", "string", _IMAGES_DOC, 1),
        _col("Selector", "string", "A label query over pods that are managed by the daemon "
             "set. Must match in order to be controlled. If empty, defaulted to labels on Pod "
             "template. More info: https://kubernetes.io/docs/concepts/overview/"
             "working-with-objects/labels/#label-selectors", 1),
    ], _daemonset_row),
    kinds.SERVICE.key: ([
        _NAME_COL, _col("Type", "string"), _col("Cluster-IP", "string"),
        _col("External-IP", "string"), _col("Port(s)", "string"), _AGE_COL,
        _col("Selector", "string", priority=1),
    ], _service_row),
    kinds.NODE.key: ([
        _NAME_COL, _col("Status", "string", "The status of the node"),
        _col("Roles", "string", "The roles of the node"), _AGE_COL,
        _col("Version", "string", "Kubelet Version reported by the node."),
        _col("Internal-IP", "string", priority=1), _col("External-IP", "string", priority=1),
        _col("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. "
             "Debian GNU/Linux 7 (wheezy)).", 1),
        _col("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' "
             "(e.g. 3.16.0-0.bpo.4-amd64).", 1),
        _col("Container-Runtime", "string", "ContainerRuntime Version reported by the node "
             "through runtime remote API (e.g. containerd://1.4.2).", 1),
    ], _node_row),
    kinds.NAMESPACE.key: ([_NAME_COL, _col("Status", "string", "The status of the namespace"),
                           _AGE_COL], _namespace_row),
    kinds.ENDPOINTSLICE.key: ([_NAME_COL, _col("AddressType", "string"),
                               _col("Ports", "string"), _col("Endpoints", "string"), _AGE_COL],
                              _slice_row),
    ENDPOINTS.key: ([_NAME_COL, _col("Endpoints", "string", _SUBSETS_DOC), _AGE_COL],
                    _endpoints_row),
}
_DEFAULT: Printer = ([_NAME_COL, _AGE_COL], _default_row)


def _row_object(kind: Kind, obj: Obj, include: str) -> Obj | None:
    if include == INCLUDE_NONE:
        return None
    if include == INCLUDE_OBJECT:
        return {"kind": kind.kind, "apiVersion": kind.api_version} | obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": _meta(obj)}


def table(kind: Kind, objects: list[Obj], list_meta: Obj, *, include: str = "",
          headers: bool = True, now: datetime | None = None) -> Obj:
    """The Table of `objects`; `include` is a validated `includeObject`, `headers=False` the
    NoHeaders of a watch's later events."""
    columns, row = PRINTERS.get(kind.key, _DEFAULT)
    now = now or datetime.now(UTC)
    rows = []
    for obj in objects:
        cells, conditions = row(obj, now)
        entry: Obj = {"cells": cells}
        if conditions:
            entry["conditions"] = conditions
        entry["object"] = _row_object(kind, obj, include)
        rows.append(entry)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": columns if headers else None, "rows": rows}

