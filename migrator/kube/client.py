"""`Kube`: the tool's whole view of the Kubernetes API, as raw JSON dicts.

Verbs are thin: build the path and query from the shared Kind table, send through the one
choke point (`Transport.send`), parse the JSON. Reads return plain dicts (list items get their
`apiVersion`/`kind` filled in, which the real server leaves out). A dry run is a property of
the request, not of the connection (Helm's `DryRunStrategy`): every write takes `dry_run`,
sent as `dryRun=All`, and its answer is never taken for what the cluster holds.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from migrator.errors import APINotFound, WatchExpired
from migrator.kube import config, watching
from migrator.kube.discovery import Discovery
from migrator.kube.retrying import RetryPolicy
from migrator.kube.transport import Transport
from migrator.model import kinds, tables
from migrator.model.kinds import Kind
from migrator.model.printed import printed_object

Obj = dict[str, Any]
JsonPatch = list[Obj]
T = TypeVar("T")

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


PAGE_SIZE = 500  # items per list request, kubectl's --chunk-size default
# After a continue token expires (410) mid-read: paginated restarts, then one unpaginated list
# (client-go's pager falls back to a full list: tools/pager/pager.go `FullListIfExpired`).
EXPIRED_RESTARTS = 2


@dataclass(frozen=True)
class Page:
    """One page of a list: its items and the list's resourceVersion."""

    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class ObjList:
    """A whole list (all pages): watch from `resource_version` to follow it."""

    items: list[Obj]
    resource_version: str


def _same(obj: Obj) -> Obj:
    return obj


def kind_of(obj: Obj) -> Kind:
    """The Kind of a raw object from its `kind`, checked against its `apiVersion`."""
    kind = kinds.BY_KIND.get(str(obj.get("kind")))
    if kind is None or obj.get("apiVersion") != kind.api_version:
        raise ValueError(f"unsupported object type {obj.get('apiVersion')}/{obj.get('kind')}")
    return kind


def _name_ns(obj: Obj, kind: Kind) -> tuple[str, str | None]:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError(f"{kind.kind} without metadata.name")
    namespace = meta.get("namespace") if kind.namespaced else None
    if kind.namespaced and not namespace:
        raise ValueError(f"{kind.kind} {name} without metadata.namespace")
    return str(name), namespace


class Kube(Discovery):
    """A connection to one API server. Thread-safe; share one per run."""

    def __init__(
        self, connection: config.Connection, *, retry: RetryPolicy | None = None,
        page_size: int = PAGE_SIZE,
    ) -> None:
        self._transport = Transport(connection.configuration, retry or RetryPolicy())
        self.server: str = self._transport.server
        self.context = connection.context  # the kubeconfig context ("" when not from one)
        self.page_size = page_size  # the `limit` of every paginated list (0: unpaginated)
        self._apis: dict[tuple[str, str], frozenset[str] | None] = {}
        self._apis_lock = threading.Lock()
        self._observers: list[Callable[[Kind, Obj], None]] = []  # see `observe`

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, context: str | None = None, *,
        retry: RetryPolicy | None = None, page_size: int = PAGE_SIZE,
    ) -> Kube:
        """From --kubeconfig > $KUBECONFIG > ~/.kube/config > in-cluster; else UsageError."""
        return cls(config.load(kubeconfig, context), retry=retry, page_size=page_size)

    @classmethod
    def for_server(
        cls, url: str, token: str | None = None, *, retry: RetryPolicy | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Kube:
        """Straight to a URL with an optional bearer token (the simulated cluster, tests)."""
        return cls(config.for_server(url, token), retry=retry, page_size=page_size)

    def __repr__(self) -> str:
        return f"Kube(server={self.server!r})"

    @property
    def request_count(self) -> int:
        """HTTP requests sent so far, retries included."""
        return self._transport.requests

    @property
    def retry_count(self) -> int:
        return self._transport.retries

    @property
    def server_date(self) -> datetime | None:
        """The API server's time as of its latest answer (`Transport.server_date`)."""
        return self._transport.server_date

    def close(self) -> None:
        self._transport.close()

    # ---- what the tool has seen ----------------------------------------------------------

    def observe(self, seen: Callable[[Kind, Obj], None]) -> Callable[[], None]:
        """Call `seen(kind, object)` for every object this connection writes (its answer),
        GETs, or receives on a watch — not for list items. A cache uses it to know which
        versions it must have delivered before it is read ("read your writes",
        engine/informer.py). Returns the function that stops it."""
        self._observers.append(seen)
        return lambda: self._observers.remove(seen)

    def _saw(self, kind: Kind, obj: Any) -> None:
        if not isinstance(obj, dict) or obj.get("kind") not in (None, kind.kind):
            return  # a Status (an already-deleted object's DELETE) is not the object
        for seen in list(self._observers):
            seen(kind, obj)

    # ---- the choke point -------------------------------------------------------------------

    def _wrote(self, kind: Kind, answer: Any, dry_run: bool) -> None:
        if not dry_run:  # a dry run's answer is never stored: no event will carry it
            self._saw(kind, answer)

    @staticmethod
    def _write_query(dry_run: bool) -> list[tuple[str, str]]:
        return [("dryRun", "All")] if dry_run else []

    # ---- reads -------------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            obj: Obj = self._transport.send("GET", kind.object_path(name, namespace)).json()
        except APINotFound:
            return None
        self._saw(kind, obj)
        return obj

    def pages(
        self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
        field_selector: str | None = None, page_size: int | None = None,
        printed: bool = False,
    ) -> Iterator[Page]:
        """The list one page at a time (following `continue`), so memory stays one page big.
        `page_size` defaults to the connection's; 0 asks for everything in one answer.
        `printed` asks for the printed rows with each object's metadata instead of whole
        objects (`model/printed.py`); a server that ignores that sends whole objects."""
        path = kind.collection_path(namespace)
        size = self.page_size if page_size is None else page_size
        base: list[tuple[str, str]] = [("limit", str(size))] if size > 0 else []
        if label_selector:
            base.append(("labelSelector", label_selector))
        if field_selector:
            base.append(("fieldSelector", field_selector))
        if printed:
            base.append(("includeObject", "Metadata"))
        accept = tables.TABLE_ACCEPT if printed else "application/json"
        token = ""
        while True:
            query = [*base, ("continue", token)] if token else base
            doc = self._transport.send("GET", path, query, accept=accept).json() or {}
            items: list[Obj] = (self._printed_items(kind, doc) if doc.get("kind") == "Table"
                                else doc.get("items") or [])
            for item in items:
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
            meta = doc.get("metadata") or {}
            yield Page(items, str(meta.get("resourceVersion") or ""))
            token = str(meta.get("continue") or "")
            if not token:
                return

    @staticmethod
    def _printed_items(kind: Kind, table: Obj) -> builtins.list[Obj]:
        columns = tables.column_names(table)
        if columns is None:
            raise tables.TableError("a Table list without column definitions")
        return [printed_object(row, kind.api_version, kind.kind)
                for row in tables.rows(table, columns)]

    def list(
        self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
        field_selector: str | None = None, page_size: int | None = None,
    ) -> ObjList:
        """All items (see `collect`)."""
        items, version = self.collect(kind, namespace, label_selector=label_selector,
                                      field_selector=field_selector, page_size=page_size,
                                      keep=_same)
        return ObjList(items, version)

    def collect(
        self, kind: Kind, namespace: str | None = None, *, keep: Callable[[Obj], T],
        label_selector: str | None = None, field_selector: str | None = None,
        page_size: int | None = None, printed: bool = False,
    ) -> tuple[builtins.list[T], str]:
        """`keep(item)` for every item, page by page (a caller that keeps less than the whole
        object holds one page at a time), and the list's resourceVersion.

        A continue token that expires mid-read (410: the first page's version was compacted,
        as on a busy cluster) restarts the read from scratch, never mixing two versions;
        after EXPIRED_RESTARTS the last try is one unpaginated list, which cannot expire."""
        for attempt in range(EXPIRED_RESTARTS + 1):
            last = attempt == EXPIRED_RESTARTS
            kept: builtins.list[T] = []
            version = ""
            try:
                for page in self.pages(kind, namespace, label_selector=label_selector,
                                       field_selector=field_selector,
                                       page_size=0 if last else page_size, printed=printed):
                    kept.extend(keep(item) for item in page.items)
                    version = version or page.resource_version
            except WatchExpired:
                if last:
                    raise
                continue
            return kept, version
        raise AssertionError("unreachable")

    def watch(
        self, kind: Kind, namespace: str | None = None, *, resource_version: str,
        label_selector: str | None = None, field_selector: str | None = None,
        timeout_seconds: int = 60, printed: bool = False,
        bookmarked: Callable[[str], None] | None = None,
    ) -> watching.Events:
        """(type, object) events after `resource_version` until the server ends the watch;
        `printed`: each object's printed row with its metadata (`model/printed.py`).

        The request is sent now (so 403/410 raise here); events are read lazily. Raises
        WatchExpired when the version is too old: list again and watch from the new one.
        `bookmarked` is told each BOOKMARK's resourceVersion (`watching`).
        """
        if not printed:
            return self._watch(kind, namespace, resource_version, label_selector,
                               field_selector, timeout_seconds, bookmarked=bookmarked)
        stream = self._watch(kind, namespace, resource_version, label_selector, field_selector,
                             timeout_seconds, table="Metadata", bookmarked=bookmarked)
        return watching.TableStream(
            stream, lambda row: printed_object(row, kind.api_version, kind.kind), _same,
            seen=lambda obj: self._saw(kind, obj))

    def watch_table(
        self, kind: Kind, namespace: str | None = None, *, resource_version: str,
        label_selector: str | None = None, field_selector: str | None = None,
        timeout_seconds: int = 60,
    ) -> watching.TableStream[tables.Row]:
        """As `watch`, but each event is the server's printed row of the object
        (`includeObject=None`): the cells `kubectl get -w` shows, a fraction of the object's
        bytes. Rows are not objects: the run's cache is not told of them."""
        stream = self._watch(kind, namespace, resource_version, label_selector, field_selector,
                             timeout_seconds, table="None")
        return watching.TableStream(stream, lambda row: row, tables.object_row)

    def _watch(
        self, kind: Kind, namespace: str | None, resource_version: str,
        label_selector: str | None, field_selector: str | None, timeout_seconds: int, *,
        table: str = "", bookmarked: Callable[[str], None] | None = None,
    ) -> watching.Stream:
        """The watch request; `table` is the `includeObject` of a Table watch ("" for none).
        Bookmarks are asked for, and a stream silent past `watching.idle_seconds` ends."""
        path = kind.collection_path(namespace)
        query = [
            ("watch", "1"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            ("allowWatchBookmarks", "true"),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if table:
            query.append(("includeObject", table))
        response = self._transport.send(
            "GET", path, query, stream=True,
            read_timeout=watching.idle_seconds(timeout_seconds,
                                               self._transport.policy.watch_bookmark_seconds),
            accept=tables.TABLE_ACCEPT if table else "application/json",
        )
        seen = None if table else (lambda obj: self._saw(kind, obj))
        return watching.Stream(response.raw, path=path, api_version=kind.api_version,
                               kind=kind.kind, seen=seen, bookmarked=bookmarked)

    # ---- writes ------------------------------------------------------------------------

    def create(self, obj: Obj, *, kind: Kind | None = None, dry_run: bool = False) -> Obj:
        """POST the object; APIAlreadyExists (a 409) when the name is taken. `kind` names a
        type outside the table `kind_of` reads (the guard's `events.k8s.io/v1` Events, whose
        kind name core/v1 already uses); `dry_run`: validated and answered, not persisted."""
        kind = kind or kind_of(obj)
        _, namespace = _name_ns(obj, kind)
        created: Obj = self._transport.send(
            "POST", kind.collection_path(namespace), self._write_query(dry_run), obj
        ).json()
        self._wrote(kind, created, dry_run)
        return created

    def replace(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        """PUT the whole object; its metadata.resourceVersion makes a stale write an APIConflict."""
        kind = kind_of(obj)
        name, namespace = _name_ns(obj, kind)
        replaced: Obj = self._transport.send(
            "PUT", kind.object_path(name, namespace), self._write_query(dry_run), obj
        ).json()
        self._wrote(kind, replaced, dry_run)
        return replaced

    def patch(
        self, kind: Kind, name: str, namespace: str | None, body: Obj | JsonPatch, *,
        patch_type: Literal["merge", "strategic", "json"] = "merge", dry_run: bool = False,
    ) -> Obj:
        """PATCH with a merge (default), strategic-merge or JSON patch.

        Retried like every request, so a JSON patch must be idempotent (no `add` to `/-`;
        guard with a `test` op) — merge patches are by nature.
        """
        patched: Obj = self._transport.send(
            "PATCH", kind.object_path(name, namespace), self._write_query(dry_run), body,
            PATCH_TYPES[patch_type],
        ).json()
        self._wrote(kind, patched, dry_run)
        return patched

    def delete(
        self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None,
        resource_version: str | None = None, propagation_policy: str | None = None,
        dry_run: bool = False,
    ) -> None:
        """DELETE, optionally only if uid/resourceVersion still match (else APIConflict)."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        deleted = self._transport.send("DELETE", kind.object_path(name, namespace),
                                       self._write_query(dry_run), options).json()
        self._wrote(kind, deleted, dry_run)
