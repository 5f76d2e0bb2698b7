"""The cells of a Pod's Table row, computed as the real server's `printPod` computes them.

Upstream: `pkg/printers/internalversion/printers.go` (`printPod`, `hasPodReadyCondition`,
`isPodInitializedConditionTrue`), with `podutil.IsRestartableInitContainer` (an init container
with `restartPolicy: Always`, a sidecar), `podutilv1.IsPodPhaseTerminal` and
`pkg/util/node.NodeUnreachablePodReason` ("NodeLost"). In order:

- STATUS starts as `status.reason`, else `status.phase`; a `PodScheduled` condition with reason
  `SchedulingGated` makes it `SchedulingGated`.
- The first init container that has not completed decides it while the pod initializes:
  `Init:<reason>` (terminated with a reason, or waiting with one other than PodInitializing),
  `Init:Signal:N` / `Init:ExitCode:N`, else `Init:i/n`. A started sidecar does not block.
- Once initialized, app containers decide it, the first one in spec order winning: a waiting
  or terminated reason, `Signal:N` / `ExitCode:N`; ready running containers are counted.
  "Completed" with a container still running turns "Running" (pod Ready) or "NotReady".
- A pod being deleted is `Unknown` when its node was lost, else `Terminating` unless its phase
  is terminal.

READY is ready containers / containers (sidecars included); RESTARTS adds " (5m ago)" from the
newest `lastState.terminated.finishedAt`. Pure: `now` is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

Obj = Mapping[str, Any]
NODE_UNREACHABLE_POD_REASON = "NodeLost"  # pkg/util/node/node.go
SCHEDULING_GATED = "SchedulingGated"  # v1.PodReasonSchedulingGated

# printers.go podSuccessConditions / podFailedConditions (kubectl hides Completed rows unless -a).
_COMPLETED = {
    "Succeeded": [{"type": "Completed", "status": "True", "reason": "Succeeded",
                   "message": "The pod has completed successfully."}],
    "Failed": [{"type": "Completed", "status": "True", "reason": "Failed",
                "message": "The pod failed."}],
}


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp (as the API writes them), or None when unset or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _restartable(container: Obj | None) -> bool:
    return container is not None and bool(container.get("restartPolicy") == "Always")


def _condition_true(status: Obj, ctype: str) -> bool:
    """The first condition of `ctype` is True (isPodInitializedConditionTrue)."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == ctype:
            return bool(cond.get("status") == "True")
    return False


def _has_ready_condition(status: Obj) -> bool:
    """Any Ready condition is True (hasPodReadyCondition)."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def _finished(cs: Obj) -> datetime | None:
    return parse_time((((cs.get("lastState") or {}).get("terminated")) or {}).get("finishedAt"))


def _later(current: datetime | None, candidate: datetime | None) -> datetime | None:
    if candidate is None:
        return current
    return candidate if current is None or current < candidate else current


def _exit_text(term: Obj, prefix: str) -> str:
    if term.get("signal"):
        return f"{prefix}Signal:{int(term['signal'])}"
    return f"{prefix}ExitCode:{int(term.get('exitCode') or 0)}"


def pod_cells(pod: Obj, now: datetime, age: Callable[[float], str]) -> tuple[str, str, str]:
    """(READY, STATUS, RESTARTS) of `pod`; `age` renders seconds as HumanDuration does."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == SCHEDULING_GATED:
            reason = SCHEDULING_GATED
    init_specs = list(spec.get("initContainers") or [])
    by_name = {c.get("name"): c for c in init_specs}
    total = len(spec.get("containers") or []) + sum(1 for c in init_specs if _restartable(c))
    ready = restarts = sidecar_restarts = 0
    last: datetime | None = None
    sidecar_last: datetime | None = None
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        count = int(cs.get("restartCount") or 0)
        restarts += count
        last = _later(last, _finished(cs))
        sidecar = _restartable(by_name.get(cs.get("name")))
        if sidecar:
            sidecar_restarts += count
            sidecar_last = _later(sidecar_last, _finished(cs))
        state = cs.get("state") or {}
        term, waiting = state.get("terminated"), state.get("waiting")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if term is not None:
            reason = f"Init:{term['reason']}" if term.get("reason") else _exit_text(term, "Init:")
        elif waiting is not None and waiting.get("reason") and \
                waiting["reason"] != "PodInitializing":
            reason = f"Init:{waiting['reason']}"
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    if not initializing or _condition_true(status, "Initialized"):
        restarts, last = sidecar_restarts, sidecar_last
        running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            last = _later(last, _finished(cs))
            state = cs.get("state") or {}
            term, waiting = state.get("terminated"), state.get("waiting")
            if waiting is not None and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif term is not None and term.get("reason"):
                reason = str(term["reason"])
            elif term is not None:
                reason = _exit_text(term, "")
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            reason = "Running" if _has_ready_condition(status) else "NotReady"
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    if deleting and status.get("reason") == NODE_UNREACHABLE_POD_REASON:
        reason = "Unknown"
    elif deleting and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    shown = str(restarts)
    if restarts and last is not None:
        shown = f"{restarts} ({age((now - last).total_seconds())} ago)"
    return f"{ready}/{total}", reason, shown


def pod_wide_cells(pod: Obj) -> list[str]:
    """IP, NODE, NOMINATED NODE, READINESS GATES (the priority-1 columns)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    shown = "<none>"
    if gates:
        true = 0
        for gate in gates:
            cond = next((c for c in status.get("conditions") or []
                         if c.get("type") == gate.get("conditionType")), None)
            true += 1 if cond is not None and cond.get("status") == "True" else 0
        shown = f"{true}/{len(gates)}"
    return [(ips[0].get("ip") if ips else "") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", shown]


def pod_conditions(pod: Obj) -> list[dict[str, str]] | None:
    """The row's `conditions`: Completed for a pod in a terminal phase, else none."""
    return _COMPLETED.get(str((pod.get("status") or {}).get("phase") or ""))
