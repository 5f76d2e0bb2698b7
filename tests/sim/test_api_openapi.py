"""Simulated API server: OpenAPI (`/openapi/v3` discovery and group-version documents,
`/openapi/v2` as JSON or 406), `fieldValidation` on writes, and kubectl's default validation,
`explain` and `apply` against them."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from dcgm_sim import openapi
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from migrator.model import kinds
from tests.sim.conftest import NS, Kubectl, Raw, daemonset, service

GVK = "x-kubernetes-group-version-kind"


def _get(url: str, accept: str = "") -> tuple[int, bytes, dict[str, str]]:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    if accept:
        headers["Accept"] = accept
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=10) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_v3_discovery_names_each_group_version_with_its_hash(server: ApiServer,
                                                             raw: Raw) -> None:
    code, doc, _ = raw("GET", "/openapi/v3")
    assert code == 200 and set(doc) == {"paths"}
    paths = doc["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/discovery.k8s.io/v1", "apis/coordination.k8s.io/v1",
            "apis/nvidia.com/v1"} <= set(paths)
    url = paths["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=")
    code, body, headers = _get(server.url + url)
    assert code == 200 and headers["Content-Type"] == "application/json"
    assert url.endswith(hashlib.sha512(body).hexdigest().upper())
    gv = json.loads(body)
    schemas = gv["components"]["schemas"]
    ds = schemas["io.k8s.api.apps.v1.DaemonSet"]
    assert ds[GVK] == [{"group": "apps", "kind": "DaemonSet", "version": "v1"}]
    assert ds["properties"]["spec"] == {
        "$ref": "#/components/schemas/io.k8s.api.apps.v1.DaemonSetSpec"}
    assert "io.k8s.api.core.v1.PodSpec" in schemas  # what the group's kinds reference
    patch = gv["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert patch[GVK] == {"group": "apps", "kind": "DaemonSet", "version": "v1"}
    assert {"name": "fieldValidation", "in": "query"}.items() <= patch["parameters"][-1].items()
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]


def test_v3_documents_of_every_served_kind(raw: Raw) -> None:
    core = raw("GET", "/openapi/v3/api/v1")[1]["components"]["schemas"]
    for name in ("Namespace", "Node", "Pod", "Service", "ConfigMap", "Event", "Endpoints"):
        assert core[f"io.k8s.api.core.v1.{name}"][GVK][0]["kind"] == name
    assert raw("GET", "/openapi/v3/apis/discovery.k8s.io/v1")[1]["components"]["schemas"][
        "io.k8s.api.discovery.v1.EndpointSlice"]["x-kubernetes-preserve-unknown-fields"]
    crd = raw("GET", "/openapi/v3/apis/nvidia.com/v1")[1]["components"]["schemas"]
    assert crd["com.nvidia.v1.ClusterPolicy"][GVK][0]["kind"] == "ClusterPolicy"
    assert raw("GET", "/openapi/v3/apis/policy/v1")[0] == 404


def test_disabled_group_is_left_out(raw: Raw) -> None:
    raw("PUT", "/sim/v1/faults", {"disabled_groups": ["nvidia.com"]})
    assert "apis/nvidia.com/v1" not in raw("GET", "/openapi/v3")[1]["paths"]
    assert raw("GET", "/openapi/v3/apis/nvidia.com/v1")[0] == 404


def test_v2_is_json_or_406_for_protobuf_only(server: ApiServer) -> None:
    code, body, _ = _get(server.url + "/openapi/v2", "application/json")
    doc = json.loads(body)
    assert code == 200 and doc["swagger"] == "2.0"
    assert doc["definitions"]["io.k8s.api.core.v1.Service"][GVK][0]["kind"] == "Service"
    code, _, _ = _get(server.url + "/openapi/v2",
                      "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
    assert code == 406


def test_unknown_fields_named_as_the_strict_decoder_does() -> None:
    body = daemonset("x")
    body["spec"]["foo"] = 1
    body["spec"]["template"]["spec"]["containers"][0]["bar"] = True
    body["spec"]["template"]["spec"]["containers"][0]["livenessProbe"] = {"anything": 1}
    body["status"] = {"whatever": 1}
    assert openapi.unknown_fields(kinds.DAEMONSET, body) == [  # in the body's order
        "spec.template.spec.containers[0].bar", "spec.foo"]
    assert openapi.unknown_fields(kinds.SERVICE, {"spec": {"$patch": "replace", "gone": None,
                                                           "ports": [{"nodePort": 1}]}},
                                  patch=True) == []
    assert openapi.unknown_fields(kinds.CLUSTER_POLICY, {"spec": {"any": 1}}) == []


def test_field_validation_strict_warn_and_absent(raw: Raw) -> None:
    body = service("s")
    body["spec"]["foo"] = 1
    path = f"/api/v1/namespaces/{NS}/services"
    code, status, _ = raw("POST", path + "?fieldValidation=Strict", body)
    assert code == 400 and status["reason"] == "BadRequest"
    assert status["message"] == ('Service in version "v1" cannot be handled as a Service: '
                                 'strict decoding error: unknown field "spec.foo"')
    code, _, headers = raw("POST", path + "?fieldValidation=Warn&dryRun=All", body)
    assert code == 201 and headers["Warning"] == '299 - "unknown field \\"spec.foo\\""'
    assert raw("POST", path + "?fieldValidation=Bogus", body)[0] == 400
    assert raw("POST", path, body)[0] == 201
    code, status, _ = raw("PATCH", path + "/s?fieldValidation=Strict", {"spec": {"bar": 1}},
                          content_type="application/merge-patch+json")
    assert code == 400 and 'unknown field "spec.bar"' in status["message"]


def _write(tmp_path: Path, name: str, *docs: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def test_kubectl_validates_apply_and_create(kubectl: Kubectl, tmp_path: Path) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS},
          "data": {"k": "v"}}
    ds = daemonset("d")
    ds["spec"]["updateStrategy"] = {"type": "RollingUpdate",
                                    "rollingUpdate": {"maxUnavailable": "25%"}}
    good = _write(tmp_path, "good.yaml", ds, service("s", type="ClusterIP"), cm)
    out = kubectl("create", "--dry-run=server", "-f", good)
    assert "daemonset.apps/d created (server dry run)" in out.stdout
    out = kubectl("apply", "-f", good)
    assert "configmap/c created" in out.stdout
    assert "unchanged" in kubectl("apply", "-f", good).stdout  # a strategic patch, validated

    ds["spec"]["template"]["spec"]["containers"][0]["foo"] = 1
    bad = _write(tmp_path, "bad.yaml", ds)
    out = kubectl("apply", "-f", bad, check=False)
    assert out.returncode != 0
    assert 'unknown field "spec.template.spec.containers[0].foo"' in out.stderr
    cm["spec"] = {"x": 1}
    out = kubectl("create", "-f", _write(tmp_path, "badcm.yaml", cm), check=False)
    assert out.returncode != 0 and 'strict decoding error: unknown field "spec"' in out.stderr
    assert kubectl("apply", "--validate=false", "--dry-run=server", "-f", bad).returncode == 0


def test_kubectl_explain(kubectl: Kubectl) -> None:
    out = kubectl("explain", "daemonset.spec.updateStrategy").stdout
    assert "KIND:       DaemonSet" in out
    assert "FIELD: updateStrategy <DaemonSetUpdateStrategy>" in out
    assert "rollingUpdate\t<RollingUpdateDaemonSet>" in out and "type\t<string>" in out
    out = kubectl("explain", "svc.spec.ports", "--recursive").stdout
    assert "targetPort\t<IntOrString>" in out or "targetPort\t<string>" in out
