"""Is a lock's holder provably gone? The lease answers "maybe alive" for two minutes after a
`kill -9`; this answers sooner when it can prove the holder dead, and never guesses: on this
very host (same host, boot and pid namespace) its pid no longer runs, is a zombie or is a later
process (/proc/<pid>/stat field 22); in a cluster its pod is gone, stopped or (this very pod in
another pid namespace) restarted. Anything else is None, maybe alive. Nothing is signalled."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from migrator.engine.state import lock as locking
from migrator.engine.state.lock import LockInfo, Process
from migrator.errors import MigrateError

PROC = Path("/proc")
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
STOPPED_PHASES = ("Succeeded", "Failed")

PodLookup = Callable[[str, str], Mapping[str, Any] | None]  # (namespace, name) → pod or None


def parse_stat(text: str) -> tuple[str, int]:
    """(state, start time in clock ticks) from /proc/<pid>/stat, counted after the last `)`
    (the command name may hold spaces and parentheses)."""
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


def pod_of_this_process(env: Mapping[str, str] | None = None,
                        service_account: Path = SERVICE_ACCOUNT_NAMESPACE) -> str | None:
    """`namespace/name` of the pod this run is (POD_NAME or the host name, POD_NAMESPACE or
    the service account's), or None outside a cluster."""
    environ = os.environ if env is None else env
    in_cluster = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    name = environ.get("POD_NAME") or (socket.gethostname() if in_cluster else "")
    namespace = environ.get("POD_NAMESPACE") or (read_text(service_account) if in_cluster else None)
    return f"{namespace}/{name}" if name and namespace else None


def this_process(proc: Path = PROC, pod: str | None = None) -> Process:
    """This run, as a lock records it."""
    try:
        stat = read_stat(os.getpid(), proc)
    except LookupError:
        stat = None
    return Process(socket.gethostname(), os.getpid(), stat[1] if stat else None,
                   read_text(proc / "sys" / "kernel" / "random" / "boot_id"),
                   read_text(proc / "self" / "ns" / "pid", link=True), pod)


def default_holder() -> str:
    """The holder string of this run (`user@host pid N`, and its pod in a cluster)."""
    return locking.default_holder(pod_of_this_process())


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

    def __init__(self, pod: PodLookup | None = None, here: Process | None = None,
                 proc: Path = PROC) -> None:
        self._pod, self._here, self._proc = pod, here, proc

    @property
    def here(self) -> Process:
        if self._here is None:
            self._here = this_process(self._proc, pod_of_this_process())
        return self._here

    def __call__(self, info: LockInfo | None) -> str | None:
        if info is None or info.process is None:
            return None
        holder = info.process
        return (gone_from_this_host(holder, self.here, self._proc)
                or gone_from_the_cluster(holder, self.here, self._pod))
