"""Connection settings in kubectl's order: `--kubeconfig`, `$KUBECONFIG` (merged), `~/.kube/config`,
the pod's service account, read by the official client's loaders. Here: the files, the context,
and one `UsageError` naming (never quoting: tokens) what is wrong. The proxy is kubectl's, by
Go's rules (golang.org/x/net/http/httpproxy, unless the cluster sets `proxy-url`), not Python's
`getproxies`: upper-case first, bare `host:port` is http, never loopback, NO_PROXY with `*`, IPs,
CIDRs (no name resolved), domains with subdomains (`*.`/`.`: only those), `host:port`."""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml
from kubernetes.client import Configuration
from kubernetes.config import ConfigException, load_incluster_config
from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger
from urllib3.util import make_headers

from migrator.errors import UsageError

_HINT = "pass a working file with --kubeconfig (or set KUBECONFIG) and a valid --context"
# Keep-alive connections per server, at least: the guard's 3 watches and 16 concurrent writes.
POOLED = 32


class ExecFailures(logging.Filter):
    """The official client's loader logs a failed exec plugin (`aws eks get-token` whose SSO
    session expired) at the root logger, as a bare `ERROR:root:` line, and sends the request
    without credentials. Installed on the root logger for a connection's life, this keeps the
    failure instead, so the server's 401 can say why (`last`, "" once a request succeeds)."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.funcName != "_load_from_exec_plugin":
            return True
        self.last = record.getMessage().strip()
        return False

    def install(self) -> ExecFailures:
        logging.getLogger().addFilter(self)
        return self

    def uninstall(self) -> None:
        logging.getLogger().removeFilter(self)


@dataclass(frozen=True)
class Source:
    paths: tuple[str, ...]
    in_cluster: bool = False


def resolve_source(kubeconfig: str | None, env: dict[str, str] | None = None) -> Source:
    """Which kubeconfig files to read (or in-cluster), in kubectl's order of precedence."""
    environ = dict(os.environ) if env is None else env
    if kubeconfig:
        path = os.path.expanduser(kubeconfig)
        if not os.path.isfile(path):
            raise UsageError(f"The kubeconfig file {kubeconfig} does not exist or is not a file.",
                             "pass the path of an existing kubeconfig with --kubeconfig")
        return Source((path,))
    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths = tuple(os.path.expanduser(p) for p in listed.split(os.pathsep) if p)
        present = tuple(p for p in paths if os.path.isfile(p))
        if not present:
            raise UsageError(f"None of the files in KUBECONFIG ({listed}) exists.",
                             "fix or unset KUBECONFIG, or pass --kubeconfig")
        return Source(present)
    home = Path(environ.get("HOME") or os.path.expanduser("~")) / ".kube" / "config"
    if home.is_file():
        return Source((str(home),))
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return Source((), in_cluster=True)
    raise UsageError(f"No kubeconfig found: {home} does not exist, KUBECONFIG is not set and "
                     "this is not running inside a cluster.", _HINT)


def _merged(source: Source, where: str) -> KubeConfigMerger:
    """The files merged by the client (a name's first entry wins, as in kubectl)."""
    try:
        merger = KubeConfigMerger(os.pathsep.join(source.paths))  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise UsageError(f"Cannot read the kubeconfig file {exc.filename or where}: "
                         f"{exc.strerror or exc}.", _HINT) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        name = mark.name if mark is not None and mark.name in source.paths else where
        # `from None`: the YAML error quotes the offending line, which may hold a token.
        raise UsageError(f"The kubeconfig file {name} is not valid YAML{line}.", _HINT) from None
    except ConfigException:
        raise UsageError(f"The kubeconfig {where} is empty.", _HINT) from None
    except (AttributeError, TypeError, KeyError):
        raise UsageError(f"The kubeconfig {where} is not a kubeconfig (not a mapping, or an "
                         "entry without a name).", _HINT) from None
    return merger


def _context(merger: KubeConfigMerger, where: str, context: str | None) -> str:
    """The context to use (else the first file's current-context, as kubectl); UsageError when
    it is unknown or none is set."""
    config = merger.config.value if merger.config is not None else {}
    names = [str(entry["name"]) for entry in config.get("contexts") or []]
    current = next((str(doc["current-context"]) for doc in merger.config_files.values()
                    if isinstance(doc, dict) and doc.get("current-context")), "")
    wanted = context or current
    if not names:
        raise UsageError(f"The kubeconfig {where} defines no contexts.", _HINT)
    if not wanted:
        raise UsageError(f"The kubeconfig {where} has no current-context and no --context was "
                         "given.", f"pass --context (one of: {', '.join(names)})")
    if wanted not in names:
        raise UsageError(f"Context {wanted!r} is not defined in the kubeconfig {where}.",
                         f"pass --context with one of: {', '.join(names)}")
    return wanted


def _configuration(host: str | None = None) -> Any:
    """A client Configuration given its proxy (none), so it takes none from the environment by
    Python's rules whatever the loader sets first: only a cluster's `proxy-url` sets one, else
    `_finished` picks kubectl's. No urllib3 retries (transport.py retries)."""
    return Configuration(host=host, proxy="", no_proxy="", retries=False)


def _finished(configuration: Any) -> Any:
    """With kubectl's proxy (the client's own `no_proxy` matching is not Go's: left empty) and
    POOLED connections at least."""
    configuration.proxy, configuration.proxy_headers = client_proxy(
        configuration.proxy or proxy_for(configuration.host, os.environ))
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0,
                                                POOLED)
    return configuration


def load(kubeconfig: str | None = None, context: str | None = None) -> tuple[Any, str]:
    """The client Configuration and the context's name ("in-cluster" for the service account)."""
    source = resolve_source(kubeconfig)
    configuration = _configuration()
    if source.in_cluster:
        if context:
            raise UsageError(f"--context {context} was given but no kubeconfig exists "
                             "(running in-cluster).", _HINT)
        try:
            load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration, try_refresh_token=True)
        except ConfigException as exc:
            raise UsageError(f"Cannot use the in-cluster service account: {exc}.",
                             _HINT) from None
        return _finished(configuration), "in-cluster"
    where = ", ".join(source.paths)
    merger = _merged(source, where)
    chosen = _context(merger, where, context)
    try:
        # As load_kube_config: paths relative to each file, refreshed auth written back.
        loader = KubeConfigLoader(  # type: ignore[no-untyped-call]
            config_dict=merger.config, active_context=chosen, config_base_path=None,
            config_persister=merger.save_changes)
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise UsageError(f"The kubeconfig {where} is invalid for context "
                         f"{chosen!r}: {exc}.", _HINT) from None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # Malformed entries: name the type only, values may be credentials.
        raise UsageError(f"The kubeconfig {where} is malformed for context "
                         f"{chosen!r} ({type(exc).__name__}).", _HINT) from None
    return _finished(configuration), chosen


def for_server(url: str, token: str | None = None) -> Any:
    """A bare URL with an optional bearer token (the simulated cluster, tests)."""
    configuration = _configuration(url.rstrip("/"))
    if token:
        configuration.api_key["BearerToken"] = f"Bearer {token}"  # as the loader sets it
    return _finished(configuration)


DEFAULT_PORTS = {"http": "80", "https": "443"}
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _env(environ: Mapping[str, str], name: str) -> str:
    """Go's `getEnvAny(NAME, name)`: the upper-case variable, else the lower-case one."""
    return environ.get(name.upper()) or environ.get(name.lower()) or ""


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _no_proxy_matches(entry: str, host: str, port: str, ip: Address | None) -> bool:
    """One NO_PROXY entry against the server (httpproxy's cidrMatch, ipMatch, domainMatch)."""
    if "/" in entry:
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            pass
        else:
            return ip is not None and ip in network
    entry_host, entry_port = entry, ""
    if entry.startswith("["):  # [IPv6]:port
        entry_host, _, rest = entry[1:].partition("]")
        entry_port = rest.removeprefix(":")
    elif entry.count(":") == 1:  # host:port or IPv4:port (an IPv6 address has more colons)
        entry_host, entry_port = entry.split(":")
    if not entry_host:
        return False
    entry_ip = _address(entry_host)
    if entry_ip is not None:
        return ip is not None and ip == entry_ip and entry_port in ("", port)
    if entry_host.startswith("*."):
        entry_host = entry_host[1:]
    match_host = not entry_host.startswith(".")
    suffix = entry_host if not match_host else f".{entry_host}"
    if host.endswith(suffix) or (match_host and host == suffix[1:]):
        return entry_port in ("", port)
    return False


def proxy_for(server: str, environ: Mapping[str, str]) -> str | None:
    """The proxy URL kubectl would send requests to `server` through, or None for direct."""
    parts = urlsplit(server)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        return None
    proxy = _env(environ, f"{scheme}_proxy") or None
    if proxy and not (urlsplit(proxy).scheme in ("http", "https", "socks5") and "://" in proxy):
        proxy = f"http://{proxy}"  # Go's `parseProxy`: `proxy.corp:3128` is http://proxy.corp:3128
    if scheme == "http" and environ.get("REQUEST_METHOD"):
        proxy = None  # Go ignores HTTP_PROXY in a CGI environment (golang.org/s/cgihttpproxy)
    host = (parts.hostname or "").lower()
    if proxy is None or not host:
        return None
    ip = _address(host)
    if host == "localhost" or (ip is not None and ip.is_loopback):
        return None
    try:
        port = str(parts.port or DEFAULT_PORTS[scheme])
    except ValueError:
        return None
    for raw in _env(environ, "no_proxy").split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return None
        if entry and _no_proxy_matches(entry, host, port, ip):
            return None
    return proxy


def client_proxy(proxy: str | None) -> tuple[str | None, dict[str, str] | None]:
    """`proxy` as urllib3 takes it: the URL and headers (credentials as Basic
    `Proxy-Authorization`, as Go). SOCKS5 resolves names at the proxy (`socks5h`, as Go) and needs
    the optional PySocks: without it, a UsageError before any request."""
    if proxy is None:
        return None, None
    parts = urlsplit(proxy)
    address = parts.netloc.rpartition("@")[2]  # host and port: what may be shown
    if parts.scheme.lower() == "socks5":
        if importlib.util.find_spec("socks") is None:
            raise UsageError(f"The proxy socks5://{address} is a SOCKS5 proxy, and the SOCKS "
                             "support it needs (PySocks) is not installed beside the tool.",
                             "install it: pip install 'dcgm-migrate[socks]' (with pipx: pipx "
                             "inject dcgm-migrate PySocks)")
        return parts._replace(scheme="socks5h").geturl(), None
    if parts.username is None:
        return proxy, None
    credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    return parts._replace(netloc=address).geturl(), make_headers(proxy_basic_auth=credentials)
