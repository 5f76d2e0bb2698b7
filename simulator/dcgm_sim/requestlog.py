"""Every API request the server answered, so tests can count calls and prove what was written.

Readable in process (`log.since()`, `log.writes()`) and over HTTP (`GET /sim/v1/requests?since=N`,
`DELETE /sim/v1/requests`). Records carry the caller's user name, never its token.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any

MUTATING_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# A create that answers a question writes nothing.
_NOT_STORED = ("selfsubjectaccessreviews", "subjectaccessreviews")


@dataclass(frozen=True)
class RequestRecord:
    """One answered request. A watch is recorded when its stream opens (`open` True, bytes so
    far 0) and the record is completed in place when the stream ends."""

    seq: int
    time: float
    method: str
    path: str
    query: str
    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    dry_run: bool
    bytes_sent: int
    user: str
    duration_ms: float
    open: bool = False
    held_answer: bool = False  # its answer was held back by the crash-test hook (faults.py)

    @property
    def is_write(self) -> bool:
        """A mutating request that succeeded and changed (or could have changed) the store."""
        return (self.verb in MUTATING_VERBS and not self.dry_run and self.code < 400
                and self.resource not in _NOT_STORED)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RequestLog:
    """A bounded, thread-safe, append-only list of `RequestRecord`s with increasing `seq`."""

    def __init__(self, max_records: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._records: deque[RequestRecord] = deque(maxlen=max_records)
        self._seq = 0

    def record(self, **fields: Any) -> RequestRecord:
        with self._lock:
            self._seq += 1
            rec = RequestRecord(seq=self._seq, time=fields.pop("time", time.time()), **fields)
            self._records.append(rec)
            return rec

    def finish(self, seq: int, *, bytes_sent: int, duration_ms: float) -> None:
        """Complete the record of a stream (a watch) that has ended."""
        with self._lock:
            for i in range(len(self._records) - 1, -1, -1):
                rec = self._records[i]
                if rec.seq == seq:
                    self._records[i] = replace(rec, bytes_sent=bytes_sent,
                                               duration_ms=duration_ms, open=False)
                    return
                if rec.seq < seq:
                    return

    @property
    def last_seq(self) -> int:
        with self._lock:
            return self._seq

    def since(self, seq: int = 0) -> list[RequestRecord]:
        """Records with `seq` greater than the given one, oldest first."""
        with self._lock:
            return [r for r in self._records if r.seq > seq]

    def entries(self) -> list[RequestRecord]:
        """Every record still held, oldest first."""
        return self.since(0)

    def writes(self, since: int = 0) -> list[RequestRecord]:
        """Mutating, non-dry-run requests that succeeded ((Self)SubjectAccessReviews excluded)."""
        return [r for r in self.since(since) if r.is_write]

    def find(self, since: int = 0, **match: Any) -> list[RequestRecord]:
        """Records whose fields equal every `match` value, e.g. `find(verb="patch")`."""
        return [r for r in self.since(since)
                if all(getattr(r, k) == v for k, v in match.items())]

    def clear(self) -> None:
        """Forget the records (sequence numbers keep increasing)."""
        with self._lock:
            self._records.clear()
