"""`events.k8s.io/v1` Events, served over the core/v1 Events as upstream serves them: one stored
resource, two API versions.

Upstream stores one Event resource and converts at the edge (`pkg/apis/events/v1/conversion.go`):
`regarding` ↔ `involvedObject`, `note` ↔ `message`, `reportingController` ↔
`reportingComponent` (core's JSON name for the same field), `deprecatedSource` ↔ `source`,
`deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount` ↔ `firstTimestamp`/
`lastTimestamp`/`count`; `series`, `eventTime`, `action`, `reason`, `type`, `related` and
`reportingInstance` are the same. So an Event a controller writes through events.k8s.io/v1 is
what `kubectl describe` reads back through core/v1 (it lists `/api/v1/namespaces/<ns>/events`
with the field selector `involvedObject.name=…,involvedObject.namespace=…,
involvedObject.kind=…,involvedObject.uid=…`), and the reverse.

Create through events.k8s.io/v1 is validated as upstream's `ValidateEventCreate` for that
version (`pkg/apis/core/validation/events.go`): `eventTime`, `reportingController` (a
qualified name), `reportingInstance`, `action` and `reason` (at most 128 bytes each) are
required, `type` is Normal or Warning, `note` at most 1024 bytes (Go's `len`: a note of 1024
characters with any non-ASCII one is refused, though the message says "characters", and is
reported under the internal type's name, `message`), the deprecated fields unset, and
`regarding.namespace` that of the Event. Field selectors take upstream's events.k8s.io names
(`regarding.kind`, `regarding.name`, …, `reportingController`) and are matched on the stored
object under their core names. Watches, gets, lists, patches (merge, strategic merge, JSON
patch: top-level names converted) and deletes go to the same store. Pure functions plus one
request handler.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

from dcgm_sim import fieldselectors, kinds
from dcgm_sim.exchange import Request, Response
from dcgm_sim.routing import RequestInfo
from dcgm_sim.statuses import ApiError, bad_request

Obj = dict[str, Any]

# events.k8s.io/v1 name → core/v1 name (fields not listed keep their name)
_TO_CORE = {"regarding": "involvedObject", "note": "message",
            "reportingController": "reportingComponent", "deprecatedSource": "source",
            "deprecatedFirstTimestamp": "firstTimestamp",
            "deprecatedLastTimestamp": "lastTimestamp", "deprecatedCount": "count"}
_TO_V1 = {v: k for k, v in _TO_CORE.items()}
_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LENGTH_LIMIT, NOTE_LIMIT = 128, 1024


def _rename(obj: Obj, names: dict[str, str], api_version: str) -> Obj:
    out = {names.get(k, k): v for k, v in obj.items()}
    if "apiVersion" in out:
        out["apiVersion"] = api_version
    return out


def to_core(event: Obj) -> Obj:
    """An events.k8s.io/v1 Event (or a merge patch of one) in core/v1 names."""
    return _rename(event, _TO_CORE, kinds.EVENT.api_version)


def to_v1(event: Obj) -> Obj:
    """A core/v1 Event in events.k8s.io/v1 names."""
    return _rename(event, _TO_V1, kinds.EVENTS_V1.api_version)


def core_selector(text: str) -> str:
    """An events.k8s.io/v1 field selector in core/v1 field names."""
    out = []
    for term in text.split(","):
        match = re.match(r"^\s*([A-Za-z.]+)\s*(.*)$", term)
        if not match:
            out.append(term)
            continue
        field, rest = match.groups()
        head, _, tail = field.partition(".")
        out.append(f"{_TO_CORE.get(head, head)}{'.' + tail if tail else ''}{rest}")
    return ",".join(out)


def _bytes(value: Any) -> int:
    """Go's `len` of a string: its UTF-8 bytes, not its characters."""
    return len(str(value or "").encode("utf-8"))


def validate_create(event: Obj, namespace: str) -> None:
    """events.k8s.io/v1 create validation (module docstring); 422 naming every field."""
    errors = []
    for name in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not event.get(name):
            errors.append(f"{name}: Required value")
    for name in ("reportingInstance", "action", "reason"):
        if _bytes(event.get(name)) > LENGTH_LIMIT:
            errors.append(f'{name}: Invalid value: "": can have at most {LENGTH_LIMIT} characters')
    controller = str(event.get("reportingController") or "")
    if controller and not _QUALIFIED.match(controller):
        errors.append(f'reportingController: Invalid value: "{controller}": a qualified name '
                      "must consist of alphanumeric characters, '-', '_' or '.'")
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(f'type: Invalid value: "": has invalid value: {event.get("type") or ""}')
    if _bytes(event.get("note")) > NOTE_LIMIT:  # checked on the internal type: "message"
        errors.append(f'message: Invalid value: "": can have at most {NOTE_LIMIT} characters')
    for name in ("deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount"):
        if event.get(name):
            errors.append(f'{name}: Invalid value: "": needs to be unset')
    source = event.get("deprecatedSource") or {}
    if source.get("component") or source.get("host"):
        errors.append('deprecatedSource: Invalid value: "": needs to be unset')
    regarding_ns = (event.get("regarding") or {}).get("namespace")
    if not regarding_ns and namespace not in ("default", "kube-system"):
        errors.append('regarding.namespace: Invalid value: "": does not match event.namespace')
    if errors:
        name = (event.get("metadata") or {}).get("name", "")
        raise ApiError(422, "Invalid", f'Event.events.k8s.io "{name}" is invalid: '
                       + ", ".join(errors))


def _json_body(req: Request) -> Any:
    try:
        return json.loads(req.body) if req.body.strip() else None
    except ValueError as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from e


def _converted(value: Any) -> Any:
    """An answer of the core handler in events.k8s.io/v1 names: an Event, a list of them, or a
    Table whose rows embed them."""
    if not isinstance(value, dict):
        return value
    if value.get("kind") == "Event":
        return to_v1(value)
    if value.get("kind") == "EventList":
        return {**value, "apiVersion": kinds.EVENTS_V1.api_version,
                "items": [to_v1(i) for i in value.get("items") or []]}
    if value.get("kind") == "Table":
        for row in value.get("rows") or []:
            if isinstance(row.get("object"), dict) and row["object"].get("kind") == "Event":
                row["object"] = to_v1(row["object"])
    return value


def _stream(chunks: Iterator[bytes | None]) -> Iterator[bytes | None]:
    for chunk in chunks:
        if not chunk:
            yield chunk
            continue
        lines = []
        for line in chunk.split(b"\n"):
            if line.strip():
                event = json.loads(line)
                event["object"] = _converted(event.get("object"))
                line = json.dumps(event, separators=(",", ":")).encode()
            lines.append(line)
        yield b"\n".join(lines)


def core_request(info: RequestInfo, req: Request) -> tuple[RequestInfo, Request]:
    """The same request addressed to core/v1 Events, its body and field selector converted;
    a create is validated as events.k8s.io/v1 first."""
    query = dict(info.query)
    if "fieldSelector" in query:
        try:  # this version's field names only (core's `involvedObject.*` is a 400 here)
            fieldselectors.parse(query["fieldSelector"], kinds.EVENTS_V1)
        except fieldselectors.FieldSelectorError as e:
            raise bad_request(str(e)) from e
        query["fieldSelector"] = core_selector(query["fieldSelector"])
    body = req.body
    if info.verb in ("create", "update", "patch") and req.body.strip():
        sent = _json_body(req)
        if info.verb == "create" and isinstance(sent, dict):
            validate_create(sent, info.namespace)
        if isinstance(sent, dict):
            sent = to_core(sent)
        elif isinstance(sent, list):  # a JSON patch: its paths' first segment
            for op in sent:
                for key in ("path", "from"):
                    if isinstance(op, dict) and isinstance(op.get(key), str):
                        head, _, tail = op[key].lstrip("/").partition("/")
                        op[key] = "/" + _TO_CORE.get(head, head) + ("/" + tail if tail else "")
        body = json.dumps(sent).encode()
    raw = "&".join(f"{k}={v}" for k, v in query.items())
    return (dataclasses.replace(info, kind=kinds.EVENT, group="", resource="events",
                                query=query, raw_query=raw),
            dataclasses.replace(req, body=body))


def answer(response: Response) -> Response:
    """The core handler's answer, in events.k8s.io/v1 names."""
    if response.stream is not None:
        return dataclasses.replace(response, stream=_stream(response.stream))
    if response.code >= 400 or not response.body:
        return response
    value = json.loads(response.body)
    return dataclasses.replace(response, body=json.dumps(_converted(value)).encode())
