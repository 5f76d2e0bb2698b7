"""What the official client's kubeconfig loader brings, end to end against the sim's HTTPS
listener: a merged KUBECONFIG list read as kubectl reads it (the first file's current-context,
each file's relative paths from its own folder) and a cluster's `proxy-url`, through which
every request then goes."""

from __future__ import annotations

import base64
import select
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.access import ADMIN_USER
from dcgm_sim.cluster import SimCluster
from migrator.kube import Kube
from migrator.model import kinds


@pytest.fixture
def tls_sim(make_sim: Callable[..., SimCluster]) -> SimCluster:
    return make_sim(nodes=1, stack="gpucluster", tls=True, insecure_port=False)


def _kubeconfig(sim: SimCluster, path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(sim.kubeconfig_for(ADMIN_USER, path).read_text())
    return doc


class ConnectProxy:
    """An HTTP proxy that only tunnels (CONNECT), as clients use one for https; records the
    targets it was asked for."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.targets: list[str] = []
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


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    made = ConnectProxy()
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
