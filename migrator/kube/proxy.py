"""Which HTTP proxy carries the requests to an API server: kubectl's answer, by Go's rules
(golang.org/x/net/http/httpproxy, unless the cluster sets `proxy-url`), which differ from
Python's `getproxies`: upper-case first, bare `host:port` is http, never loopback, NO_PROXY with
`*`, IPs, CIDRs (no name resolved), domains with subdomains (`*.`/`.`: only those), `host:port`.
"""

from __future__ import annotations

import importlib.util
import ipaddress
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from urllib3.util import make_headers

from migrator.errors import UsageError

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
