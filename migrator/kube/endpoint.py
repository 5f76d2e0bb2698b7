"""A connection read straight from a kubeconfig with static credentials, sent over urllib3.

Importing the `kubernetes` client (its configuration loader pulls in requests, oauthlib,
pydantic and the rest) costs more than a whole `status` on a small cluster, so the common
kubeconfig — a server, a CA, and a bearer token or a client certificate — is read here and sent
without it. Everything else a kubeconfig can ask for (an exec plugin, an auth provider, basic
auth, impersonation, a proxy, several merged files, the in-cluster service account with its
rotating token) goes to the client's own loader and ApiClient, imported only then
(`config.load_configuration`): `from_kubeconfig` says None for it, never a half reading.

Relative file paths are relative to the kubeconfig's folder, as kubectl reads them. Embedded
certificate data is written to files only this user can read (the TLS layer loads a client
certificate from a file), removed when the process exits. A token never appears in a repr.
"""

from __future__ import annotations

import atexit
import base64
import binascii
import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import urllib3

POOLED = 32  # keep-alive connections per server, at least (see `Sender`'s pool)
CLUSTER_KEYS = frozenset({"server", "certificate-authority", "certificate-authority-data",
                          "insecure-skip-tls-verify", "tls-server-name", "extensions"})
USER_KEYS = frozenset({"token", "tokenFile", "client-certificate", "client-certificate-data",
                       "client-key", "client-key-data", "extensions"})


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach one API server with static credentials."""

    host: str
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    ca_data: str | None = field(default=None, repr=False)  # PEM
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_name: str | None = None  # tls-server-name


def _named(entries: Any, name: Any) -> Mapping[str, Any] | None:
    """The `name`d entry's body in a kubeconfig list (`clusters`, `users`, `contexts`)."""
    if not isinstance(entries, list):
        return None
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            for key in ("cluster", "user", "context"):
                body = entry.get(key)
                if isinstance(body, dict):
                    return body
            return {}
    return None


def _decoded(text: Any) -> bytes | None:
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


_WRITTEN: list[str] = []


def _forget_written() -> None:
    for path in _WRITTEN:
        with contextlib.suppress(OSError):
            os.unlink(path)


atexit.register(_forget_written)


def _private_file(data: bytes) -> str:
    """Embedded certificate data as a file only this user can read (removed at exit)."""
    fd, path = tempfile.mkstemp(prefix="dcgm-migrate-", suffix=".pem")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    _WRITTEN.append(path)
    return path


class NeedsClient(Exception):
    """The kubeconfig asks for something only the kubernetes client's loader does."""


def _path(value: Any, base: Path) -> str:
    if not isinstance(value, str) or not value:
        raise NeedsClient
    return str(base / os.path.expanduser(value))


def _file_or_data(body: Mapping[str, Any], key: str, base: Path) -> str | None:
    """`key` as a file path: the file it names, or its `-data` written to a private file."""
    data = body.get(f"{key}-data")
    if data is not None:
        raw = _decoded(data)
        if raw is None:
            raise NeedsClient
        return _private_file(raw)
    return _path(body[key], base) if key in body else None


def _endpoint(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> Endpoint:
    if set(cluster) - CLUSTER_KEYS or set(user) - USER_KEYS:
        raise NeedsClient
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("http://", "https://")):
        raise NeedsClient
    token = user.get("token")
    if "tokenFile" in user and token is None:
        try:
            token = Path(_path(user["tokenFile"], base)).read_text().strip()
        except OSError:
            raise NeedsClient from None
    if token is not None and not isinstance(token, str):
        raise NeedsClient
    ca_data = None
    if "certificate-authority-data" in cluster:
        raw = _decoded(cluster["certificate-authority-data"])
        if raw is None:
            raise NeedsClient
        ca_data = raw.decode("ascii", "replace")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    name = cluster.get("tls-server-name")
    if not isinstance(insecure, bool) or (name is not None and not isinstance(name, str)):
        raise NeedsClient
    cert, key = (_file_or_data(user, "client-certificate", base),
                 _file_or_data(user, "client-key", base))
    if (cert is None) != (key is None):
        raise NeedsClient
    return Endpoint(server.rstrip("/"), token or None,
                    None if ca_data else (_path(cluster["certificate-authority"], base)
                                          if "certificate-authority" in cluster else None),
                    ca_data, cert, key, not insecure, name or None)


def from_kubeconfig(paths: Sequence[str], doc: Mapping[str, Any], context: str) -> Endpoint | None:
    """The endpoint of `context` in the one kubeconfig file `paths` names (already read into
    `doc`), or None when only the kubernetes client's loader can read it."""
    if len(paths) != 1:
        return None  # merged files: the client's loader merges them as kubectl does
    ctx = _named(doc.get("contexts"), context)
    if ctx is None:
        return None
    cluster = _named(doc.get("clusters"), ctx.get("cluster"))
    user = _named(doc.get("users"), ctx.get("user")) if "user" in ctx else {}
    if cluster is None or user is None or set(ctx) - {"cluster", "user", "namespace",
                                                       "extensions"}:
        return None
    try:
        return _endpoint(cluster, user, Path(paths[0]).expanduser().resolve().parent)
    except (NeedsClient, TypeError, ValueError, KeyError, AttributeError):
        return None  # the client's loader reads it, or says what is wrong with it


def query_string(query: Sequence[tuple[str, str]]) -> str:
    """`k=v&…` with each value quoted as the kubernetes client quotes it."""
    return "&".join(f"{k}={quote(str(v))}" for k, v in query)


class Sender:
    """Requests over one urllib3 pool to an `Endpoint` (thread-safe)."""

    def __init__(self, endpoint: Endpoint, user_agent: str) -> None:
        self.server = endpoint.host
        self._headers = {"User-Agent": user_agent}
        if endpoint.token:
            self._headers["Authorization"] = f"Bearer {endpoint.token}"
        tls: dict[str, Any] = {}
        if endpoint.host.startswith("https://"):
            tls["cert_reqs"] = "CERT_REQUIRED" if endpoint.verify else "CERT_NONE"
            if endpoint.verify:
                if endpoint.ca_data:
                    tls["ca_cert_data"] = endpoint.ca_data
                else:
                    tls["ca_certs"] = endpoint.ca_file or _default_ca()
            if endpoint.cert_file:
                tls["cert_file"], tls["key_file"] = endpoint.cert_file, endpoint.key_file
            if endpoint.server_name:
                tls["server_hostname"] = endpoint.server_name
                tls["assert_hostname"] = endpoint.server_name
        # At least POOLED connections kept alive: the guard holds three watches open and sends
        # 16 slice writes at once (engine/slicewrites.py); with fewer, each wave of writes
        # opened new connections, a TCP and TLS handshake each on a real server, and at a
        # 15,000-node takeover on the sim waited seconds to be accepted.
        self._pool = urllib3.PoolManager(num_pools=4,
                                         maxsize=max((os.cpu_count() or 1) * 5, POOLED),
                                         retries=False, **tls)

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]], body: Any,
                headers: Mapping[str, str], timeout: tuple[float, float]) -> Any:
        """The urllib3 response, its body not read yet (the caller reads or streams it)."""
        url = self.server + path + (f"?{query_string(query)}" if query else "")
        data = body if body is None or isinstance(body, bytes | str) else json.dumps(body)
        return self._pool.request(
            method, url, body=data, headers={**self._headers, **headers},
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
            preload_content=False, retries=False, redirect=False)

    def close(self) -> None:
        self._pool.clear()


def _default_ca() -> str | None:
    """The CA bundle the kubernetes client verifies with when the kubeconfig names none."""
    try:
        import certifi
    except ImportError:
        return None
    return str(certifi.where())
