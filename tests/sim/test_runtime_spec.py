"""What the sim's container runtime runs for a container (dcgm_sim/runtime/containerspec.py):
Kubernetes' command/args rules over the image's Entrypoint/Cmd, the environment's layering and
`$(VAR)` expansion, the downward API, the user, runAsNonRoot, emptyDirs; which image references
are the loaded image. Pure: no root needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.runtime.containerspec import (
    SpecError,
    container_spec,
    expand,
    parse_passwd,
    service_env,
)
from dcgm_sim.runtime.image import ImageError, OciImage, load
from dcgm_sim.runtime.launch import resolve_in_root
from dcgm_sim.serve import ServeError, ServeOptions

REPO = Path(__file__).resolve().parents[2]
IMAGE = {"User": "10001:10001", "Entrypoint": ["dcgm-migrate"], "Cmd": ["--help"],
         "Env": ["PATH=/opt/dcgm-migrate/bin:/usr/bin", "LC_ALL=C.UTF-8"], "WorkingDir": "/tmp"}
PASSWD = parse_passwd("root:x:0:0::/root:/bin/sh\ndcgm-migrate:x:10001:10001::/:/nologin\n")


def _pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "guard-abc", "namespace": "gpu-operator", "uid": "u-1",
                         "labels": {"app": "g"}},
            "spec": {"containers": [container], "serviceAccountName": "sa",
                     "nodeName": "gpu-node-0001", **spec},
            "status": {"podIP": "10.128.0.4", "podIPs": [{"ip": "10.128.0.4"}],
                       "hostIP": "172.18.0.2"}}


def _spec(container: dict[str, Any], **spec: Any) -> Any:
    pod = _pod(container, **spec)
    return container_spec(pod, container, IMAGE, service_env=service_env("10.96.0.1", 443),
                          passwd=PASSWD)


@pytest.mark.parametrize(("container", "argv"), [
    ({}, ("dcgm-migrate", "--help")),
    ({"args": ["guard"]}, ("dcgm-migrate", "guard")),  # args replace Cmd only
    ({"command": ["sh"]}, ("sh",)),  # command drops the image's Cmd too
    ({"command": ["dcgm-migrate"], "args": ["apply", "--phase", "1"]},
     ("dcgm-migrate", "apply", "--phase", "1")),
])
def test_command_and_args_override_the_image_as_kubernetes_does(
        container: dict[str, Any], argv: tuple[str, ...]) -> None:
    assert _spec({"name": "c", **container}).argv == argv


def test_environment_layers_downward_api_and_expansion() -> None:
    spec = _spec({"name": "c", "args": ["--who", "$(ME)", "$$(ME)", "$(NOPE)"], "env": [
        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {"name": "WHERE", "value": "$(ME)@$(KUBERNETES_SERVICE_HOST)"},
        {"name": "LC_ALL", "value": "C"}]})
    env = dict(spec.env)
    assert spec.argv == ("dcgm-migrate", "--who", "guard-abc", "$(ME)", "$(NOPE)")
    assert (env["ME"], env["IP"], env["NS"], env["APP"]) == (
        "guard-abc", "10.128.0.4", "gpu-operator", "g")
    assert env["WHERE"] == "guard-abc@10.96.0.1"
    assert env["LC_ALL"] == "C" and env["PATH"].startswith("/opt/dcgm-migrate/bin")
    assert env["HOSTNAME"] == "guard-abc" and env["KUBERNETES_SERVICE_PORT"] == "443"
    assert expand("a$$b$(X)", {"X": "1"}) == "a$b1"


def test_user_group_and_run_as_non_root() -> None:
    assert (_spec({"name": "c"}).uid, _spec({"name": "c"}).gid) == (10001, 10001)
    own = _spec({"name": "c", "securityContext": {"runAsUser": 2000, "runAsGroup": 3000}},
                securityContext={"runAsUser": 10001, "fsGroup": 4000})
    assert (own.uid, own.gid, own.groups) == (2000, 3000, (3000, 4000))
    with pytest.raises(SpecError, match="runAsNonRoot and image will run as root"):
        _spec({"name": "c", "securityContext": {"runAsUser": 0}},
              securityContext={"runAsNonRoot": True})


def test_guard_manifest_container() -> None:
    """docs/guard.yaml's container as the runtime runs it: read-only root, no privilege
    escalation, its emptyDir a 64 MiB tmpfs, the pod name as identity."""
    docs = [d for d in yaml.safe_load_all((REPO / "docs" / "guard.yaml").read_text()) if d]
    template = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    pod = {"metadata": {"name": "dcgm-migrate-guard-7c9-x2x", "namespace": "gpu-operator"},
           "spec": template["spec"], "status": {}}
    container = template["spec"]["containers"][0]
    spec = container_spec(pod, container, IMAGE, service_env=service_env("10.96.0.1", 443),
                          passwd=PASSWD)
    assert spec.argv[:2] == ("dcgm-migrate", "guard") and spec.uid == 10001
    assert spec.read_only_root and spec.no_new_privs and spec.service_account
    assert [(t.path, t.size_bytes) for t in spec.tmpfs] == [("/tmp", 64 * 2**20)]
    assert dict(spec.env)["HOSTNAME"] == "dcgm-migrate-guard-7c9-x2x"


def test_unsupported_volumes_and_env_sources_are_refused() -> None:
    with pytest.raises(SpecError, match="configMap volumes are not supported"):
        _spec({"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/v"}]},
              volumes=[{"name": "v", "configMap": {"name": "x"}}])
    with pytest.raises(SpecError, match="fieldRef only"):
        _spec({"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {}}}]})


@pytest.mark.parametrize(("reference", "ours"), [
    ("dcgm-migrate:0.1.0", True), ("registry.example.com:5000/team/dcgm-migrate:0.1.0", True),
    ("dcgm-migrate:0.1.0@sha256:abc", True), ("dcgm-migrate", False),
    ("dcgm-migrate:0.2.0", False), ("nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5", False),
    ("other/dcgm-migrate-x:0.1.0", False)])
def test_image_references(reference: str, ours: bool) -> None:
    image = OciImage(name="dcgm-migrate", tag="0.1.0", digest="sha256:0", config={},
                     rootfs=Path("/nonexistent"))
    assert image.matches(reference) is ours


def test_paths_resolve_inside_the_root(tmp_path: Path) -> None:
    """/var/run -> /run in the image must not lead to the host's /run."""
    (tmp_path / "var").mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")
    (tmp_path / "up").symlink_to("../../..")
    assert resolve_in_root(tmp_path, "/var/run/secrets/x") == "run/secrets/x"
    assert resolve_in_root(tmp_path, "/up/etc") == "etc"


def test_serve_refuses_what_the_runtime_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="no such folder or archive"):
        ServeOptions(images=tmp_path / "missing").validate()
    with pytest.raises(ServeError, match="needs the TLS listener"):
        ServeOptions(images=tmp_path, tls=False).validate()
    with pytest.raises(ImageError, match="expected one"):
        load(tmp_path, tmp_path / "cache")  # a folder without an archive
