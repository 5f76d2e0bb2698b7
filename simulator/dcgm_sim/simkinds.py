"""The kinds the simulated API server serves: the tool's table (`migrator.model.kinds`) plus
the ones only the sim needs, so the tool's table stays what the tool reads or writes.

- core/v1 `endpoints` (kind Endpoints, namespaced, short name `ep`, no status subresource;
  singular `endpoints`, as upstream's discovery lists it), kept by the endpoints controller.
- Workloads run by controllers (`WORKLOADS`, with a status subresource): `apps/v1`
  `deployments` (`deploy`, the deployment controller makes their ReplicaSets,
  `controllers/deployments.py`), `replicasets` (`rs`, the ReplicaSet controller makes their
  pods, `controllers/replicasets.py`) and `batch/v1` `jobs` (the Job controller runs their pods
  to completion, `controllers/jobs.py`).
- Stored only, no controller (what docs/guard.yaml, docs/job.yaml and docs/rbac.yaml apply):
  core/v1 `serviceaccounts` (`sa`), `rbac.authorization.k8s.io/v1` `roles`, `rolebindings`
  (namespaced), `clusterroles`, `clusterrolebindings` (cluster-scoped), `batch/v1` `cronjobs`
  (`cj`, status subresource). Scope and short names as upstream's discovery lists them
  (v1.32). A CronJob makes no Job; stored RBAC objects are not what the sim's authorizer reads
  (`access`: `sim serve --rbac`).
- `monitoring.coreos.com/v1` `podmonitors` (kind PodMonitor) is in the tool's table; it is
  re-exported here, so the sim names every kind it adds or serves beyond the core ones from
  one place.
- `monitoring.coreos.com/v1` `prometheusrules` (kind PrometheusRule, short name `promrule`, as
  the Prometheus Operator's CRD): stored only, what docs/prometheusrule.yaml applies; no rule is
  evaluated.
- `events.k8s.io/v1` `events` (kind Event, `ev`): the core/v1 Events under another API version,
  converted at the edge (`eventsapi`); it stores nothing of its own. `BY_KIND["Event"]` stays
  the core kind, the one the store files Events under.

Every part of the sim that serves or tracks "all kinds" (store, routing, discovery, garbage
collector) reads `ALL` / `BY_KEY` / `BY_KIND` here. A kind the tool's table gains later is
taken from there, never listed twice. Pure.
"""

from __future__ import annotations

from migrator.model import kinds
from migrator.model.kinds import Kind

ENDPOINTS: Kind = kinds.BY_KEY.get(
    "endpoints", Kind("", "v1", "endpoints", "Endpoints", True, ("ep",)))
POD_MONITOR: Kind = kinds.POD_MONITOR
SERVICE_ACCOUNT = Kind("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",))
_RBAC = "rbac.authorization.k8s.io"
ROLE = Kind(_RBAC, "v1", "roles", "Role", True)
ROLE_BINDING = Kind(_RBAC, "v1", "rolebindings", "RoleBinding", True)
CLUSTER_ROLE = Kind(_RBAC, "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDING = Kind(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
DEPLOYMENT = Kind("apps", "v1", "deployments", "Deployment", True, ("deploy",), True)
REPLICA_SET = Kind("apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), True)
JOB = Kind("batch", "v1", "jobs", "Job", True, (), True)
CRON_JOB = Kind("batch", "v1", "cronjobs", "CronJob", True, ("cj",), True)
PROMETHEUS_RULE = Kind("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule", True,
                       ("promrule",))
WORKLOADS: tuple[Kind, ...] = (DEPLOYMENT, REPLICA_SET, JOB)
STORED_ONLY: tuple[Kind, ...] = (
    SERVICE_ACCOUNT, ROLE, ROLE_BINDING, CLUSTER_ROLE, CLUSTER_ROLE_BINDING, CRON_JOB,
    PROMETHEUS_RULE,
)
EVENTS_V1: Kind = kinds.BY_KEY.get(
    "events.events.k8s.io", Kind("events.k8s.io", "v1", "events", "Event", True, ("ev",)))

SIM_ONLY: tuple[Kind, ...] = tuple(
    k for k in (ENDPOINTS, *WORKLOADS, *STORED_ONLY, EVENTS_V1) if k.key not in kinds.BY_KEY)
ALL: tuple[Kind, ...] = kinds.ALL + SIM_ONLY
BY_KEY: dict[str, Kind] = {k.key: k for k in ALL}
BY_KIND: dict[str, Kind] = {k.kind: k for k in ALL if k.key != EVENTS_V1.key}
