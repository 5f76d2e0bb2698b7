"""A request's head read off the connection for the sim's API server: the request line checked
as `BaseHTTPRequestHandler.parse_request` checks it (Python 3.11), and the header fields read as
`http.client.parse_headers` reads them, without the email parser it hands them to. That parser
cost more CPU than the rest of a request, and every request of every test crosses it. The
same limits: a line over 64 KiB, or over 100 lines with the blank one, is refused (431)."""

from __future__ import annotations

from dataclasses import dataclass
from http.client import HTTPMessage
from typing import Protocol

MAX_LINE = 65536  # http.client's _MAXLINE
MAX_FIELDS = 100  # http.client's _MAXHEADERS
VERSIONS = ("HTTP/1.0", "HTTP/1.1")


class Lines(Protocol):
    def readline(self, limit: int = -1, /) -> bytes: ...


class TooLarge(Exception):
    """The head is over a limit: answered 431, as the standard library does."""


@dataclass(frozen=True)
class RequestLine:
    command: str
    path: str
    version: str


def request_line(text: str) -> RequestLine | str:
    """`METHOD PATH HTTP/1.x` (the line as the handler decoded it), the path's leading slashes
    reduced to one (the standard library's guard against open redirects). Anything else is
    answered 400, in the version returned instead: the line's last word when it is one, else
    HTTP/0.9 (no status line), as the standard library answers."""
    words = text.split()
    if len(words) != 3 or words[2] not in VERSIONS:
        return words[-1] if words and words[-1] in VERSIONS else "HTTP/0.9"
    command, path, version = words
    return RequestLine(command, "/" + path.lstrip("/") if path.startswith("//") else path,
                       version)


def header_fields(rfile: Lines) -> HTTPMessage:
    """The fields up to the blank line, in order (a repeated name kept twice, as the email
    parser keeps it); a line without a colon is skipped, as that parser records it only as a
    defect."""
    headers = HTTPMessage()
    count = 0
    while True:
        line = rfile.readline(MAX_LINE + 1)
        if len(line) > MAX_LINE:
            raise TooLarge("Line too long")
        count += 1  # the blank line that ends them counts, as in `http.client._read_headers`
        if count > MAX_FIELDS:
            raise TooLarge(f"got more than {MAX_FIELDS} headers")
        if line in (b"\r\n", b"\n", b""):
            return headers
        name, colon, value = line.decode("iso-8859-1").partition(":")
        if colon:
            headers.set_raw(name.strip(), value.strip())
