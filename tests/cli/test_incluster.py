"""In-cluster configuration (docs/job.yaml): with no kubeconfig, the tool uses the pod's
service account — token and CA files, KUBERNETES_SERVICE_HOST/PORT — over TLS, as in a Job.

The simulated API server speaks plain HTTP, so a small TLS terminator with a throwaway
self-signed certificate (the sim's own, `dcgm_sim.tls`, serving as its own CA) stands in
front of it; only the service-account file locations are redirected (a test cannot write
/var/run/secrets)."""

from __future__ import annotations

import datetime
import json
import select
import shutil
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kubernetes.config import incluster_config
from typer.testing import CliRunner

from dcgm_sim.cluster import SimCluster
from dcgm_sim.server import ADMIN_TOKEN
from dcgm_sim.tls import make_certificate
from migrator.cli.app import app
from migrator.kube import Kube
from migrator.kube.config import resolve_source
from migrator.model import kinds
from tests.helpers.cli import validate

if TYPE_CHECKING:
    from migrator.model.kinds import Kind


class TlsTerminator:
    """Accepts TLS on 127.0.0.1 and pipes the plain bytes to the simulated API server."""

    def __init__(self, target_port: int, cert: Path, key: Path) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.handshakes = 0  # TLS connections made (the client pools them)
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._pump, args=(conn,), daemon=True).start()

    def _pump(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stalls
        try:
            tls = self.context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        self.handshakes += 1
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            tls.close()
            return
        try:
            while not self._stop.is_set():
                ready = [tls] if tls.pending() else select.select([tls, upstream], [], [],
                                                                   0.2)[0]
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is tls else tls).sendall(data)
        except (OSError, ssl.SSLError):
            return
        finally:
            upstream.close()
            tls.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed serving certificate for 127.0.0.1 (it is its own CA)."""
    made = make_certificate(tmp_path_factory.mktemp("tls"))
    cert, key = made.cert, made.key
    return cert, key


@pytest.fixture
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certificate: tuple[Path, Path],
        make_sim: Callable[..., SimCluster]) -> Iterator[tuple[SimCluster, Path]]:
    """A simulated cluster behind TLS, and this process set up as a pod with a service
    account: no kubeconfig anywhere, the token and CA where the client looks for them."""
    sim = make_sim(nodes=2, stack="gpucluster", insecure_port=False, time_scale=0.005)
    cert, key = certificate
    proxy = TlsTerminator(int(sim.url.rsplit(":", 1)[1]), cert, key)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(ADMIN_TOKEN)
    shutil.copy(cert, account / "ca.crt")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(proxy.port))
    yield sim, account
    proxy.close()


def test_without_a_kubeconfig_the_service_account_is_used(
        pod: tuple[SimCluster, Path]) -> None:
    sim, _ = pod
    assert resolve_source(None).in_cluster
    mark = sim.server.log.last_seq
    res = CliRunner().invoke(app, ["status", "-o", "json"], catch_exceptions=False)
    # Read through the service account: an unmigrated cluster, judged live (exit 1: the
    # stable names do not exist yet).
    assert res.exit_code == 1, res.stderr
    doc = json.loads(res.stdout)
    validate("status", doc)
    assert doc["stack"] == "gpucluster" and doc["namespace"] == "gpu-operator"
    failed = {c["name"] for c in doc["verdict"]["checks"] if not c["ok"]}
    assert {"stable-name/nvidia-dcgm", "stable-name/nvidia-dcgm-exporter"} <= failed
    users = {r.user for r in sim.server.log.since(mark)}
    assert users and "system:unsecured" not in users  # every request carried the token


def test_a_whole_phase_runs_in_cluster(pod: tuple[SimCluster, Path]) -> None:
    sim, _ = pod
    res = CliRunner().invoke(app, ["apply", "--phase", "2", "--yes", "-o", "json"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    assert [p["status"] for p in json.loads(res.stdout)["phases"]] == ["completed",
                                                                      "completed", "pending"]
    assert sim.store.find(*_service("nvidia-dcgm-exporter")) is not None


def _service(name: str) -> tuple[Kind, str, str]:
    return kinds.SERVICE, "gpu-operator", name


def test_a_wrong_token_is_an_api_error_not_a_silent_fallback(
        pod: tuple[SimCluster, Path]) -> None:
    _, account = pod
    (account / "token").write_text("not-a-valid-token")
    res = CliRunner().invoke(app, ["status"], catch_exceptions=False)
    assert res.exit_code == 3, res.output
    assert "error:" in res.stderr and "Traceback" not in res.stderr
    assert "not-a-valid-token" not in res.output  # credentials never appear in messages


def test_a_pod_without_its_token_says_so(pod: tuple[SimCluster, Path]) -> None:
    _, account = pod
    (account / "token").unlink()
    res = CliRunner().invoke(app, ["status"], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert "in-cluster service account" in res.stderr
    assert "token file does not exist" in res.stderr


def test_a_rotated_token_is_read_again(pod: tuple[SimCluster, Path],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet rotates a projected service-account token in place: the client re-reads
    the file once its copy is older than its refresh period (a minute; none here)."""
    sim, account = pod
    loader = incluster_config.InClusterConfigLoader
    made = loader.__init__

    def at_once(self: incluster_config.InClusterConfigLoader, *args: object,
                **kwargs: object) -> None:
        made(self, *args, **kwargs)
        self._token_refresh_period = datetime.timedelta(0)

    monkeypatch.setattr(loader, "__init__", at_once)
    kube = Kube.connect()
    try:
        mark = sim.server.log.last_seq
        kube.ping()
        (account / "token").write_text(sim.server.access.issue_token("rotated-sa"))
        kube.ping()
    finally:
        kube.close()
    assert [r.user for r in sim.server.log.since(mark)] == ["sim-admin", "rotated-sa"]
