"""The run lock's data: who holds it, since when, until when — as ConfigMap annotations.

Pure helpers (plus `default_holder`, which names this process) used by the state store, which
takes, renews and releases the lock with resourceVersion-guarded writes.

The lock is a lease: its holder counts as alive for as long as it keeps renewing it (the expiry
stays in the future), and a lock that has expired is anyone's to take over. A lease alone would
keep a `kill -9`ed run's lock for two minutes, though, so the lock also records where its holder
runs (`Process`: host, pid and the pid's start time, boot and pid namespace, pod): a run that
can prove the holder is gone — a process of this very host that no longer runs (or whose pid
now belongs to a later process), a pod that no longer exists — takes the lock over at once
(`engine/state/liveness.py` looks). A holder that may be alive (another host, a live pid) is
still refused until its lease runs out.
"""

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

# A holder renews a quarter of the way through its lease (every 30 s of the standard 120 s): one
# that has not renewed for half of it has missed two renewals, so `unlock` does not count it as
# still renewing. A lock renewed more recently than this (and not expired) is refused by
# `unlock` without --force.
RENEWING_SECONDS = 60.0


@dataclass(frozen=True)
class Process:
    """Where a lock's holder runs, precisely enough for another run to tell whether it still
    does: on the same host (same boot and pid namespace) its pid and that pid's start time
    (a pid reused by a later process is not the holder), in a cluster its pod. Fields this
    host cannot tell are None (no /proc: nothing is judged from them)."""

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
        """The recorded process, or None when there is none or it cannot be read (a lock
        written before 0.3, or edited): such a holder is judged by its lease alone."""
        try:
            raw = json.loads(text or "")
            return Process(str(raw["host"]), int(raw["pid"]), _int(raw.get("started")),
                           _text(raw.get("boot")), _text(raw.get("pidns")),
                           _text(raw.get("pod")))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def same_pids(self, other: Process) -> bool:
        """The two see the same processes under the same pids: same host, same boot, same pid
        namespace (a container of its own, a reboot: not)."""
        return (self.host == other.host and None not in (self.boot, self.pidns)
                and (self.boot, self.pidns) == (other.boot, other.pidns))


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | str) and str(value).isdigit() else None


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Lock:
    """A lock this process holds. `taken_over_from` names the holder it replaced,
    `taken_over` is that lock as it was (when it expired, its last renewal), `gone` why its
    holder is known to be gone when the lock had not expired yet."""

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
    out = {
        HOLDER: lock.holder,
        ACQUIRED: format_time(lock.acquired),
        EXPIRES: format_time(lock.expires),
        RENEWED: format_time(lock.renewed or lock.acquired),
    }
    if lock.process is not None:
        out[PROCESS] = lock.process.encode()
    return out


def takeover_message(lock: Lock) -> str | None:
    """What a run says when its lock replaced another's (None: it did not). A lock is taken
    over once it has expired (or its expiry cannot be read), or at once when its holder is
    provably gone (`gone`): never a holder that may be alive."""
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
    return info is not None and info.holder == lock.holder and (
        info.acquired == format_time(lock.acquired)
    )


def default_holder(pod: str | None = None) -> str:
    """`user@host pid N`, and `(pod namespace/name)` for a run in a pod (a Job's): enough for a
    human to find the run (never a secret)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    where = f" (pod {pod})" if pod else ""
    return f"{user}@{socket.gethostname()} pid {os.getpid()}{where}"
