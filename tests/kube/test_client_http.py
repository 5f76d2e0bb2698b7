"""The kube client over real HTTP against a scripted server: error mapping to typed errors,
retries of reads and writes, dry-run and patch wire format, and that tokens never leak."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from migrator.errors import (
    APIAlreadyExists,
    APIConflict,
    APIError,
    APIForbidden,
    APIInvalid,
    APINotFound,
    APIUnreachable,
    WatchExpired,
    exit_code_for,
)
from migrator.kube import Kube, RetryPolicy
from migrator.model import kinds
from migrator.model.printed import is_printed
from migrator.model.snapshot import PodView
from migrator.model.tables import rollout_view

TOKEN = "s3cr3t-bearer-token-value"
Stub = Any  # the `stub` fixture (conftest.py): .url, .script(...), .handler, .requests
Recorded = Any


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


def fast(sleeps: list[float], **kw: Any) -> RetryPolicy:
    return RetryPolicy(sleep=sleeps.append, random=lambda: 1.0, **kw)


def cm(name: str = "a", rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def kube(stub: Stub, sleeps: list[float]) -> Kube:
    return Kube.for_server(stub.url, TOKEN, retry=fast(sleeps))


def test_get_missing_is_none_and_sends_the_bearer_token(stub: Stub, kube: Kube) -> None:
    stub.script((404, {}, status(404, "NotFound", 'configmaps "a" not found')))
    assert kube.get(kinds.CONFIGMAP, "a", "ns") is None
    assert stub.requests[0].path == "/api/v1/namespaces/ns/configmaps/a"
    assert stub.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    ("code", "reason", "cls", "exit_code"),
    [(404, "NotFound", APINotFound, 3), (409, "Conflict", APIConflict, 3),
     (403, "Forbidden", APIForbidden, 3), (422, "Invalid", APIInvalid, 3),
     (400, "BadRequest", APIError, 3), (410, "Expired", WatchExpired, 3)],
)
def test_error_statuses_become_typed_errors_with_the_server_message(
    stub: Stub, kube: Kube, code: int, reason: str, cls: type[APIError], exit_code: int,
) -> None:
    message = f'configmaps "a" says {reason} (verb update, resource configmaps)'
    stub.script((code, {}, status(code, reason, message)))
    with pytest.raises(cls) as info:
        kube.replace(cm(rv="5"))
    err = info.value
    assert err.status == code and err.reason == reason
    assert message in err.message and err.hint
    assert exit_code_for(err) == exit_code
    assert err.__cause__ is None or not isinstance(err.__cause__, APIError)
    assert len(stub.requests) == 1  # not retried


def test_conflict_on_replace_carries_the_resource_version_sent(stub: Stub, kube: Kube) -> None:
    stub.script((409, {}, status(409, "Conflict", "the object has been modified")))
    with pytest.raises(APIConflict) as info:
        kube.replace(cm(rv="41"))
    assert info.value.reason == "Conflict"
    assert stub.requests[0].method == "PUT"
    assert stub.requests[0].body["metadata"]["resourceVersion"] == "41"


def test_already_exists_on_a_first_try_is_plain(stub: Stub, kube: Kube) -> None:
    stub.script((409, {}, status(409, "AlreadyExists", 'configmaps "a" already exists')))
    with pytest.raises(APIAlreadyExists) as info:
        kube.create(cm())
    assert info.value.reason == "AlreadyExists" and not info.value.after_retry
    assert isinstance(info.value, APIConflict)


def test_a_retried_create_that_finds_its_object_says_so(
    stub: Stub, kube: Kube, sleeps: list[float]
) -> None:
    stub.script(
        (503, {}, status(503, "ServiceUnavailable", "etcd leader changed")),
        (409, {}, status(409, "AlreadyExists", 'configmaps "a" already exists')),
    )
    with pytest.raises(APIAlreadyExists) as info:
        kube.create(cm())
    assert info.value.after_retry
    assert "earlier attempt" in info.value.hint
    assert [r.method for r in stub.requests] == ["POST", "POST"]
    assert len(sleeps) == 1


def test_429_with_retry_after_is_waited_out(stub: Stub, kube: Kube, sleeps: list[float]) -> None:
    stub.script(
        (429, {"Retry-After": "3"}, status(429, "TooManyRequests", "slow down")),
        (200, {}, cm(rv="9")),
    )
    before = kube.request_count
    got = kube.get(kinds.CONFIGMAP, "a", "ns")
    assert got is not None  # get() is None on a 404 only
    assert got["metadata"]["resourceVersion"] == "9"
    assert sleeps == [3.0]
    assert kube.request_count - before == 2 and kube.retry_count == 1


def test_persistent_5xx_gives_up_within_the_budget(stub: Stub, sleeps: list[float]) -> None:
    stub.handler = lambda rec: (500, {}, status(500, "InternalError", "boom"))
    kube = Kube.for_server(stub.url, retry=fast(sleeps, attempts=6, max_wait_seconds=3.0))
    with pytest.raises(APIError) as info:
        kube.patch(kinds.CONFIGMAP, "a", "ns", {"data": {"k": "w"}})
    assert info.value.status == 500 and "gave up after" in info.value.message
    assert sum(sleeps) <= 3.0
    assert len(stub.requests) == len(sleeps) + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_closed_port_is_unreachable_after_the_budget(sleeps: list[float]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    kube = Kube.for_server(url, TOKEN, retry=fast(sleeps))
    with pytest.raises(APIUnreachable) as info:
        kube.ping()
    err = info.value
    assert err.message.startswith(f"Cannot reach the Kubernetes API server at {url}: ")
    assert "refused" in err.message.lower()
    assert "--kubeconfig" in err.hint and exit_code_for(err) == 3
    assert len(sleeps) == 5 and sum(sleeps) <= RetryPolicy().max_wait_seconds
    assert kube.request_count == 6


def test_no_token_in_errors_or_repr(stub: Stub, kube: Kube, sleeps: list[float]) -> None:
    stub.script((403, {}, status(403, "Forbidden", 'User "bob" cannot delete configmaps')))
    with pytest.raises(APIForbidden) as forbidden:
        kube.delete(kinds.CONFIGMAP, "a", "ns")
    unreachable_kube = Kube.for_server(f"http://127.0.0.1:{free_port()}", TOKEN,
                                       retry=fast(sleeps, attempts=2))
    with pytest.raises(APIUnreachable) as unreachable:
        unreachable_kube.get(kinds.POD, "p", "ns")
    for text in (str(forbidden.value), forbidden.value.hint, str(unreachable.value),
                 unreachable.value.hint, repr(kube), repr(unreachable_kube),
                 repr(forbidden.value), repr(unreachable.value.__cause__)):
        assert TOKEN not in text
    assert "cannot delete configmaps" in forbidden.value.message


def test_writes_carry_dry_run_and_reads_do_not(stub: Stub, sleeps: list[float]) -> None:
    stub.handler = lambda rec: (200, {}, cm(rv="1"))
    kube = Kube.for_server(stub.url, retry=fast(sleeps))
    kube.get(kinds.CONFIGMAP, "a", "ns")
    kube.create(cm(), dry_run=True)
    kube.replace(cm(rv="1"), dry_run=True)
    kube.patch(kinds.CONFIGMAP, "a", "ns", {"data": {"k": "x"}}, dry_run=True)
    kube.delete(kinds.CONFIGMAP, "a", "ns", dry_run=True)
    dry = {r.method: r.query.get("dryRun") for r in stub.requests}
    assert dry == {"GET": None, "POST": ["All"], "PUT": ["All"], "PATCH": ["All"],
                   "DELETE": ["All"]}


def test_patch_types_and_delete_preconditions_on_the_wire(stub: Stub, kube: Kube) -> None:
    stub.handler = lambda rec: (200, {}, cm(rv="2"))
    kube.patch(kinds.DAEMONSET, "ds", "ns", {"metadata": {"labels": {"a": "b"}}})
    kube.patch(kinds.DAEMONSET, "ds", "ns", {"spec": {}}, patch_type="strategic")
    kube.patch(kinds.DAEMONSET, "ds", "ns",
               [{"op": "remove", "path": "/metadata/labels/a"}], patch_type="json")
    kube.delete(kinds.SERVICE, "svc", "ns", uid="u-1", resource_version="7")
    types = [r.headers["content-type"] for r in stub.requests[:3]]
    assert types == ["application/merge-patch+json", "application/strategic-merge-patch+json",
                     "application/json-patch+json"]
    assert stub.requests[2].body == [{"op": "remove", "path": "/metadata/labels/a"}]
    assert stub.requests[3].path == "/api/v1/namespaces/ns/services/svc"
    assert stub.requests[3].body["preconditions"] == {"uid": "u-1", "resourceVersion": "7"}


def test_list_follows_continue_and_restarts_when_the_token_expires(
    stub: Stub, kube: Kube
) -> None:
    def page(names: list[str], rv: str, cont: str = "") -> tuple[int, dict[str, str], Any]:
        meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
        return 200, {}, {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta,
                         "items": [{"metadata": {"name": n}} for n in names]}

    stub.script(
        page(["a", "b"], "10", "tok1"),
        (410, {}, status(410, "Expired", "The provided continue parameter is too old")),
        page(["a", "b"], "12", "tok2"),
        page(["c"], "12"),
    )
    listed = kube.list(kinds.CONFIGMAP, "ns", label_selector="x in (1,2)", page_size=2)
    assert [o["metadata"]["name"] for o in listed.items] == ["a", "b", "c"]
    assert listed.resource_version == "12"
    assert all(o["kind"] == "ConfigMap" and o["apiVersion"] == "v1" for o in listed.items)
    queries = [r.query for r in stub.requests]
    assert queries[0] == {"limit": ["2"], "labelSelector": ["x in (1,2)"]}
    assert queries[1]["continue"] == ["tok1"] and queries[3]["continue"] == ["tok2"]


def test_watch_yields_events_skips_bookmarks_and_raises_on_expiry(
    stub: Stub, kube: Kube
) -> None:
    lines = [
        {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "5"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
        {"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "7"}}},
        {"type": "ERROR", "object": status(410, "Expired", "too old resource version: 4")},
    ]
    body = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
    stub.script((200, {}, body))
    marks: list[str] = []
    events = kube.watch(kinds.CONFIGMAP, "ns", resource_version="4", timeout_seconds=5,
                        bookmarked=marks.append)
    seen = []
    with pytest.raises(WatchExpired):
        for etype, obj in events:
            seen.append((etype, obj["metadata"]["name"], obj["kind"]))
    assert seen == [("ADDED", "a", "ConfigMap"), ("DELETED", "a", "ConfigMap")]
    assert marks == ["6"]  # the bookmark's version, told apart from the events
    assert stub.requests[0].query == {"watch": ["1"], "resourceVersion": ["4"],
                                      "timeoutSeconds": ["5"], "allowWatchBookmarks": ["true"]}


def test_a_table_watch_reads_rows_and_copes_with_a_server_that_sends_objects(
    stub: Stub, kube: Kube
) -> None:
    columns = [{"name": n, "type": "integer"} for n in
               ("Name", "Desired", "Current", "Ready", "Up-to-date", "Available")]

    def table(cells: list[Any], rv: str, headers: bool) -> dict[str, Any]:
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": rv},
                "columnDefinitions": columns if headers else None,
                "rows": [{"cells": cells, "object": None}]}

    rows = [{"type": "MODIFIED", "object": table(["d", 3, 3, 2, 1, 2], "8", True)},
            {"type": "MODIFIED", "object": table(["d", 3, 3, 3, 3, 3], "9", False)}]
    # The same watch from a server (or proxy) that ignored the Table request: whole objects.
    objects = [{"type": "MODIFIED", "object": {
        "kind": "DaemonSet", "metadata": {"name": "d", "resourceVersion": "9"},
        "status": {"desiredNumberScheduled": 3, "updatedNumberScheduled": 3,
                   "numberAvailable": 3, "numberReady": 3, "currentNumberScheduled": 3}}}]
    for script in (rows, objects):
        stub.script((200, {}, b"".join(json.dumps(x).encode() + b"\n" for x in script)))
    seen = [[(etype, rollout_view(row)["status"]["updatedNumberScheduled"],
              row.resource_version)
             for etype, row in kube.watch_table(kinds.DAEMONSET, "ns", resource_version="7",
                                                field_selector="metadata.name=d")]
            for _ in range(2)]
    assert seen == [[("MODIFIED", 1, "8"), ("MODIFIED", 3, "9")], [("MODIFIED", 3, "9")]]
    sent = stub.requests[0]
    assert sent.headers["accept"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
    assert sent.query["includeObject"] == ["None"]


def test_printed_reads_take_rows_with_metadata_or_whole_objects_from_a_server_that_ignores_it(
    stub: Stub, kube: Kube
) -> None:
    columns = [{"name": n, "type": "string"} for n in ("Name", "Ready", "Status", "Node")]
    meta = {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "8",
            "labels": {"app": "a"}}
    row = {"cells": ["p", "1/1", "Running", "n1"],
           "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                      "metadata": meta}}
    table = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
             "metadata": {"resourceVersion": "9"}, "columnDefinitions": columns,
             "rows": [row]}
    whole = {"metadata": meta, "spec": {"nodeName": "n1"},
             "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    stub.script((200, {}, table),
                (200, {}, {"kind": "PodList", "metadata": {"resourceVersion": "9"},
                           "items": [whole]}),
                (200, {}, json.dumps({"type": "ADDED", "object": {**table, "rows": [row]}})
                 .encode() + b"\n" + json.dumps({"type": "MODIFIED", "object": whole})
                 .encode() + b"\n"))
    views = [kube.collect(kinds.POD, "ns", keep=PodView.of, printed=True)[0][0]
             for _ in range(2)]
    assert [(v.name, v.node, v.ready, v.printed) for v in views] == [
        ("p", "n1", True, True), ("p", "n1", True, False)]
    events = list(kube.watch(kinds.POD, "ns", resource_version="9", printed=True))
    assert [(etype, is_printed(obj), obj["metadata"]["uid"]) for etype, obj in events] == [
        ("ADDED", True, "u"), ("MODIFIED", False, "u")]
    for sent in stub.requests:
        assert sent.headers["accept"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
        assert sent.query["includeObject"] == ["Metadata"]


def test_can_i_sends_a_self_subject_access_review(stub: Stub, kube: Kube) -> None:
    def answer(rec: Recorded) -> tuple[int, dict[str, str], Any]:
        attrs = rec.body["spec"]["resourceAttributes"]
        allowed = attrs["verb"] == "get"
        return 201, {}, {**rec.body, "status": {"allowed": allowed,
                                                "reason": "" if allowed else "no RBAC rule"}}

    stub.handler = answer
    # an access review is a question, not a write: it never carries dryRun
    assert kube.can_i("get", kinds.DAEMONSET, "ns") == (True, "")
    assert kube.can_i("patch", kinds.DAEMONSET, "ns", "ds") == (False, "no RBAC rule")
    rec = stub.requests[1]
    assert rec.path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    assert rec.body["spec"]["resourceAttributes"] == {
        "verb": "patch", "group": "apps", "resource": "daemonsets", "namespace": "ns",
        "name": "ds"}
    assert "dryRun" not in rec.query


def test_has_api_uses_discovery_once(stub: Stub, kube: Kube) -> None:
    def answer(rec: Recorded) -> tuple[int, dict[str, str], Any]:
        if rec.path == "/apis/monitoring.coreos.com/v1":
            return 404, {}, status(404, "NotFound", "the server could not find it")
        return 200, {}, {"kind": "APIResourceList", "resources": [{"name": "clusterpolicies"}]}

    stub.handler = answer
    assert not kube.has_api("monitoring.coreos.com", "v1")
    assert not kube.has_api("monitoring.coreos.com", "v1")
    assert kube.has_api("nvidia.com", "v1") and kube.has_kind(kinds.CLUSTER_POLICY)
    assert len(stub.requests) == 2
