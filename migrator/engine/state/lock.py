"""The run lock's data, as ConfigMap annotations: who holds it, since and until when, where it
runs. It is a lease (its holder counts as alive while the expiry stays in the future), and it
records where its holder runs (`Process`), so a run that can prove the holder gone (a dead pid
of this host, a deleted pod: `liveness.py`) takes it over at once instead of after the lease."""

from __future__ import annotations

import getpass
import json
import os
import socket
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta

HOLDER = "dcgm-migrate/lock-holder"
EXPIRES = "dcgm-migrate/lock-expires"
ACQUIRED = "dcgm-migrate/lock-acquired"
RENEWED = "dcgm-migrate/lock-renewed"  # the holder's last renewal (absent before 0.2: acquired)
PROCESS = "dcgm-migrate/lock-process"  # where the holder runs (`Process`, as JSON)
KEYS = (HOLDER, EXPIRES, ACQUIRED, RENEWED, PROCESS)

# A holder renews every quarter lease (30 s of 120 s): one silent for half of it has missed two
# renewals, so `unlock` without --force only refuses a lock renewed more recently than this.
RENEWING_SECONDS = 60.0


@dataclass(frozen=True)
class Process:
    """Where a lock's holder runs: host, pid and its start time (a reused pid is not the
    holder), boot and pid namespace, pod. None: not known here (nothing judged from it)."""

    host: str
    pid: int
    started: int | None = None  # clock ticks after boot: /proc/<pid>/stat field 22
    boot: str | None = None  # /proc/sys/kernel/random/boot_id
    pidns: str | None = None  # /proc/self/ns/pid, e.g. "pid:[4026531836]"
    pod: str | None = None  # "namespace/name" when the run is a pod (a Job's)

    def encode(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None},
                          sort_keys=True, separators=(",", ":"))

    @staticmethod
    def decode(text: str | None) -> Process | None:
        """The recorded process; None when absent or unreadable (judged by its lease alone)."""
        try:
            raw = json.loads(text or "")
            return Process(str(raw["host"]), int(raw["pid"]), _int(raw.get("started")),
                           _text(raw.get("boot")), _text(raw.get("pidns")),
                           _text(raw.get("pod")))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def same_pids(self, other: Process) -> bool:
        """Same host, boot and pid namespace: the two see the same processes by the same pids."""
        return (self.host == other.host and None not in (self.boot, self.pidns)
                and (self.boot, self.pidns) == (other.boot, other.pidns))


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else None


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Lock:
    """A lock this process holds; `taken_over_from`/`taken_over`: the holder and lock it
    replaced, `gone`: why that holder was known gone before its lock expired."""

    holder: str
    acquired: datetime
    expires: datetime
    ttl_seconds: float
    taken_over_from: str | None = None
    renewed: datetime | None = None  # None: never renewed (the acquisition)
    taken_over: LockInfo | None = None
    process: Process | None = None  # this run's, recorded in the annotations
    gone: str | None = None


@dataclass(frozen=True)
class LockInfo:
    """The lock as the annotations describe it (anyone's)."""

    holder: str
    acquired: str
    expires: datetime | None  # None: unreadable, treated as expired
    renewed: datetime | None = None  # the last renewal, else the acquisition (None: unreadable)
    process: Process | None = None  # where the holder runs (None: not recorded)

    def live(self, now: datetime) -> bool:
        return self.expires is not None and self.expires > now

    def renewing(self, now: datetime, within: float = RENEWING_SECONDS) -> bool:
        """Live and renewed (or taken) within `within` seconds: its holder is running now."""
        return self.live(now) and self.renewed is not None and (
            (now - self.renewed).total_seconds() <= within)


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC; fractional seconds only when there are some."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z"


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
    return LockInfo(holder, acquired, parse_time(annotations.get(EXPIRES)), renewed,
                    Process.decode(annotations.get(PROCESS)))


def new_lock(holder: str, now: datetime, ttl_seconds: float, taken_over_from: str | None,
             taken_over: LockInfo | None = None, *, process: Process | None = None,
             gone: str | None = None) -> Lock:
    return Lock(holder, now, now + timedelta(seconds=ttl_seconds), ttl_seconds, taken_over_from,
                taken_over=taken_over, process=process, gone=gone)


def renewed_lock(lock: Lock, now: datetime) -> Lock:
    """`lock` renewed at `now`: its expiry pushed out by its TTL (never pulled in)."""
    return replace(lock, expires=max(lock.expires, now + timedelta(seconds=lock.ttl_seconds)),
                   renewed=now)


def annotations_for(lock: Lock) -> dict[str, str]:
    out = {HOLDER: lock.holder, ACQUIRED: format_time(lock.acquired),
           EXPIRES: format_time(lock.expires), RENEWED: format_time(lock.renewed or lock.acquired)}
    if lock.process is not None:
        out[PROCESS] = lock.process.encode()
    return out


def takeover_message(lock: Lock) -> str | None:
    """What a run says when its lock replaced another's (None: it did not)."""
    if not lock.taken_over_from:
        return None
    old = lock.taken_over
    if lock.gone:
        until = f" (its lease ran until {format_time(old.expires)})" if old and old.expires \
            else ""
        return (f"took over the lock of {lock.taken_over_from} at once: {lock.gone}, so its "
                f"run is gone{until}")
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
    return info is not None and (info.holder, info.acquired) == (
        lock.holder, format_time(lock.acquired))


def default_holder(pod: str | None = None) -> str:
    """`user@host pid N`, and `(pod namespace/name)` in a pod: enough to find the run."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    where = f" (pod {pod})" if pod else ""
    return f"{user}@{socket.gethostname()} pid {os.getpid()}{where}"
