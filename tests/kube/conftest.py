"""A scripted HTTP server for the kube client's unit tests: real HTTP, canned answers.

Used where the simulated cluster cannot be made to answer exactly one way (a 429 with a given
Retry-After, then a 201, ...). Each request is recorded with its method, path, query, headers
and body.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from dcgm_sim.server import ApiServer
from dcgm_sim.store import Store
from migrator.model import kinds


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


Answer = tuple[int, dict[str, str], Any]  # status, headers, JSON body (or bytes)


@dataclass
class Stub:
    url: str = ""
    answers: list[Answer] = field(default_factory=list)
    handler: Callable[[Recorded], Answer] | None = None
    requests: list[Recorded] = field(default_factory=list)

    def script(self, *answers: Answer) -> None:
        self.answers.extend(answers)


@pytest.fixture
def stub() -> Iterator[Stub]:
    state = Stub()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as two writes: without NODELAY, Nagle + delayed ACK
            # add 40 ms to every answer.
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            rec = Recorded(
                self.command, parts.path, parse_qs(parts.query),
                {k.lower(): v for k, v in self.headers.items()},
                json.loads(raw) if raw else None,
            )
            with lock:
                state.requests.append(rec)
                if state.handler is not None:
                    code, headers, body = state.handler(rec)
                elif state.answers:
                    code, headers, body = state.answers.pop(0)
                else:
                    code, headers, body = 500, {}, {"kind": "Status", "code": 500,
                                                    "message": "unscripted request"}
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def api() -> Iterator[Any]:
    """The simulated API server on an empty store with namespace `ns`, stopped at teardown."""
    store = Store()
    store.create(kinds.NAMESPACE, {"metadata": {"name": "ns"}})
    server = ApiServer(store)
    server.start()
    yield server
    server.stop()
