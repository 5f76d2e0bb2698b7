"""The guard's one HTTP port: `/metrics` (Prometheus text), `/healthz` and `/readyz` (probes).

controller-runtime serves metrics on `--metrics-bind-address` and probes on a second port;
here one port serves both (docs/guard.yaml names it `metrics`), so the pod declares one
container port and one NetworkPolicy hole. `/metrics` is `prometheus_client`'s own WSGI app
over the guard's registry (no hand-written exposition); the probes answer 200 or 503 with one
line saying why. The server is the client's threading WSGI server on daemon threads: a scrape
never holds up the loop, and nothing outlives `close`.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from migrator.engine.health import Health
from migrator.errors import UsageError

StartResponse = Callable[..., Any]


def parse_address(text: str) -> tuple[str, int] | None:
    """`[HOST]:PORT` as controller-runtime's `--metrics-bind-address` takes it (`:8080` binds
    every address, `127.0.0.1:0` a free loopback port, `[::1]:8080` IPv6); "0" turns serving
    off (None). ValueError for anything else."""
    text = text.strip()
    if text == "0":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not [HOST]:PORT (for example :8080 or 127.0.0.1:8080)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)


class _Quiet(WSGIRequestHandler):
    """No access log on stderr: the guard's log is one line per decision, and a scrape or a
    probe every few seconds is not one."""

    def log_message(self, format: str, *args: Any) -> None:
        return


def cannot_serve(address: tuple[str, int], exc: OSError,
                 option: str = "--metrics-bind-address") -> UsageError:
    """The address cannot be bound (in use, a privileged port, no such local address): said
    with the address and the option (`option`, the one the command line used) to pass
    instead, before the guard takes its Lease."""
    host, port = address
    shown = f"{f'[{host}]' if ':' in host else host or '0.0.0.0'}:{port}"
    why = {errno.EADDRINUSE: "another process already listens on that port",
           errno.EACCES: "ports below 1024 need privileges this process lacks",
           errno.EADDRNOTAVAIL: "no network interface of this host has that address"}.get(
               exc.errno or 0, exc.strerror or str(exc))
    other = port + 1 if 0 < port < 65535 else 0
    value = str(other) if option == "--metrics-port" else f"{host}:{other}"
    held = (f" (`ss -ltnp 'sport = :{port}'` shows who holds it)"
            if exc.errno == errno.EADDRINUSE else "")
    return UsageError(f"Cannot serve /metrics, /healthz and /readyz on {shown}: {why} "
                      f"({exc.strerror}).", f"pass a free port, e.g. `{option} {value}`{held}")


class MetricsServer:
    """Serves one guard's registry and probes on (host, port) until `close`."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 health: Health) -> None:
        self.health = health
        self._metrics = make_wsgi_app(registry)
        try:
            self._httpd = make_server(address[0], address[1], self._app, ThreadingWSGIServer,
                                      handler_class=_Quiet)
        except OSError as exc:
            raise cannot_serve(address, exc) from exc
        self.host = address[0]
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="guard-metrics")
        self._thread.start()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return self._metrics(environ, start_response)  # type: ignore[no-any-return]
        if path in ("/healthz", "/livez"):
            ok, text = self.health.alive()
        elif path == "/readyz":
            ok, text = self.health.ready()
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: /metrics, /healthz, /readyz\n"]
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{text}\n".encode()]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
