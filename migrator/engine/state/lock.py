"""The run lock's data: who holds it, since when, until when — as ConfigMap annotations.

Pure helpers (plus `default_holder`, which names this process) used by the state store, which
takes, renews and releases the lock with resourceVersion-guarded writes.

The lock is a lease: its holder is alive for as long as it keeps renewing it (the expiry stays
in the future), and a lock that has expired is anyone's to take over. Nothing looks at the
holder's process: a run killed on this very host holds its lock until it expires, TTL seconds
after its last renewal, or until `dcgm-migrate unlock` removes it.
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

HOLDER = "dcgm-migrate/lock-holder"
EXPIRES = "dcgm-migrate/lock-expires"
ACQUIRED = "dcgm-migrate/lock-acquired"
KEYS = (HOLDER, EXPIRES, ACQUIRED)


@dataclass(frozen=True)
class Lock:
    """A lock this process holds. `taken_over_from` names the expired holder it replaced."""

    holder: str
    acquired: datetime
    expires: datetime
    ttl_seconds: float
    taken_over_from: str | None = None


@dataclass(frozen=True)
class LockInfo:
    """The lock as the annotations describe it (anyone's)."""

    holder: str
    acquired: str
    expires: datetime | None  # None: unreadable, treated as expired

    def live(self, now: datetime) -> bool:
        return self.expires is not None and self.expires > now


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC; fractional seconds only when there are some."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond:06d}"
    return text + "Z"


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def read(annotations: dict[str, str] | None) -> LockInfo | None:
    """The lock recorded in these annotations, or None when nobody holds it."""
    annotations = annotations or {}
    holder = annotations.get(HOLDER)
    if not holder:
        return None
    return LockInfo(holder, annotations.get(ACQUIRED, ""), parse_time(annotations.get(EXPIRES)))


def new_lock(holder: str, now: datetime, ttl_seconds: float, taken_over_from: str | None) -> Lock:
    return Lock(holder, now, now + timedelta(seconds=ttl_seconds), ttl_seconds, taken_over_from)


def annotations_for(lock: Lock) -> dict[str, str]:
    return {
        HOLDER: lock.holder,
        ACQUIRED: format_time(lock.acquired),
        EXPIRES: format_time(lock.expires),
    }


def is_ours(info: LockInfo | None, lock: Lock) -> bool:
    """Same holder and same acquisition: a holder string alone could be reused."""
    return info is not None and info.holder == lock.holder and (
        info.acquired == format_time(lock.acquired)
    )


def default_holder() -> str:
    """`user@host pid N`: enough for a human to find the run (never a secret)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"
