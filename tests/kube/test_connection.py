"""What the official client's kubeconfig loader brings, end to end against the sim's HTTPS
listener: a merged KUBECONFIG list read as kubectl reads it (the first file's current-context,
each file's relative paths from its own folder) and a cluster's `proxy-url`, through which
every request then goes; and kubectl's proxy from the environment (`HTTPS_PROXY`, `NO_PROXY`
with domain suffixes and CIDRs, by Go's `http.ProxyFromEnvironment`: migrator/kube/config.py),
through a CONNECT proxy that alone knows where the server's name points, or a SOCKS5 proxy that
is handed the name to resolve, as Go's SOCKS dialer hands it."""

from __future__ import annotations

import base64
import select
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.config import incluster_config

from dcgm_sim.access import ADMIN_USER
from dcgm_sim.cluster import SimCluster
from dcgm_sim.tls import IP_NAMES
from migrator.kube import Kube
from migrator.kube.config import proxy_for
from migrator.model import kinds
from tests.helpers import cli

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY",
                   "no_proxy", "ALL_PROXY", "all_proxy", "REQUEST_METHOD")


@pytest.fixture
def tls_sim(make_sim: Callable[..., SimCluster]) -> SimCluster:
    return make_sim(nodes=1, stack="gpucluster", tls=True, insecure_port=False)


def _kubeconfig(sim: SimCluster, path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(sim.kubeconfig_for(ADMIN_USER, path).read_text())
    return doc


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT), as clients use one for https; records the
    targets it was asked for."""

    scheme = "http"

    def __init__(self, credentials: str | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"{self.scheme}://127.0.0.1:{self.listener.getsockname()[1]}"
        self.targets: list[str] = []
        self.credentials = credentials  # "user:password" it requires (Basic), if any
        self.refused = 0  # CONNECTs without them: answered 407
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target = head.split(b" ", 2)[:2]
            if method != b"CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            if self.credentials is not None:
                token = base64.b64encode(self.credentials.encode()).decode()
                if f"proxy-authorization: basic {token}".lower() not in \
                        head.decode().lower().splitlines():
                    self.refused += 1
                    conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                                 b"Proxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")
                    return
            self.targets.append(target.decode())
            host, port = target.decode().rsplit(":", 1)
            with socket.create_connection((host, int(port))) as upstream:
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self._pump(conn, upstream)

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        while True:
            ready = select.select([a, b], [], [], 5)[0]
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (b if sock is a else a).sendall(data)

    def close(self) -> None:
        self.listener.close()


class SocksProxy(ConnectProxy):
    """A SOCKS5 proxy (RFC 1928: no authentication, CONNECT), as `ssh -D` makes one; records
    each target as the client sent it: a name it left to the proxy, or an address it resolved
    itself (which is what the tests look at, so no proxy package: none records that)."""

    scheme = "socks5"

    def _tunnel(self, conn: socket.socket) -> None:
        def read(size: int) -> bytes:
            return conn.recv(size, socket.MSG_WAITALL)

        with conn:
            _, methods = read(2)
            read(methods)
            conn.sendall(b"\x05\x00")  # version 5, no authentication
            _, command, _, kind = read(4)
            if command != 1:  # CONNECT only
                conn.sendall(b"\x05\x07\x00\x01" + bytes(6))
                return
            host = (read(read(1)[0]).decode() if kind == 3 else  # a domain name
                    socket.inet_ntop(socket.AF_INET if kind == 1 else socket.AF_INET6,
                                     read(4 if kind == 1 else 16)))
            port = int.from_bytes(read(2), "big")
            self.targets.append(f"{host}:{port}")
            with socket.create_connection((host, port)) as upstream:
                conn.sendall(b"\x05\x00\x00\x01" + bytes(6))  # succeeded
                self._pump(conn, upstream)


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    made = ConnectProxy()
    yield made
    made.close()


@pytest.fixture
def socks_proxy() -> Iterator[SocksProxy]:
    made = SocksProxy()
    yield made
    made.close()


def test_a_clusters_proxy_url_carries_every_request(tls_sim: SimCluster, tmp_path: Path,
                                                     proxy: ConnectProxy) -> None:
    doc = _kubeconfig(tls_sim, tmp_path / "kubeconfig")
    doc["clusters"][0]["cluster"]["proxy-url"] = proxy.url
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    kube = Kube.connect(str(tmp_path / "kubeconfig"))
    try:
        assert kube.get(kinds.NAMESPACE, "gpu-operator") is not None
        listed = kube.list(kinds.DAEMONSET, "gpu-operator")
    finally:
        kube.close()
    assert listed.items
    assert proxy.targets and set(proxy.targets) == {tls_sim.secure_url.removeprefix("https://")}


def test_a_merged_kubeconfig_list_reads_as_kubectl_reads_it(
        tls_sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    for folder, name in ((first, "one"), (second, "two")):
        folder.mkdir()
        doc = _kubeconfig(tls_sim, folder / "config")
        cluster = doc["clusters"][0]["cluster"]
        # a CA file relative to the kubeconfig's own folder, as kubectl resolves it
        (folder / "ca.crt").write_bytes(
            base64.b64decode(cluster.pop("certificate-authority-data")))
        cluster["certificate-authority"] = "ca.crt"
        for key in ("clusters", "users", "contexts"):
            doc[key][0]["name"] = name
        doc["contexts"][0]["context"].update(cluster=name, user=name)
        doc["current-context"] = name
        (folder / "config").write_text(yaml.safe_dump(doc))
    monkeypatch.chdir(tmp_path)  # the relative CA paths must not be read from here
    monkeypatch.setenv("KUBECONFIG", f"{first / 'config'}:{second / 'config'}")
    for context, chosen in ((None, "one"), ("two", "two")):
        kube = Kube.connect(context=context)
        try:
            assert kube.context == chosen
            assert kube.get(kinds.NAMESPACE, "gpu-operator") is not None
        finally:
            kube.close()


# Names the sim's certificate is valid for, as a cluster's DNS resolves them: the test's
# `resolve` fixture points them at the sim's loopback listener, as a client in the cluster (or
# the proxy in front of it) would reach the API server there.
CLUSTER_NAME = "kubernetes.default.svc"
SERVICE_IP = IP_NAMES[1]  # the `kubernetes` Service's address (10.96.0.1)
DEAD = "http://127.0.0.1:1"  # a proxy nothing listens at: a request sent there fails


@pytest.fixture
def resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLUSTER_NAME and SERVICE_IP connect to 127.0.0.1 in this process (the client's and the
    proxy's connections alike); every proxy variable starts unset."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host in (CLUSTER_NAME, SERVICE_IP) else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def _behind(sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxy_url: str,
            where: str = "HTTPS_PROXY") -> str:
    """A kubeconfig for the sim by a name only `resolve` knows, `proxy_url` given `where`
    kubectl takes it from (`HTTPS_PROXY` or the cluster's `proxy-url`): its path."""
    doc = _kubeconfig(sim, tmp_path / "kubeconfig")
    cluster = doc["clusters"][0]["cluster"]
    cluster["server"] = f"https://{CLUSTER_NAME}:{sim.secure_url.rsplit(':', 1)[1]}"
    if where == "proxy-url":
        cluster["proxy-url"] = proxy_url
    else:
        monkeypatch.setenv("HTTPS_PROXY", proxy_url)
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    return str(tmp_path / "kubeconfig")


def _reads_through(kubeconfig: str) -> None:
    """A get and a list through `kubeconfig`, as a command would make them."""
    kube = Kube.connect(kubeconfig)
    try:
        assert kube.get(kinds.NAMESPACE, "gpu-operator") is not None
        assert kube.list(kinds.DAEMONSET, "gpu-operator").items
    finally:
        kube.close()


# (case, server host, environment, the kubeconfig's proxy-url, whether the proxy carries it);
# "PROXY" stands for the running CONNECT proxy's URL
ENVIRONMENTS = [
    ("HTTPS_PROXY", CLUSTER_NAME, {"HTTPS_PROXY": "PROXY"}, None, True),
    ("a scheme-less proxy is http://", CLUSTER_NAME, {"HTTPS_PROXY": "PROXY-HOSTPORT"}, None, True),
    ("no_proxy domain suffix", CLUSTER_NAME, {"HTTPS_PROXY": "PROXY", "no_proxy": ".svc"}, None,
     False),
    ("NO_PROXY domain", CLUSTER_NAME, {"https_proxy": "PROXY", "NO_PROXY": "example.com, "
                                       "default.svc"}, None, False),
    ("NO_PROXY another port", CLUSTER_NAME, {"HTTPS_PROXY": "PROXY",
                                             "NO_PROXY": "default.svc:1"}, None, True),
    ("NO_PROXY CIDR", SERVICE_IP, {"HTTPS_PROXY": "PROXY", "NO_PROXY": "10.96.0.0/12"}, None,
     False),
    ("NO_PROXY other CIDR", SERVICE_IP, {"HTTPS_PROXY": "PROXY", "NO_PROXY": "10.0.0.0/16,.svc"},
     None, True),
    ("upper-case first", CLUSTER_NAME, {"HTTPS_PROXY": "PROXY", "https_proxy": DEAD}, None, True),
    ("HTTP_PROXY and ALL_PROXY are not for https", CLUSTER_NAME,
     {"HTTP_PROXY": DEAD, "ALL_PROXY": DEAD, "all_proxy": DEAD}, None, False),
    ("loopback is never proxied", "127.0.0.1", {"HTTPS_PROXY": DEAD}, None, False),
    ("proxy-url wins over the environment", CLUSTER_NAME,
     {"HTTPS_PROXY": DEAD, "NO_PROXY": ".svc"}, "PROXY", True),
]


@pytest.mark.parametrize(("host", "environment", "proxy_url", "proxied"),
                         [case[1:] for case in ENVIRONMENTS], ids=[c[0] for c in ENVIRONMENTS])
def test_the_environments_proxy_is_kubectls(
        tls_sim: SimCluster, tmp_path: Path, proxy: ConnectProxy, resolve: None,
        monkeypatch: pytest.MonkeyPatch, host: str, environment: dict[str, str],
        proxy_url: str | None, proxied: bool) -> None:
    """A request goes through the proxy exactly where kubectl's would, and otherwise straight
    to the server (where it succeeds too: a DEAD proxy asked would fail it)."""
    def actual(value: str) -> str:
        return {"PROXY": proxy.url, "PROXY-HOSTPORT": proxy.url.removeprefix("http://")}.get(
            value, value)

    port = tls_sim.secure_url.rsplit(":", 1)[1]
    doc = _kubeconfig(tls_sim, tmp_path / "kubeconfig")
    cluster = doc["clusters"][0]["cluster"]
    cluster["server"] = f"https://{host}:{port}"
    if proxy_url:
        cluster["proxy-url"] = actual(proxy_url)
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    for name, value in environment.items():
        monkeypatch.setenv(name, actual(value))
    _reads_through(str(tmp_path / "kubeconfig"))
    assert proxy.targets == ([f"{host}:{port}"] if proxied else []), proxy.targets


@pytest.mark.parametrize("where", ["HTTPS_PROXY", "proxy-url"])
def test_a_proxys_credentials_in_its_url_are_sent_as_kubectl_sends_them(
        tls_sim: SimCluster, tmp_path: Path, resolve: None, monkeypatch: pytest.MonkeyPatch,
        where: str) -> None:
    """`http://user:password@proxy` (percent-encoded in the URL): Basic Proxy-Authorization
    on the CONNECT, the decoded user and password, as Go's transport sends them."""
    guarded = ConnectProxy(credentials="jump:p@ss w0rd")
    try:
        _reads_through(_behind(tls_sim, tmp_path, monkeypatch, guarded.url.replace(
            "http://", "http://jump:p%40ss%20w0rd@"), where))
    finally:
        guarded.close()
    port = tls_sim.secure_url.rsplit(":", 1)[1]
    assert set(guarded.targets) == {f"{CLUSTER_NAME}:{port}"} and guarded.refused == 0


def test_a_proxy_that_refuses_the_credentials_is_named_at_once(
        tls_sim: SimCluster, tmp_path: Path, resolve: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A 407 is not retried (asking again cannot help): one attempt, what the proxy said and
    the fix, exit 3; the password is not repeated."""
    guarded = ConnectProxy(credentials="jump:right")
    try:
        result = cli.run(_behind(tls_sim, tmp_path, monkeypatch, guarded.url.replace(
            "http://", "http://jump:wr0ng@")), "status")
    finally:
        guarded.close()
    port = tls_sim.secure_url.rsplit(":", 1)[1]
    assert result.code == 3, result.stderr
    assert (f"error: Cannot reach the Kubernetes API server at https://{CLUSTER_NAME}:{port}: "
            "the proxy: Tunnel connection failed: 407 Proxy Authentication Required."
            ) in result.stderr
    assert "fix: give the proxy's user and password in its URL, percent-encoded" in result.stderr
    assert guarded.refused == 1 and "wr0ng" not in result.stderr + result.stdout


@pytest.mark.parametrize("where", ["HTTPS_PROXY", "proxy-url"])
def test_a_socks5_proxy_is_handed_the_servers_name(
        tls_sim: SimCluster, tmp_path: Path, socks_proxy: SocksProxy, resolve: None,
        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """`socks5://` as kubectl reads it: the proxy resolves the server's name (a private API
    server's name known only at the far end of an `ssh -D` tunnel), not the tool."""
    _reads_through(_behind(tls_sim, tmp_path, monkeypatch, socks_proxy.url, where))
    port = tls_sim.secure_url.rsplit(":", 1)[1]
    assert socks_proxy.targets and set(socks_proxy.targets) == {f"{CLUSTER_NAME}:{port}"}


def test_a_socks5_proxy_without_pysocks_is_refused_with_the_fix(
        tls_sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PySocks (the `socks` extra), one sentence and the fix, exit 2, before any
    request; the proxy's credentials are not repeated."""
    monkeypatch.setitem(sys.modules, "socks", None)  # as if it were not installed
    doc = _kubeconfig(tls_sim, tmp_path / "kubeconfig")
    doc["clusters"][0]["cluster"]["proxy-url"] = "socks5://jump:s3cret@127.0.0.1:1"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(doc))
    before = len(tls_sim.server.log.since())
    result = cli.run(str(tmp_path / "kubeconfig"), "status")
    assert result.code == 2, result.stderr
    assert "error: The proxy socks5://127.0.0.1:1 is a SOCKS5 proxy, and the SOCKS support it " \
           "needs (PySocks) is not installed beside the tool." in result.stderr
    assert "fix: install it: pip install 'dcgm-migrate[socks]'" in result.stderr
    assert "s3cret" not in result.stderr + result.stdout
    assert len(tls_sim.server.log.since()) == before  # not one request


@pytest.mark.parametrize(("server", "environment", "expected"), [
    ("https://api.corp:6443", {"https_proxy": "http://p:3128"}, "http://p:3128"),
    ("https://api.corp:6443", {"HTTPS_PROXY": "p:3128"}, "http://p:3128"),
    ("https://api.corp:6443", {"HTTPS_PROXY": "socks5://p:1080"}, "socks5://p:1080"),
    ("http://api.corp:8080", {"HTTPS_PROXY": "http://p:3128"}, None),
    ("http://api.corp:8080", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
    ("http://api.corp:8080", {"HTTP_PROXY": "http://p:3128", "REQUEST_METHOD": "GET"}, None),
    ("https://api.corp:6443", {"ALL_PROXY": "http://p:3128"}, None),
    ("https://localhost:6443", {"HTTPS_PROXY": "http://p:3128"}, None),
    ("https://[::1]:6443", {"HTTPS_PROXY": "http://p:3128"}, None),
    ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "*"}, None),
    ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "corp"}, None),
    ("https://corp:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": ".corp"},
     "http://p:3128"),  # a leading dot: subdomains only
    ("https://corp:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "*.corp"},
     "http://p:3128"),
    ("https://api.corp", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "api.corp:443"}, None),
    ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "api.corp:443"},
     "http://p:3128"),
    ("https://[fd00::1]:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "fd00::/64"}, None),
    ("https://[fd00::1]:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "[fd00::1]:6443"},
     None),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "10.1.2.3"}, None),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "10.1.2.3:443"},
     "http://p:3128"),
    ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": "10.1.0.0/16"}, None),
    ("https://api.corp:6443", {"HTTPS_PROXY": "http://p:3128", "no_proxy": "api.corp",
                               "NO_PROXY": "other"}, "http://p:3128"),  # NO_PROXY first
])
def test_proxy_for_follows_gos_rules(server: str, environment: dict[str, str],
                                     expected: str | None) -> None:
    assert proxy_for(server, environment) == expected


@pytest.mark.parametrize(("no_proxy", "proxied"), [("", True), ("10.96.0.0/12", False)],
                         ids=["HTTPS_PROXY", "NO_PROXY the service CIDR"])
def test_in_cluster_the_environments_proxy_applies_too(
        tls_sim: SimCluster, tmp_path: Path, proxy: ConnectProxy, resolve: None,
        monkeypatch: pytest.MonkeyPatch, no_proxy: str, proxied: bool) -> None:
    """A pod's service account: the API server at the `kubernetes` Service's address
    (KUBERNETES_SERVICE_HOST), through HTTPS_PROXY unless NO_PROXY names the service range,
    as client-go's in-cluster transport does."""
    doc = _kubeconfig(tls_sim, tmp_path / "kubeconfig")
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(doc["users"][0]["user"]["token"])
    (account / "ca.crt").write_bytes(
        base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(account / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(account / "ca.crt"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    port = tls_sim.secure_url.rsplit(":", 1)[1]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", SERVICE_IP)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    if no_proxy:
        monkeypatch.setenv("NO_PROXY", no_proxy)
    kube = Kube.connect()
    try:
        assert kube.context == "in-cluster"
        assert kube.list(kinds.DAEMONSET, "gpu-operator").items
    finally:
        kube.close()
    assert proxy.targets == ([f"{SERVICE_IP}:{port}"] if proxied else []), proxy.targets
