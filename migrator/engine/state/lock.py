"""The run lock, as ConfigMap annotations: a lease (its holder counts as alive while the expiry
is in the future) that records where its holder runs (`Process`), so a run that can prove the
holder gone takes it over at once instead of after the lease. Proof, never a guess: on this very
host (same host, boot and pid namespace) its pid no longer runs, is a zombie or is a later
process (/proc/<pid>/stat field 22); in a cluster its pod is gone, stopped or (this very pod in
another pid namespace) restarted. Anything else is None, maybe alive. Nothing is signalled."""

from __future__ import annotations

import getpass
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from migrator.errors import MigrateError

HOLDER = "dcgm-migrate/lock-holder"
EXPIRES = "dcgm-migrate/lock-expires"
ACQUIRED = "dcgm-migrate/lock-acquired"
RENEWED = "dcgm-migrate/lock-renewed"  # the holder's last renewal (absent before 0.2: acquired)
PROCESS = "dcgm-migrate/lock-process"  # where the holder runs (`Process`, as JSON)
KEYS = (HOLDER, EXPIRES, ACQUIRED, RENEWED, PROCESS)

# A holder renews every quarter lease (30 s of 120 s): one silent for half of it missed two, so
# `unlock` without --force only refuses a lock renewed more recently than this.
RENEWING_SECONDS = 60.0


@dataclass(frozen=True)
class Process:
    """Where a lock's holder runs (a reused pid is not the holder); None: not known here."""

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
    """A lock this process holds; `taken_over`: what it replaced, `gone`: why before expiry."""

    holder: str
    acquired: datetime
    expires: datetime
    ttl_seconds: float
    renewed: datetime | None = None  # None: never renewed (the acquisition)
    taken_over: LockInfo | None = None
    process: Process | None = None  # this run's, recorded in the annotations
    gone: str | None = None

    @property
    def taken_over_from(self) -> str | None:
        """The holder of the lock this one replaced (None: it replaced none)."""
        return self.taken_over.holder if self.taken_over else None


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

    def renewing(self, now: datetime) -> bool:
        """Live and renewed (or taken) within RENEWING_SECONDS: its holder is running now."""
        return self.live(now) and self.renewed is not None and (
            (now - self.renewed).total_seconds() <= RENEWING_SECONDS)


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


def new_lock(holder: str, now: datetime, ttl_seconds: float, taken_over: LockInfo | None = None,
             *, process: Process | None = None, gone: str | None = None) -> Lock:
    return Lock(holder, now, now + timedelta(seconds=ttl_seconds), ttl_seconds,
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
    old = lock.taken_over
    if old is None:
        return None
    if lock.gone:
        until = f" (its lease ran until {format_time(old.expires)})" if old.expires else ""
        return (f"took over the lock of {old.holder} at once: {lock.gone}, so its "
                f"run is gone{until}")
    if old.expires is None:
        return (f"took over the lock of {old.holder}, whose expiry could not be read "
                "(counted as expired)")
    renewed = f", last renewed {format_time(old.renewed)}" if old.renewed else ""
    return (f"took over the expired lock of {old.holder} (expired "
            f"{format_time(old.expires)}{renewed}: not renewed since, so its run is gone)")


def is_ours(info: LockInfo | None, lock: Lock) -> bool:
    """Same holder and same acquisition: a holder string alone could be reused."""
    return info is not None and (info.holder, info.acquired) == (
        lock.holder, format_time(lock.acquired))


PROC = Path("/proc")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
STOPPED_PHASES = ("Succeeded", "Failed")

PodLookup = Callable[[str, str], Mapping[str, Any] | None]  # (namespace, name) → pod or None


def parse_stat(text: str) -> tuple[str, int]:
    """(state, start in clock ticks) from /proc/<pid>/stat, after the last `)` of the name."""
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[19])  # field 3 is fields[0]; field 22 is fields[19]


def read_stat(pid: int, proc: Path = PROC) -> tuple[str, int] | None:
    """(state, start) of a running pid, or None when no such process exists."""
    try:
        return parse_stat((proc / str(pid) / "stat").read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError):
        raise LookupError(pid) from None  # unreadable: nothing can be judged from it


def read_text(path: Path, link: bool = False) -> str | None:
    """A file's stripped text (or a link's target); None when it cannot be read."""
    try:
        return os.readlink(path) if link else path.read_text().strip() or None
    except OSError:
        return None


def pod_namespace(env: Mapping[str, str] | None = None,
                  service_account: Path = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """The namespace of the pod this run is, as client-go reads it in a pod: $POD_NAMESPACE,
    else the service account's file (None: neither says)."""
    environ = os.environ if env is None else env
    return environ.get("POD_NAMESPACE", "").strip() or read_text(service_account)


def pod_of_this_process(env: Mapping[str, str] | None = None,
                        service_account: Path = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """`namespace/name` of the pod this run is, or None outside a cluster."""
    environ = os.environ if env is None else env
    in_cluster = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    name = environ.get("POD_NAME") or (socket.gethostname() if in_cluster else "")
    namespace = (pod_namespace(environ, service_account) if in_cluster
                 else environ.get("POD_NAMESPACE"))
    return f"{namespace}/{name}" if name and namespace else None


def this_process(pod: str | None = None) -> Process:
    """This run, as a lock records it."""
    try:
        stat = read_stat(os.getpid())
    except LookupError:
        stat = None
    return Process(socket.gethostname(), os.getpid(), stat[1] if stat else None,
                   read_text(PROC / "sys" / "kernel" / "random" / "boot_id"),
                   read_text(PROC / "self" / "ns" / "pid", link=True), pod)


def default_holder() -> str:
    """`user@host pid N`, and `(pod namespace/name)` in a pod: enough to find the run."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    pod = pod_of_this_process()
    where = f" (pod {pod})" if pod else ""
    return f"{user}@{socket.gethostname()} pid {os.getpid()}{where}"


def gone_from_this_host(holder: Process, here: Process, proc: Path = PROC) -> str | None:
    """Why a holder that ran on this host is gone, or None (alive, or not this host's)."""
    if not holder.same_pids(here) or (holder.pid, holder.started) == (here.pid, here.started):
        return None
    try:
        stat = read_stat(holder.pid, proc)
    except LookupError:
        return None
    where = f"pid {holder.pid} on {holder.host}"
    if stat is None:
        return f"its process ({where}) no longer runs"
    state, started = stat
    if state in ("Z", "X"):
        return f"its process ({where}) has exited"
    if holder.started is not None and started != holder.started:
        return f"{where} is another process now (started after the holder's)"
    return None


def gone_from_the_cluster(holder: Process, here: Process, pod: PodLookup | None) -> str | None:
    """Why a holder that ran in a pod is gone, or None (its pod runs, or cannot be read)."""
    if holder.pod is None or "/" not in holder.pod:
        return None
    if holder.pod == here.pod:  # this very pod, in another pid namespace: a restart
        restarted = None not in (holder.pidns, here.pidns) and holder.pidns != here.pidns
        return f"pod {holder.pod} restarted its container since" if restarted else None
    if pod is None:
        return None
    namespace, name = holder.pod.split("/", 1)
    try:
        found = pod(namespace, name)
    except MigrateError:  # forbidden, unreachable: nothing proven
        return None
    if found is None:
        return f"its pod {holder.pod} no longer exists"
    phase = str((found.get("status") or {}).get("phase") or "")
    return f"its pod {holder.pod} has stopped ({phase})" if phase in STOPPED_PHASES else None


class HolderCheck:
    """`check(info)`: why the lock's holder is provably gone, or None when it may be alive."""

    def __init__(self, pod: PodLookup | None = None, here: Process | None = None) -> None:
        self._pod, self._here = pod, here

    @property
    def here(self) -> Process:
        if self._here is None:
            self._here = this_process(pod_of_this_process())
        return self._here

    def __call__(self, info: LockInfo | None) -> str | None:
        if info is None or info.process is None:
            return None
        holder = info.process
        return (gone_from_this_host(holder, self.here)
                or gone_from_the_cluster(holder, self.here, self._pod))
