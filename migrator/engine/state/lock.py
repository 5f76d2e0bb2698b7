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
RENEWED = "dcgm-migrate/lock-renewed"  # the holder's last renewal (absent before 0.2: acquired)
KEYS = (HOLDER, EXPIRES, ACQUIRED, RENEWED)

# A holder renews a quarter of the way through its lease (every 30 s of the standard 120 s): one
# that has not renewed for half of it has missed two renewals, so `unlock` does not count it as
# still renewing. A lock renewed more recently than this (and not expired) is refused by
# `unlock` without --force.
RENEWING_SECONDS = 60.0


@dataclass(frozen=True)
class Lock:
    """A lock this process holds. `taken_over_from` names the expired holder it replaced,
    `taken_over` is that lock as it was (when it expired, its last renewal)."""

    holder: str
    acquired: datetime
    expires: datetime
    ttl_seconds: float
    taken_over_from: str | None = None
    renewed: datetime | None = None  # None: never renewed (the acquisition)
    taken_over: LockInfo | None = None


@dataclass(frozen=True)
class LockInfo:
    """The lock as the annotations describe it (anyone's)."""

    holder: str
    acquired: str
    expires: datetime | None  # None: unreadable, treated as expired
    renewed: datetime | None = None  # the last renewal, else the acquisition (None: unreadable)

    def live(self, now: datetime) -> bool:
        return self.expires is not None and self.expires > now

    def renewing(self, now: datetime, within: float = RENEWING_SECONDS) -> bool:
        """Live, and renewed (or taken) within the last `within` seconds: its holder is running
        now. A live lock that stopped being renewed is a dead holder's, waiting to expire."""
        return self.live(now) and self.renewed is not None and (
            (now - self.renewed).total_seconds() <= within)


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
    acquired = annotations.get(ACQUIRED, "")
    renewed = parse_time(annotations.get(RENEWED)) or parse_time(acquired)
    return LockInfo(holder, acquired, parse_time(annotations.get(EXPIRES)), renewed)


def new_lock(holder: str, now: datetime, ttl_seconds: float, taken_over_from: str | None,
             taken_over: LockInfo | None = None) -> Lock:
    return Lock(holder, now, now + timedelta(seconds=ttl_seconds), ttl_seconds, taken_over_from,
                taken_over=taken_over)


def annotations_for(lock: Lock) -> dict[str, str]:
    return {
        HOLDER: lock.holder,
        ACQUIRED: format_time(lock.acquired),
        EXPIRES: format_time(lock.expires),
        RENEWED: format_time(lock.renewed or lock.acquired),
    }


def takeover_message(lock: Lock) -> str | None:
    """What a run says when its lock replaced another's (None: it did not). A lock is taken
    over only once it has expired (or its expiry cannot be read): never a live holder's."""
    if not lock.taken_over_from:
        return None
    old = lock.taken_over
    if old is None:
        return f"took over the expired lock of {lock.taken_over_from}"
    if old.expires is None:
        return (f"took over the lock of {lock.taken_over_from}, whose expiry could not be read "
                "(counted as expired)")
    renewed = f", last renewed {format_time(old.renewed)}" if old.renewed else ""
    return (f"took over the expired lock of {lock.taken_over_from} (expired "
            f"{format_time(old.expires)}{renewed}: not renewed since, so its run is gone)")


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
