"""The sim's API server reads a request's head itself (dcgm_sim/httphead.py, without the email
parser): over a raw socket it answers as the standard library's server does: a bad request line
400, a header line over 64 KiB or more than 99 fields 431, keep-alive on HTTP/1.1 and a close
on HTTP/1.0, `Connection: close` honoured, a body read by its Content-Length."""

from __future__ import annotations

import re
import socket
from urllib.parse import urlsplit

from dcgm_sim.cluster import SimCluster


def _exchange(sim: SimCluster, *requests: bytes) -> bytes:
    """Send `requests` on one connection; everything the server answers until it closes (or
    goes quiet for a second)."""
    where = urlsplit(sim.url)
    with socket.create_connection((where.hostname, where.port), timeout=5) as conn:
        conn.settimeout(1.0)
        for request in requests:
            conn.sendall(request)
        out = b""
        try:
            while chunk := conn.recv(65536):
                out += chunk
        except TimeoutError:
            pass
    return out


def _codes(answer: bytes) -> list[int]:
    """The status of each answer (a body is not followed by a line break)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.[01] (\d{3}) ", answer)]


GET = b"GET /version HTTP/1.1\r\nHost: sim\r\n"


def test_a_bad_request_line_is_answered_400(sim: SimCluster) -> None:
    assert _codes(_exchange(sim, b"GET /version extra HTTP/1.1\r\n\r\n")) == [400]
    assert _exchange(sim, b"NONSENSE\r\n\r\n").startswith(b"<!DOCTYPE")  # HTTP/0.9: no status


def test_heads_over_the_limits_are_answered_431(sim: SimCluster) -> None:
    many = b"".join(b"X-Field-%d: %d\r\n" % (i, i) for i in range(101))
    assert _codes(_exchange(sim, GET + many + b"\r\n")) == [431]
    long = b"X-Long: " + b"a" * 70000 + b"\r\n"
    assert _codes(_exchange(sim, GET + long + b"\r\n")) == [431]
    # the standard library counts the blank line that ends the fields: 99 fields at most
    fields = b"".join(b"X-Field-%d: %d\r\n" % (i, i) for i in range(97))  # + Host, Connection
    assert _codes(_exchange(sim, GET + fields + b"Connection: close\r\n\r\n")) == [200]
    assert _codes(_exchange(sim, GET + fields + b"X-A: 1\r\nX-B: 2\r\n\r\n")) == [431]


def test_keep_alive_close_and_a_body(sim: SimCluster) -> None:
    assert _codes(_exchange(sim, GET + b"\r\n", GET + b"\r\n")) == [200, 200]  # one connection
    assert _codes(_exchange(sim, b"GET /version HTTP/1.0\r\n\r\n", GET + b"\r\n")) == [200]
    assert _codes(_exchange(sim, GET + b"Connection: close\r\n\r\n", GET + b"\r\n")) == [200]
    body = b'{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1",' \
           b'"spec":{"resourceAttributes":{"verb":"get","resource":"pods"}}}'
    post = (b"POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews HTTP/1.1\r\n"
            b"Host: sim\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(body), body))
    answer = _exchange(sim, post, GET + b"Connection: close\r\n\r\n")
    assert _codes(answer) == [201, 200] and b'"allowed":true' in answer, answer[:600]
