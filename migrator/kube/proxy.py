"""Which HTTP proxy carries the requests to an API server: kubectl's answer, from the environment.

client-go's transport takes its proxy from Go's `http.ProxyFromEnvironment`
(golang.org/x/net/http/httpproxy, `FromEnvironment` and `config.proxyForURL`), wrapped by
apimachinery's `utilnet.NewProxierWithNoProxyCIDR`; a kubeconfig cluster's `proxy-url` replaces
it (client-go `rest.Config.Proxy`), and then `NO_PROXY` plays no part. The official Python client
reads the environment too, by Python's rules (`urllib.request.getproxies`: lower-case first,
`ALL_PROXY` as a fallback, loopback proxied), which kubectl does not share; so the connection
takes its proxy from here and tells the client nothing else (config.py). Go's rules:

- `HTTPS_PROXY` for an https server, `HTTP_PROXY` for an http one; each upper-case first, then
  lower-case (the first that is set and not empty); no `ALL_PROXY`. A value without a scheme
  Go takes as `http://`.
- Never for `localhost` or a loopback address.
- `NO_PROXY` (else `no_proxy`), comma-separated: `*` for every server; an IP address, or a CIDR,
  matches a server given by address (no name is resolved); a domain matches itself and its
  subdomains (`*.` and a leading `.` only its subdomains); `host:port` only that port.

A proxy URL's credentials are sent as Go sends them, and a SOCKS5 proxy (`socks5://`, as
`ssh -D` makes one to reach a private API server) is handed the server's name to resolve, as
Go's SOCKS dialer does (`client_proxy`).
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


def _parse_proxy(value: str) -> str | None:
    """Go's `parseProxy`: a value that does not parse as an http, https or socks5 URL is
    tried again with `http://` in front (`proxy.corp:3128` means `http://proxy.corp:3128`)."""
    if not value:
        return None
    if urlsplit(value).scheme in ("http", "https", "socks5") and "://" in value:
        return value
    return f"http://{value}"


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _no_proxy_matches(entry: str, host: str, port: str, ip: Address | None) -> bool:
    """One NO_PROXY entry against the server's host and port (httpproxy's `config.init` and
    its `cidrMatch`, `ipMatch`, `domainMatch`)."""
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
    proxy = _parse_proxy(_env(environ, f"{scheme}_proxy"))
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
    """`proxy` as the official client's urllib3 must be told it: the URL and the headers for
    the proxy.

    - Credentials in an http(s) proxy's URL go as Basic `Proxy-Authorization`, decoded, as Go's
      transport sends them (`connectMethod.proxyAuth`); urllib3 ignores them in the URL.
    - kubectl hands a SOCKS5 proxy the server's host name to resolve: Go's SOCKS dialer never
      resolves it itself (golang.org/x/net, internal/socks/client.go `connect`: a name goes as
      an FQDN address). urllib3 does that for `socks5h://`; for `socks5://` it resolves the
      name here, which fails where only the far side of a tunnel knows it. urllib3 speaks SOCKS
      (credentials included) through PySocks, an optional dependency
      (`dcgm-migrate[socks]`): without it, one sentence and the fix, before any request."""
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
