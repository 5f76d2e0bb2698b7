"""A kubeconfig with static credentials is read without the kubernetes client
(migrator/kube/endpoint.py): server, CA, token or client certificate, relative paths from the
kubeconfig's folder, embedded data in files only this user can read, queries quoted as the
client quotes them; anything else (an exec plugin, an auth provider, merged files) goes to the
client's loader; and `status` runs without importing `kubernetes` at all."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.cluster import SimCluster
from migrator.kube.endpoint import Endpoint, from_kubeconfig, query_string
from tests.helpers import crash


def _doc(cluster: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u",
                                                      "namespace": "gpu-operator"}}],
            "current-context": "ctx"}


def test_a_token_and_a_ca_file_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    doc = _doc({"server": "https://api.example:6443/", "certificate-authority": "ca.pem"},
               {"token": "t0ken"})
    found = from_kubeconfig([str(tmp_path / "config")], doc, "ctx")
    assert found == Endpoint("https://api.example:6443", "t0ken", str(tmp_path / "ca.pem"))
    assert "t0ken" not in repr(found)


def test_embedded_certificates_are_private_files(tmp_path: Path) -> None:
    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    doc = _doc({"server": "https://api.example", "certificate-authority-data": pem,
                "insecure-skip-tls-verify": False, "tls-server-name": "kubernetes"},
               {"client-certificate-data": pem, "client-key-data": pem})
    found = from_kubeconfig([str(tmp_path / "config")], doc, "ctx")
    assert found is not None and found.ca_data == "-----BEGIN CERTIFICATE-----\n"
    assert found.server_name == "kubernetes" and found.verify
    for path in (found.cert_file, found.key_file):
        assert path is not None
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("cluster, user", [
    ({"server": "https://a"}, {"exec": {"command": "aws", "apiVersion": "v1"}}),
    ({"server": "https://a"}, {"auth-provider": {"name": "oidc"}}),
    ({"server": "https://a"}, {"username": "admin", "password": "x"}),
    ({"server": "https://a", "proxy-url": "http://proxy:3128"}, {"token": "t"}),
    ({"server": "https://a"}, {"client-certificate-data": "not base64!"}),
    ({"server": "https://a"}, {"client-certificate": "only-the-cert.pem"}),
    ({"server": 42}, {"token": "t"}),
])
def test_anything_else_goes_to_the_clients_loader(tmp_path: Path, cluster: dict[str, Any],
                                                  user: dict[str, Any]) -> None:
    assert from_kubeconfig([str(tmp_path / "config")], _doc(cluster, user), "ctx") is None


def test_merged_files_go_to_the_clients_loader(tmp_path: Path) -> None:
    doc = _doc({"server": "https://a"}, {"token": "t"})
    assert from_kubeconfig([str(tmp_path / "a"), str(tmp_path / "b")], doc, "ctx") is None


def test_queries_are_quoted_as_the_kubernetes_client_quotes_them() -> None:
    from kubernetes.client import ApiClient

    query = [("labelSelector", "app in (nvidia-dcgm-dra,x),tier!=a b"), ("limit", "500"),
             ("fieldSelector", "metadata.name=nvidia-dcgm"), ("continue", "eyJ2Ijo=")]
    assert query_string(query) == ApiClient().parameters_to_url_query(query, None)


def test_status_does_not_import_the_kubernetes_client(tmp_path: Path) -> None:
    with SimCluster(nodes=2, stack="gpucluster", time_scale=0.02) as sim:
        assert yaml.safe_load(Path(sim.kubeconfig).read_text())["users"]
        code = ("import sys\nfrom migrator.cli.app import main\nsys.argv = ['dcgm-migrate', "
                f"'status', '--kubeconfig', {sim.kubeconfig!r}, '-o', 'json']\n"
                "try:\n    main()\nexcept SystemExit:\n    pass\n"
                "print('kubernetes' in sys.modules, file=sys.stderr)")
        done = subprocess.run([sys.executable, "-c", code], env=crash.cli_env(),
                              capture_output=True, text=True, timeout=120, check=False)
    assert '"verdict"' in done.stdout, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr
