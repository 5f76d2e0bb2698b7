"""Fixtures for the simulated API server: an `ApiServer` on an empty `Store`, official-client
access to it, and kubectl pointed at it through a kubeconfig in tmp_path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dcgm_sim import writes
from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds

NS = "gpu-operator"


def make_client(url: str, token: str = ADMIN_TOKEN) -> client.ApiClient:
    """An official-client ApiClient for the sim at `url`, authenticating with `token`."""
    cfg = client.Configuration()
    cfg.host = url
    cfg.api_key = {"authorization": f"Bearer {token}"}
    cfg.retries = False
    return client.ApiClient(cfg)


@dataclass
class Raw:
    """Plain HTTP to the sim, for what the official client hides (headers, odd bodies)."""

    url: str
    token: str = ADMIN_TOKEN

    def __call__(self, method: str, path: str, body: Any = None,
                 content_type: str = "application/json",
                 token: str | None = None) -> tuple[int, Any, dict[str, str]]:
        data = body if isinstance(body, bytes) else (
            None if body is None else json.dumps(body).encode())
        headers = {"Content-Type": content_type}
        tok = self.token if token is None else token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
                return resp.status, _decode(raw), dict(resp.headers)
        except urllib.error.HTTPError as e:
            return e.code, _decode(e.read()), dict(e.headers)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode()


@pytest.fixture
def store() -> Store:
    s = Store()
    writes.create(s, kinds.NAMESPACE, {"metadata": {"name": NS}})
    writes.create(s, kinds.NAMESPACE, {"metadata": {"name": "default"}})
    return s


@pytest.fixture
def server(store: Store) -> Iterator[ApiServer]:
    srv = ApiServer(store)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    c = make_client(server.url)
    yield c
    c.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def raw(server: ApiServer) -> Raw:
    return Raw(server.url)


def write_kubeconfig(path: Path, url: str, token: str = ADMIN_TOKEN) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": url}}],
        "users": [{"name": "sim", "user": {"token": token}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim",
                                                 "namespace": NS}}],
    }))
    return path


@dataclass
class Kubectl:
    """kubectl pointed at the sim: `kubectl("get", "pods", "-o", "json")`."""

    binary: str
    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True,
                 timeout: float = 60) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.binary, *args], env=self.env, capture_output=True,
                                text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): "
                                 f"{result.stderr}")
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start kubectl in the background (for commands that wait, like rollout status)."""
        return subprocess.Popen([self.binary, *args], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


KubectlRun = Kubectl


@pytest.fixture
def kubectl(server: ApiServer, tmp_path: Path) -> Kubectl:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    config = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    env = {**os.environ, "KUBECONFIG": str(config), "KUBECACHEDIR": str(tmp_path / "cache"),
           "HOME": str(tmp_path)}
    return Kubectl(binary, env)


def pod(name: str, *, node: str = "node-1", labels: dict[str, str] | None = None,
        ns: str = NS) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {"app": "x"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "img:1"}]}}


def daemonset(name: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": NS, "labels": dict(labels)},
            "spec": {"selector": {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)},
                                  "spec": {"containers": [{"name": "c", "image": "img:1"}]}}}}


def service(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"selector": {"app": name}, "ports": [{"name": "m", "port": 9400}]}
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NS}, "spec": body}
