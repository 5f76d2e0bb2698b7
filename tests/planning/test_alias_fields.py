"""Which Service configuration an alias takes from its source (docs/design.md, "The alias and
its source"): every core/v1 ServiceSpec field, table-driven — copied, never copied
(API-assigned or held by one Service only), or replaced — plus per-port fields and the source's
annotations."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from migrator import phases
from migrator.model import aliasing
from migrator.model.discovery import discover
from migrator.model.planning import PlanContext
from migrator.model.stacks import load_catalog
from migrator.model.steps import CreateAlias
from tests.helpers import builders as b

CAT = load_catalog()
SOURCE = "nvidia-dcgm-exporter-dra"
ALIAS = "nvidia-dcgm-exporter"

# Every field of core/v1 ServiceSpec (k8s.io/api/core/v1 types.go, v1.33), with a value a
# LoadBalancer source could carry and what the alias must do with it.
SPEC_FIELDS: dict[str, tuple[Any, str]] = {
    "allocateLoadBalancerNodePorts": (False, "copied"),
    "clusterIP": ("10.96.0.42", "never"),
    "clusterIPs": (["10.96.0.42"], "never"),
    "externalIPs": (["203.0.113.7"], "never"),
    "externalName": ("metrics.example.com", "never"),
    "externalTrafficPolicy": ("Local", "copied"),
    "healthCheckNodePort": (31999, "never"),
    "internalTrafficPolicy": ("Cluster", "copied"),
    "ipFamilies": (["IPv4"], "copied"),
    "ipFamilyPolicy": ("SingleStack", "copied"),
    "loadBalancerClass": ("service.k8s.aws/nlb", "copied"),
    "loadBalancerIP": ("198.51.100.10", "never"),
    "loadBalancerSourceRanges": (["10.0.0.0/8"], "copied"),
    "ports": (None, "per-port"),
    "publishNotReadyAddresses": (True, "copied"),
    "selector": ({"app": SOURCE}, "replaced"),
    "sessionAffinity": ("ClientIP", "copied"),
    "sessionAffinityConfig": ({"clientIP": {"timeoutSeconds": 600}}, "copied"),
    "trafficDistribution": ("PreferClose", "copied"),
    "type": ("LoadBalancer", "copied"),
}
PORT_FIELDS = {"name": "copied", "port": "copied", "targetPort": "copied",
               "protocol": "copied", "appProtocol": "copied", "nodePort": "never"}


def _alias_of(source: dict[str, Any]) -> dict[str, Any]:
    snap = b.gpucluster_snapshot()
    snap = replace(snap, services={**snap.services, SOURCE: source})
    ctx = PlanContext(snap, CAT, discover(snap, CAT).components)
    plan = phases.alias.plan(ctx)
    step = next(s for s in plan.steps if isinstance(s, CreateAlias) and s.service == ALIAS)
    return step.body


def _lb_source() -> dict[str, Any]:
    src = b.service(SOURCE, {"app": SOURCE}, annotations={
        "prometheus.io/scrape": "true", "prometheus.io/port": "9400",
        "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
        "meta.helm.sh/release-name": "gpu-operator",
        "dcgm-migrate/alias-of": "something-else"})
    src["spec"] = {k: copy.deepcopy(v) for k, (v, _) in SPEC_FIELDS.items() if v is not None}
    src["spec"]["ports"] = [{"name": "gpu-metrics", "port": 9400, "targetPort": 9400,
                             "protocol": "TCP", "appProtocol": "http", "nodePort": 31400}]
    return src


def test_the_table_names_every_field_the_alias_module_classifies() -> None:
    classified = {*aliasing.COPIED_SPEC_FIELDS, *aliasing.NEVER_COPIED_SPEC_FIELDS,
                  "ports", "selector"}
    assert classified == set(SPEC_FIELDS)
    assert {*aliasing.COPIED_PORT_FIELDS, "nodePort"} == set(PORT_FIELDS)


@pytest.mark.parametrize("field", sorted(SPEC_FIELDS))
def test_each_service_spec_field(field: str) -> None:
    value, rule = SPEC_FIELDS[field]
    spec = _alias_of(_lb_source())["spec"]
    if rule == "copied":
        assert spec[field] == value
    elif rule == "never":
        assert field not in spec
    elif rule == "replaced":
        assert spec[field] == {"app": SOURCE} and spec[field] is not value
    else:
        assert len(spec["ports"]) == 1


@pytest.mark.parametrize("field", sorted(PORT_FIELDS))
def test_each_port_field(field: str) -> None:
    source = _lb_source()
    port = _alias_of(source)["spec"]["ports"][0]
    if PORT_FIELDS[field] == "copied":
        assert port[field] == source["spec"]["ports"][0][field]
    else:
        assert field not in port


def test_dcgm_alias_keeps_local_traffic_whatever_the_source_says() -> None:
    snap = b.gpucluster_snapshot()
    src = copy.deepcopy(snap.services["nvidia-dcgm-dra"])
    src["spec"]["internalTrafficPolicy"] = "Cluster"
    snap = replace(snap, services={**snap.services, "nvidia-dcgm-dra": src})
    plan = phases.alias.plan(PlanContext(snap, CAT, discover(snap, CAT).components))
    body = next(s.body for s in plan.steps if isinstance(s, CreateAlias)
                and s.service == "nvidia-dcgm")
    assert body["spec"]["internalTrafficPolicy"] == "Local"


def test_annotations_copied_except_scrape_and_other_tools_bookkeeping() -> None:
    ann = _alias_of(_lb_source())["metadata"]["annotations"]
    assert ann == {"prometheus.io/port": "9400",
                   "service.beta.kubernetes.io/aws-load-balancer-internal": "true",
                   "dcgm-migrate/alias-of": SOURCE}


def test_alias_holds_reports_a_dropped_source_range_and_annotation() -> None:
    source = _lb_source()
    body = _alias_of(source)
    live = copy.deepcopy(body)
    del live["spec"]["loadBalancerSourceRanges"]
    del live["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-internal"]
    snap = b.gpucluster_snapshot()
    snap = replace(snap, services={**snap.services, SOURCE: source, ALIAS: live})
    ctx = PlanContext(snap, CAT, discover(snap, CAT).components)
    gates = phases.alias.verify(ctx, [CreateAlias(ALIAS, SOURCE, body)])
    [gate] = [g for g in gates if g.name == f"alias-holds/{ALIAS}"]  # stable-name/… beside it
    assert not gate.ok
    assert "loadBalancerSourceRanges" in gate.detail
    assert "aws-load-balancer-internal" in gate.detail
