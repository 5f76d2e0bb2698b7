"""The pods/log subresource: `GET /api/v1/namespaces/NS/pods/NAME/log`, as kubectl logs reads it.

Query as upstream's `PodLogOptions` (`container`, `follow`, `previous`, `sinceSeconds`,
`sinceTime`, `timestamps`, `tailLines`, `limitBytes`); the answer is `text/plain`, streamed
(chunked) with `follow` until the container's output ends. Its refusals are upstream's 400s: a
container name missing from a pod with several (`a container name must be specified for pod
P, choose one of: [a b]`), one the pod does not have, a container still waiting to start, no
previous instance. A pod the container runtime runs for real (`sim serve --images`) answers
its containers' output (runtime/logs); a simulated pod answers an empty log once its
containers run (they print nothing), and the waiting refusal before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Protocol

from dcgm_sim import kinds
from dcgm_sim.exchange import Backend, Response
from dcgm_sim.routing import RequestInfo
from dcgm_sim.runtime.logs import LogOptions, parse_time, read
from dcgm_sim.statuses import bad_request, not_found

TEXT = "text/plain"


class LogSource(Protocol):
    """The container runtime as pods/log reads it (`ContainerRuntime`)."""

    def has(self, uid: str) -> bool: ...

    def log_file(self, uid: str, container: str, pod_name: str,
                 previous: bool) -> tuple[Path, threading.Event | None]: ...


def _int(info: RequestInfo, name: str) -> int | None:
    raw = info.query.get(name, "")
    if raw == "":
        return None
    try:
        value = int(raw)
    except ValueError as err:
        raise bad_request(f"invalid value for {name}: {raw!r}") from err
    if value < 0 or (value == 0 and name in ("sinceSeconds", "limitBytes")):
        raise bad_request(f"{name}: Invalid value: {value}: must be greater than 0")
    return value


def options(info: RequestInfo) -> LogOptions:
    since_seconds = _int(info, "sinceSeconds")
    since_time = info.query.get("sinceTime", "")
    if since_seconds is not None and since_time:
        raise bad_request("at most one of `sinceTime` or `sinceSeconds` may be specified")
    since = time.time() - since_seconds if since_seconds is not None else (
        parse_time(since_time) if since_time else None)
    if since_time and since is None:
        raise bad_request(f"invalid value for sinceTime: {since_time!r}")
    return LogOptions(follow=info.flag("follow"), timestamps=info.flag("timestamps"),
                      tail_lines=_int(info, "tailLines"), since=since,
                      limit_bytes=_int(info, "limitBytes"))


def _container(pod: dict[str, Any], info: RequestInfo) -> str:
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    inits = [str(c.get("name")) for c in (pod.get("spec") or {}).get("initContainers") or []]
    name = info.query.get("container", "")
    pod_name = pod["metadata"]["name"]
    if not name:
        if len(names) == 1:
            return names[0]
        raise bad_request(f"a container name must be specified for pod {pod_name}, "
                          f"choose one of: [{' '.join(names)}]"
                          + (f" or one of the init containers: [{' '.join(inits)}]"
                             if inits else ""))
    if name not in names + inits:
        raise bad_request(f"container {name} is not valid for pod {pod_name}")
    return name


def serve(b: Backend, info: RequestInfo) -> Response:
    """Answer a GET of pods/log (the caller checked the verb and RBAC)."""
    if info.verb != "get":
        raise bad_request(f"pods/log does not support {info.verb}")
    pod = b.store.find(kinds.POD, info.namespace, info.name)
    if pod is None:
        raise not_found(kinds.POD, info.name)
    container = _container(pod, info)
    opts = options(info)
    uid = str(pod["metadata"]["uid"])
    source: LogSource | None = b.pod_logs
    if source is not None and source.has(uid):
        try:
            path, done = source.log_file(uid, container, info.name, info.flag("previous"))
        except ValueError as err:
            raise bad_request(str(err)) from err
        chunks = read(path, opts, done)
        if opts.follow:
            return Response(200, content_type=TEXT, stream=chunks)
        return Response(200, b"".join(c for c in chunks if c), content_type=TEXT)
    return _simulated(pod, container, info)


def _simulated(pod: dict[str, Any], container: str, info: RequestInfo) -> Response:
    """A simulated container prints nothing; one that has not started has no log yet."""
    statuses = {c.get("name"): c for c in (pod.get("status") or {}).get(
        "containerStatuses") or []}
    state = (statuses.get(container) or {}).get("state") or {"waiting": {
        "reason": "ContainerCreating"}}
    if info.flag("previous"):
        raise bad_request(f'previous terminated container "{container}" in pod '
                          f'"{info.name}" not found')
    if "waiting" in state:
        raise bad_request(f'container "{container}" in pod "{info.name}" is waiting to start: '
                          f'{state["waiting"].get("reason", "ContainerCreating")}')
    return Response(200, b"", content_type=TEXT)
