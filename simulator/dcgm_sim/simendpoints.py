"""The sim's own control endpoints under `/sim/v1`: faults, the request log, tokens.

They let a test in another process drive the server (`sim serve`) the way an in-process test
drives `ApiServer.faults`/`.log`/`.access`. Never faulted, never access-checked, never logged.

- `GET /sim/v1/faults` → settings; `PUT` (JSON, any subset of the fields) → new settings;
  `DELETE` → no faults.
- `GET /sim/v1/requests?since=SEQ` → JSON list of request records; `DELETE` clears them.
- `POST /sim/v1/tokens` `{"token": "...", "rbac": "<RBAC YAML>", "user": optional}` → 201.
- `POST /sim/v1/nodes/<name>/fail` → stop the node's kubelet (node failure, see
  controllers/nodelifecycle.py); `POST /sim/v1/nodes/<name>/heal` → it is back;
  `POST /sim/v1/nodes/<name>/probe-flap` `{"seconds": N}` → the node's Ready pods fail their
  readiness probes for N simulated seconds (controllers/probes.py). Each answers the Node.
  They set the node's `sim.dcgm-migrate/...` annotations, as `kubectl annotate` could.
- `GET /sim/v1/operator` → the GPU Operator imitation's release, counters and `history`: its
  last reconciles, each with its controller, simulated time `at` and what made it run (`by`:
  start, release, resync, event, or requeue with its `due` and `setAt` times);
  `PUT /sim/v1/operator` `{"release": "shipped" | "future-coexistence" |
  "shared-services-fork"}` → upgrade (or downgrade) it, as an operator upgrade would: it
  reconciles at once with the new release (controllers/releases.py). 404 when the imitation is off.
- `GET /sim/v1/healthz` → ok.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from dcgm_sim import kinds
from dcgm_sim.controllers.nodelifecycle import NODE_FAILED_ANNOTATION, annotate_node
from dcgm_sim.controllers.probes import PROBE_FLAP_ANNOTATION
from dcgm_sim.exchange import Backend, Request, Response, error_response, json_response
from dcgm_sim.faults import FaultsError
from dcgm_sim.routing import RequestInfo
from dcgm_sim.statuses import (
    ApiError,
    bad_request,
    method_not_allowed,
    no_such_path,
    not_found,
)
from dcgm_sim.store import StoreError

PREFIX = "/sim/v1/"


def _body(req: Request) -> Any:
    try:
        return json.loads(req.body or b"{}")
    except ValueError as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from e


def handle(b: Backend, info: RequestInfo, req: Request) -> Response:
    try:
        return _handle(b, info, req)
    except ApiError as e:
        return error_response(e)
    except ValueError as e:  # e.g. a non-numeric `since`
        return error_response(bad_request(str(e)))


def _handle(b: Backend, info: RequestInfo, req: Request) -> Response:
    what = info.path[len(PREFIX):].strip("/")
    method = info.method
    if what == "healthz":
        return Response(200, b"ok", content_type="text/plain; charset=utf-8")
    if what == "faults":
        if method == "GET":
            return json_response(200, b.faults.snapshot())
        if method == "PUT":
            body = _body(req)
            if not isinstance(body, dict):
                raise bad_request("faults must be a JSON object")
            try:
                return json_response(200, b.faults.update(**body))
            except (FaultsError, TypeError, ValueError) as e:
                raise bad_request(str(e)) from e
        if method == "DELETE":
            return json_response(200, b.faults.reset())
        raise method_not_allowed()
    if what == "requests":
        if method == "GET":
            since = int(info.query.get("since", "0") or 0)
            return json_response(200, [r.to_json() for r in b.log.since(since)])
        if method == "DELETE":
            b.log.clear()
            return json_response(200, {"cleared": True, "last_seq": b.log.last_seq})
        raise method_not_allowed()
    if what.startswith("nodes/"):
        return _node_fault(b, what, method, req)
    if what == "operator":
        return _operator(b, method, req)
    if what == "tokens":
        if method != "POST":
            raise method_not_allowed()
        body = _body(req)
        if not isinstance(body, dict) or not body.get("token") or "rbac" not in body:
            raise bad_request('expected {"token": "...", "rbac": "<RBAC YAML>"}')
        try:
            policy = b.access.add_token(str(body["token"]), str(body["rbac"]), body.get("user"))
        except (yaml.YAMLError, KeyError, TypeError, AttributeError) as e:
            raise bad_request(f"cannot read the RBAC YAML: {e}") from e
        return json_response(201, {"user": policy.user, "groups": list(policy.groups),
                                   "rules": len(policy.grants)})
    raise no_such_path()


def _operator(b: Backend, method: str, req: Request) -> Response:
    """`operator`: the imitation's release (GET), a new one (PUT/POST)."""
    if b.operator is None:
        raise ApiError(404, "NotFound", "the GPU Operator imitation is off in this simulated "
                       "cluster (--operator-reconcile 0)")
    if method == "GET":
        return json_response(200, b.operator.status())
    if method not in ("PUT", "POST"):
        raise method_not_allowed()
    body = _body(req)
    release = body.get("release") if isinstance(body, dict) else None
    if not isinstance(release, str):
        raise bad_request('expected {"release": "<operator release>"}')
    try:
        b.operator.set_release(release)
    except ValueError as e:
        raise bad_request(str(e)) from e
    return json_response(200, b.operator.status())


def _node_fault(b: Backend, what: str, method: str, req: Request) -> Response:
    """`nodes/<name>/fail|heal|probe-flap`: set the node's fault annotations."""
    parts = what.split("/")
    if len(parts) != 3 or parts[2] not in ("fail", "heal", "probe-flap"):
        raise no_such_path()
    if method != "POST":
        raise method_not_allowed()
    name, action = parts[1], parts[2]
    try:
        if action == "fail":
            node = annotate_node(b.store, name, NODE_FAILED_ANNOTATION, "true")
        elif action == "heal":
            node = annotate_node(b.store, name, NODE_FAILED_ANNOTATION, None)
        else:
            body = _body(req)
            seconds = body.get("seconds") if isinstance(body, dict) else None
            if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
                raise bad_request('expected {"seconds": <number greater than 0>}')
            annotate_node(b.store, name, PROBE_FLAP_ANNOTATION, None)
            node = annotate_node(b.store, name, PROBE_FLAP_ANNOTATION, f"{seconds:g}")
    except StoreError as err:
        if err.code == 404:
            raise not_found(kinds.NODE, name) from err
        raise
    return json_response(200, node)
