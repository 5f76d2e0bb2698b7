"""The simulated Kubernetes API server: plain HTTP/1.1 on loopback over the object `Store`.

The official `kubernetes` Python client and `kubectl` use it unchanged (bearer-token auth,
JSON only, chunked watch streams, keep-alive). This module is only the socket side: each
request becomes a `Request`, `dispatch` answers it, and the answer is written back and recorded
in the `RequestLog`.

    server = ApiServer(store)     # faults=Faults(...), log=RequestLog(), access=AccessControl(),
                                  # bookmark_seconds=60 (a watch's periodic BOOKMARK)
    url = server.start()          # http://127.0.0.1:PORT
    ...                           # Authorization: Bearer sim-admin-token (ADMIN_TOKEN)
    server.stop()                 # closes sockets and ends watches

Module map: `routing` (path -> verb/resource), `dispatch` (authn, RBAC, faults), `handlers`
(verbs), `writes` (create/update/patch/delete with admission, usable without HTTP), `admission`
+ `allocation` (defaults, validation, clusterIP/nodePort), `patching`, `watching`,
`fieldselectors`, `discovery`, `tables` (kubectl columns), `statuses` (Status errors),
`eventsapi` (events.k8s.io/v1 over core Events),
`access`, `faults`, `requestlog`, `simendpoints` (`/sim/v1`), `openapi` (OpenAPI documents,
`fieldValidation`), `protobuf` (the SSAR and ConfigMap bodies kubectl sends), `finalizers`
(finalizer rules of deletes and updates), `apilatency` (opt-in, `model_writes`: each write
takes a real API server's few milliseconds of simulated time, not the sim's own handling time).

Where the sim knowingly differs from a real API server:
- The main listener is plain HTTP, so kubectl (client-go) sends no credentials there: a request
  without a token is served as `system:unsecured` with full access unless
  `AccessControl(allow_unauthenticated=False)`. `start_tls` adds an HTTPS listener (self-signed
  certificate, `tls`) where kubectl sends its kubeconfig's token and impersonation headers.
- JSON only: protobuf request bodies are 415, except the SelfSubjectAccessReview of
  `kubectl auth can-i` and the ConfigMap of `kubectl create configmap` (`protobuf.py`).
- OpenAPI (`openapi`): `/openapi/v3` and `/openapi/v2` (JSON only; a protobuf-only Accept is
  406) describe the served kinds from a compact field table, not upstream's full schemas:
  DaemonSet, Deployment, Job, CronJob, the pod template, Pod, Service, ConfigMap, Namespace,
  ServiceAccount and the four RBAC kinds with their field names
  (nested objects the project does not use, statuses and every other kind are
  `x-kubernetes-preserve-unknown-fields`), without field descriptions. `fieldValidation=Strict`
  (kubectl's default) refuses an unknown field of those (400, upstream's `strict decoding error:
  unknown field "spec.foo"`; a patch is checked as sent, not as merged), `Warn` answers a
  `Warning` header; with no `fieldValidation` nothing is checked (upstream warns). PATCH
  operations list no strategic merge patch, so `kubectl apply` builds it from its compiled-in
  types. Server-side apply (`application/apply-patch+yaml`) is 415. kubectl v1.32 sends
  `Accept: application/json, */*` for `/openapi/v3` and `application/json` for its group
  versions, but only `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` for
  `/openapi/v2` (upstream kube-openapi `handler.go` negotiates JSON and both protobuf spellings
  with goautoneg and serves the gnostic protobuf); it asks v2 only when a kind is missing from
  `/openapi/v3` (the `fieldValidation` verifier's fallback: applying a kind the sim does not
  serve ends in "failed to download openapi", not upstream's "no matches for kind") and, without
  consequence, when `apply` looks for a strategic-merge PATCH before its compiled-in types.
- Stored-only kinds (`kinds.STORED_ONLY`): ServiceAccount, Role, RoleBinding, ClusterRole,
  ClusterRoleBinding and CronJob are kept, listed, watched, printed and defaulted
  (`admission`) with no controller behind them: a CronJob makes no Job; no token for a
  ServiceAccount; no `deployments/scale`, `replicasets/scale`, `serviceaccounts/token`
  subresources. Stored RBAC objects are what the authorizer reads at every request
  (`rbac`, `access`; the bootstrap roles are built into it). Deployments, ReplicaSets and
  Jobs have their controllers (`kinds.WORKLOADS`; what they leave out is in each
  controller's module docstring).
- Later pages of a paginated list read the live store, not a snapshot of the first page's
  resourceVersion (no item is returned twice; one created or deleted meanwhile may or may not
  appear). One event window (`Store.event_log_size`, `sim serve --watch-window`) stands for
  both the watch cache's window and etcd's compaction: a watch, a continue token or an exact
  list (`resourceVersionMatch=Exact`, or a version with `limit`) older than it is 410 Expired;
  otherwise `resourceVersion`/`resourceVersionMatch` on a list are ignored (the latest state).
- Watch bookmarks (`watching`): `allowWatchBookmarks=true` gets a BOOKMARK every
  `bookmark_seconds` (60 real seconds; a `SimCluster`'s are 60 simulated seconds) and one when
  `timeoutSeconds` ends the watch; upstream's come about once a minute and shortly before the
  deadline.
- Deletion follows the API server and garbage collector (`finalizers`, `writes.delete`,
  `controllers/garbage.py`): a DELETE of an object with finalizers marks it
  (`deletionTimestamp`, Terminating) until an update removes the last one; Orphan and
  Foreground propagation work through the `orphan` and `foregroundDeletion` finalizers,
  Background is the default; pods are marked for graceful deletion (the simulated kubelet
  removes them). What differs: there is no namespace controller, so a DELETE of a Namespace
  removes it at once (its `spec.finalizers` are not waited for) and leaves its contents.
- Custom resources (nvidia.com, monitoring.coreos.com, PrometheusRule included) are stored
  without schema validation.
- `events.k8s.io/v1` Events are the core/v1 Events under a second version, converted at the edge
  (`eventsapi`, as upstream's one storage with two versions); no event TTL (upstream's one
  hour) and no `kubectl events` table columns beyond the core kind's.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dcgm_sim import httphead, rbac
from dcgm_sim.access import ADMIN_TOKEN, AccessControl
from dcgm_sim.apilatency import WriteLatency
from dcgm_sim.dispatch import Audit, dispatch
from dcgm_sim.encoding import ObjectEncoder, dumps
from dcgm_sim.exchange import Backend, OperatorControl, Request, Response
from dcgm_sim.faults import Faults
from dcgm_sim.requestlog import RequestLog, RequestRecord
from dcgm_sim.statuses import internal_error
from dcgm_sim.store import Store

__all__ = ["ADMIN_TOKEN", "ApiServer"]

_log = logging.getLogger(__name__)


class ApiServer:
    """HTTP front of a `Store`; `faults`, `log` and `access` may be shared or inspected."""

    def __init__(self, store: Store, *, faults: Faults | None = None,
                 log: RequestLog | None = None, access: AccessControl | None = None,
                 bookmark_seconds: float = 60.0, release: str = "v1.32") -> None:
        self.store = store
        self.faults = faults if faults is not None else Faults()
        self.log = log if log is not None else RequestLog()
        self.access = access if access is not None else AccessControl()
        self.access.attach(rbac.StoreAuthorizer(store))
        self.url = ""
        self._stopping = threading.Event()
        self._encoder = ObjectEncoder(release=release)  # encoding.RELEASES
        self._backend = Backend(store, self.faults, self.log, self.access, self._encoder,
                                self._stopping, bookmark_seconds=bookmark_seconds)
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.secure_url = ""
        self._secure: tuple[_HTTPServer, threading.Thread] | None = None
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()

    def attach_operator(self, control: OperatorControl | None) -> None:
        """Serve `/sim/v1/operator` for this GPU Operator imitation (None: 404)."""
        self._backend.operator = control

    def model_writes(self, latency: WriteLatency | None) -> None:
        """Answer every write in a real API server's time instead of the sim's own
        (`apilatency.py`; None: the sim's own time again)."""
        self._backend.write_latency = latency

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen and serve in a daemon thread; returns the base URL."""
        if self._httpd is not None:
            return self.url
        self._stopping.clear()
        self.store.subscribe(self._encoder.on_event)
        httpd = _HTTPServer((host, port), _Handler)
        httpd.api = self
        self._httpd = httpd
        bound_host, bound_port = httpd.server_address[:2]
        address = f"{bound_host!s}:{bound_port}"
        self._backend.address = address
        self.url = f"http://{address}"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"sim-api-{bound_port}", daemon=True)
        self._thread.start()
        return self.url

    def start_tls(self, context: ssl.SSLContext, host: str = "127.0.0.1", port: int = 0) -> str:
        """A second listener, HTTPS, on the same store and access control (after `start`);
        returns its URL. kubectl sends a kubeconfig's token only to an https server (`tls`)."""
        if self._secure is not None:
            return self.secure_url
        if self._httpd is None:
            raise RuntimeError("start() the API server before its TLS listener")
        httpd = _TLSServer((host, port), _Handler)
        httpd.api = self
        httpd.context = context
        bound_host, bound_port = httpd.server_address[:2]
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                  name=f"sim-api-tls-{bound_port}", daemon=True)
        thread.start()
        self._secure = (httpd, thread)
        self.secure_url = f"https://{bound_host!s}:{bound_port}"
        return self.secure_url

    def stop(self) -> None:
        """Stop accepting, end every watch, close every connection."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        self.store.unsubscribe(self._encoder.on_event)
        self.store.wake_all()
        httpd.shutdown()
        httpd.server_close()
        secure, self._secure = self._secure, None
        if secure is not None:
            secure[0].shutdown()
            secure[0].server_close()
            secure[1].join(timeout=5)
            self.secure_url = ""
        with self._conn_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ApiServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ---- used by the handler ------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        return self._backend

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._conn_lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    api: ApiServer

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket],
                     client_address: object) -> None:
        """A client gone mid-request (a killed CLI resets its connections) is its own business,
        as on a real API server; anything else is the sim's fault, printed with its traceback."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _TLSServer(_HTTPServer):
    """The HTTPS listener: the TLS handshake runs in the connection's own thread (`setup`),
    so a slow or broken client cannot stall `accept`."""

    context: ssl.SSLContext

    def get_request(self) -> tuple[socket.socket, object]:
        conn, address = super().get_request()
        return self.context.wrap_socket(conn, server_side=True,
                                        do_handshake_on_connect=False), address

    def handle_error(self, request: object, client_address: object) -> None:
        """A failed handshake (a client that does not trust the certificate) is the client's
        business, not a traceback on the server's stderr."""


def _client_gone(conn: socket.socket) -> bool:
    """True when the peer closed its end (readable with nothing to read)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return False
        if isinstance(conn, ssl.SSLSocket):
            return _tls_peer_closed(conn)
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _tls_peer_closed(conn: ssl.SSLSocket) -> bool:
    """TLS cannot peek: read without blocking. A watch client sends nothing after its request,
    so what arrives is a close (b"") or TLS housekeeping (no application data)."""
    timeout = conn.gettimeout()
    conn.settimeout(0)
    try:
        return conn.recv(1) == b""
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
        return False
    finally:
        conn.settimeout(timeout)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dcgm-migrate-sim"
    sys_version = ""
    timeout = 300  # seconds an idle keep-alive connection may wait for its next request
    server: _HTTPServer
    raw_requestline: bytes  # set by `handle_one_request` before `parse_request`

    def setup(self) -> None:
        super().setup()
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # raises (untracked, closed) for a refused client
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.api.track(self.connection, True)

    def finish(self) -> None:
        self.server.api.track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: object) -> None:
        """Silence: every request is recorded in the RequestLog instead."""

    def parse_request(self) -> bool:
        """The standard library's, its head read by `httphead` (without the email parser)."""
        self.command, self.close_connection = None, True  # type: ignore[assignment]
        self.request_version = self.default_request_version
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        line = httphead.request_line(self.requestline)
        if isinstance(line, str):
            self.request_version = line
            if self.requestline.strip():
                self.send_error(HTTPStatus.BAD_REQUEST,
                                f"Bad request syntax ({self.requestline!r})")
            return False
        self.command, self.path, self.request_version = line.command, line.path, line.version
        try:
            self.headers = httphead.header_fields(self.rfile)
        except httphead.TooLarge as err:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, str(err))
            return False
        connection = (self.headers.get("Connection") or "").lower()
        self.close_connection = connection == "close" or (
            line.version == "HTTP/1.0" and connection != "keep-alive")
        if (self.headers.get("Expect") or "").lower() == "100-continue" \
                and line.version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _serve(self) -> None:
        started = time.monotonic()
        api = self.server.api
        headers: dict[str, str] = {}
        for name, value in self.headers.items():  # a repeated header: one comma-joined value
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        request = Request(self.command, self.path, headers, self._read_body())
        try:
            response, audit = dispatch(api.backend, request)
        except Exception as e:  # a bug in the sim must still answer like an API server
            _log.exception("sim API server failed on %s %s", self.command, self.path)
            error = internal_error(f"{type(e).__name__}: {e}")
            response, audit = Response(500, dumps(error.status())), None
        # Recorded before the answer leaves, so a client that reads the log right after its
        # call finds it there; a watch is recorded as it opens and completed when it ends.
        record = None
        if audit is not None:
            sent = 0 if self.command == "HEAD" or response.stream else len(response.body)
            record = self._record(api.log, audit, response.code, sent, started,
                                  response.stream is not None)

        def finish_stream(sent: int) -> None:
            if record is not None:
                api.log.finish(record.seq, bytes_sent=sent,
                               duration_ms=round((time.monotonic() - started) * 1000, 3))

        try:
            self._write(response, finish_stream)
        except OSError:  # the client went away
            self.close_connection = True

    def _write(self, response: Response, on_stream_end: Callable[[int], None]) -> None:
        self.send_response(response.code, HTTPStatus(response.code).phrase)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in response.headers.items():
            self.send_header(name, value)
        if response.stream is None:
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._write_stream(response, on_stream_end)

    def _write_stream(self, response: Response, on_end: Callable[[int], None]) -> None:
        """Chunk out a watch; `on_end(bytes)` runs before the last chunk, so a client that has
        read the whole stream finds the request's record complete."""
        assert response.stream is not None
        sent = 0
        ended = False
        try:
            for chunk in response.stream:
                if chunk is None:
                    if _client_gone(self.connection):
                        self.close_connection = True
                        break
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            else:
                ended = True
                on_end(sent)
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            close = getattr(response.stream, "close", None)
            if close is not None:
                close()
            if not ended:
                on_end(sent)

    def _record(self, log: RequestLog, audit: Audit, code: int, sent: int,
                started: float, stream: bool) -> RequestRecord:
        info = audit.info
        return log.record(
            method=info.method, path=info.path, query=info.raw_query, verb=info.verb,
            group=info.group, version=info.version, resource=info.resource,
            subresource=info.subresource, namespace=info.namespace, name=info.name, code=code,
            dry_run=audit.dry_run, bytes_sent=sent, user=audit.user,
            duration_ms=round((time.monotonic() - started) * 1000, 3), open=stream,
            held_answer=audit.held_answer,
        )
