"""`Kube`: the tool's whole view of the Kubernetes API, as raw JSON dicts, every verb sent through
`Transport.send`. A write's `dry_run` (`dryRun=All`) answer is never taken for what the cluster
holds. Also access reviews, API discovery (cached per group/version) and a ping."""

from __future__ import annotations

import builtins
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from migrator.errors import APINotFound, WatchExpired
from migrator.kube import config, watching
from migrator.kube.transport import RetryPolicy, Transport
from migrator.model import kinds, tables
from migrator.model.kinds import Kind
from migrator.model.printed import printed_object

Obj = dict[str, Any]
JsonPatch = list[Obj]
T = TypeVar("T")

PATCH_TYPES = {"merge": "application/merge-patch+json", "json": "application/json-patch+json",
               "strategic": "application/strategic-merge-patch+json"}
PAGE_SIZE = 500  # items per list request, kubectl's --chunk-size default
# Paginated restarts after a 410 mid-read, then one full list (client-go's `FullListIfExpired`).
EXPIRED_RESTARTS = 2


@dataclass(frozen=True)
class ObjList:
    """Items of a list (a page, or all pages) and the list's resourceVersion to watch from."""

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


def _dry(dry_run: bool) -> list[tuple[str, str]]:
    return [("dryRun", "All")] if dry_run else []


def _filters(label_selector: str | None, field_selector: str | None,
             table: str) -> list[tuple[str, str]]:
    """The selectors, and `includeObject` for a Table read ("" for none)."""
    return [(k, v) for k, v in (("labelSelector", label_selector),
                                ("fieldSelector", field_selector), ("includeObject", table)) if v]


def _accept(table: str) -> str:
    return tables.TABLE_ACCEPT if table else "application/json"


class Kube(Transport):
    """A connection to one API server. Thread-safe; share one per run."""

    def __init__(self, configuration: Any, context: str = "", *,
                 retry: RetryPolicy | None = None, page_size: int = PAGE_SIZE,
                 exec_failures: config.ExecFailures | None = None) -> None:
        super().__init__(configuration, retry or RetryPolicy(), exec_failures)
        self.context = context  # the kubeconfig context ("" for a bare URL)
        self.page_size = page_size  # the `limit` of every paginated list (0: unpaginated)
        self._apis: dict[tuple[str, str], frozenset[str] | None] = {}
        self._apis_lock = threading.Lock()
        self._observers: list[Callable[[Kind, Obj], None]] = []  # see `observe`

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None, *,
                retry: RetryPolicy | None = None) -> Kube:
        """From --kubeconfig > $KUBECONFIG > ~/.kube/config > in-cluster; else UsageError."""
        exec_failures = config.ExecFailures().install()  # until the connection's close()
        try:
            configuration, chosen = config.load(kubeconfig, context)
        except BaseException:
            exec_failures.uninstall()
            raise
        return cls(configuration, chosen, retry=retry, exec_failures=exec_failures)

    @classmethod
    def for_server(cls, url: str, token: str | None = None, *, retry: RetryPolicy | None = None,
                   page_size: int = PAGE_SIZE) -> Kube:
        """Straight to a URL with an optional bearer token (the simulated cluster, tests)."""
        return cls(config.for_server(url, token), retry=retry, page_size=page_size)

    def __repr__(self) -> str:
        return f"Kube(server={self.server!r})"

    def observe(self, seen: Callable[[Kind, Obj], None]) -> Callable[[], None]:
        """Call `seen(kind, object)` for every object written, got or watched (not listed), so a
        cache knows what it must have delivered (engine/informer.py). Returns the unsubscriber."""
        self._observers.append(seen)
        return lambda: self._observers.remove(seen)

    def _saw(self, kind: Kind, obj: Any, dry_run: bool = False) -> None:
        if dry_run or not isinstance(obj, dict) or obj.get("kind") not in (None, kind.kind):
            return  # a dry run's answer, or a Status (an already-deleted object's DELETE)
        for seen in list(self._observers):
            seen(kind, obj)

    def can_i(self, verb: str, kind: Kind, namespace: str | None = None, name: str | None = None,
              subresource: str | None = None) -> tuple[bool, str]:
        """SelfSubjectAccessReview: may the current user do this? (allowed, reason)."""
        attributes = {"verb": verb, "group": kind.group, "resource": kind.plural, **{
            k: v for k, v in (("namespace", namespace), ("name", name),
                              ("subresource", subresource)) if v}}
        status = self._review(kinds.SELF_SUBJECT_ACCESS_REVIEW, {"resourceAttributes": attributes})
        reason = str(status.get("reason") or status.get("evaluationError") or "")
        return bool(status.get("allowed")), reason

    def can_they(self, spec: Obj) -> bool:
        """SubjectAccessReview: may the user in `spec` (user, groups, resourceAttributes) do it?"""
        return bool(self._review(kinds.SUBJECT_ACCESS_REVIEW, spec).get("allowed"))

    def _review(self, kind: Kind, spec: Obj) -> Obj:
        review = {"apiVersion": kind.api_version, "kind": kind.kind, "spec": spec}
        answer = self.send("POST", kind.collection_path(), (), review) or {}
        return answer.get("status") or {}

    def _resources(self, group: str, version: str) -> frozenset[str] | None:
        """Plural names served under group/version (discovery, cached); None if not served."""
        with self._apis_lock:
            if (group, version) in self._apis:
                return self._apis[(group, version)]
        try:
            doc = self.send("GET", f"/apis/{group}/{version}" if group
                            else f"/api/{version}") or {}
            found = frozenset(str(r.get("name")) for r in doc.get("resources") or [])
        except APINotFound:
            found = None
        with self._apis_lock:
            self._apis[(group, version)] = found
        return found

    def has_api(self, group: str, version: str) -> bool:
        """Does the server serve this group/version (for example a CRD's)?"""
        return self._resources(group, version) is not None

    def has_kind(self, kind: Kind) -> bool:
        """Does the server serve this resource type (its CRD is installed)?"""
        return kind.plural in (self._resources(kind.group, kind.version) or ())

    def ping(self) -> None:
        """One cheap request: APIUnreachable when there is no answer, APIForbidden when refused."""
        with contextlib.suppress(ValueError):  # any answer will do, JSON or not
            try:
                self.send("GET", "/version")
            except APINotFound:
                self.send("GET", "/api")  # a server without /version still answered

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            obj: Obj = self.send("GET", kind.object_path(name, namespace))
        except APINotFound:
            return None
        self._saw(kind, obj)
        return obj

    def pages(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
              field_selector: str | None = None, page_size: int | None = None,
              printed: bool = False) -> Iterator[ObjList]:
        """The list one page at a time; `page_size` 0: all in one; `printed`: the printed rows with
        each object's metadata (`model/printed.py`)."""
        path = kind.collection_path(namespace)
        size = self.page_size if page_size is None else page_size
        table = "Metadata" if printed else ""
        base = [("limit", str(size))] if size > 0 else []
        base += _filters(label_selector, field_selector, table)
        token = ""
        while True:
            query = [*base, ("continue", token)] if token else base
            doc = self.send("GET", path, query, accept=_accept(table)) or {}
            items: list[Obj] = doc.get("items") or []
            if doc.get("kind") == "Table":
                columns = tables.column_names(doc)
                if columns is None:
                    raise tables.TableError("a Table list without column definitions")
                items = [printed_object(row, kind.api_version, kind.kind)
                         for row in tables.rows(doc, columns)]
            for item in items:
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
            meta = doc.get("metadata") or {}
            yield ObjList(items, str(meta.get("resourceVersion") or ""))
            token = str(meta.get("continue") or "")
            if not token:
                return

    def list(self, kind: Kind, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None, page_size: int | None = None) -> ObjList:
        """All items (see `collect`)."""
        return ObjList(*self.collect(kind, namespace, label_selector=label_selector,
                                     field_selector=field_selector, page_size=page_size,
                                     keep=_same))

    def collect(self, kind: Kind, namespace: str | None = None, *, keep: Callable[[Obj], T],
                label_selector: str | None = None, field_selector: str | None = None,
                page_size: int | None = None,
                printed: bool = False) -> tuple[builtins.list[T], str]:
        """`keep(item)` for every item, page by page, and the list's resourceVersion. A continue
        token expired mid-read (410) restarts the read; after EXPIRED_RESTARTS the last try is one
        unpaginated list, which cannot expire."""
        def read(size: int | None) -> tuple[builtins.list[T], str]:
            kept: builtins.list[T] = []
            version = ""
            for page in self.pages(kind, namespace, label_selector=label_selector,
                                   field_selector=field_selector, page_size=size,
                                   printed=printed):
                kept.extend(keep(item) for item in page.items)
                version = version or page.resource_version
            return kept, version

        for _ in range(EXPIRED_RESTARTS):
            with contextlib.suppress(WatchExpired):
                return read(page_size)
        return read(0)

    def watch(self, kind: Kind, namespace: str | None = None, *, resource_version: str,
              label_selector: str | None = None, field_selector: str | None = None,
              timeout_seconds: int = 60, printed: bool = False, bookmarked: Callable[[str],
              None] | None = None) -> watching.Events:
        """(type, object) events after `resource_version` until the server ends the watch; sent
        now (403/410 raise here), read lazily. `printed` as in `pages`; `bookmarked` is told each
        BOOKMARK's resourceVersion."""
        return self._watch(
            kind, namespace, resource_version, label_selector, field_selector, timeout_seconds,
            "Metadata" if printed else "", _same, bookmarked=bookmarked,
            of_row=(lambda row: printed_object(row, kind.api_version, kind.kind)) if printed
            else None)

    def watch_table(self, kind: Kind, namespace: str | None = None, *, resource_version: str,
                    label_selector: str | None = None, field_selector: str | None = None,
                    timeout_seconds: int = 60) -> watching.Stream[tables.Row]:
        """As `watch`, each event the object's printed row (`includeObject=None`), not observed."""
        return self._watch(kind, namespace, resource_version, label_selector, field_selector,
                           timeout_seconds, "None", tables.object_row, of_row=lambda row: row,
                           observed=False)

    def _watch(self, kind: Kind, namespace: str | None, resource_version: str,
               label_selector: str | None, field_selector: str | None, timeout_seconds: int,
               table: str, of_object: Callable[[Obj], T], *,
               of_row: Callable[[tables.Row], T] | None = None, observed: bool = True,
               bookmarked: Callable[[str], None] | None = None) -> watching.Stream[T]:
        path = kind.collection_path(namespace)
        query = [("watch", "1"), ("resourceVersion", resource_version),
                 ("timeoutSeconds", str(timeout_seconds)), ("allowWatchBookmarks", "true"),
                 *_filters(label_selector, field_selector, table)]
        raw = self.send("GET", path, query, stream=True, accept=_accept(table), read_timeout=(
            watching.idle_seconds(timeout_seconds, self.policy.watch_bookmark_seconds)))
        return watching.Stream(raw, watching.read_events(
            raw, path=path, api_version=kind.api_version, kind=kind.kind,
            of_object=of_object, of_row=of_row, bookmarked=bookmarked,
            seen=(lambda obj: self._saw(kind, obj)) if observed else None))

    def create(self, obj: Obj, *, kind: Kind | None = None, dry_run: bool = False) -> Obj:
        """POST the object; `kind` for a type outside `kind_of`'s table."""
        kind = kind or kind_of(obj)
        created: Obj = self.send("POST", kind.collection_path(_name_ns(obj, kind)[1]),
                                 _dry(dry_run), obj)
        self._saw(kind, created, dry_run)
        return created

    def replace(self, obj: Obj, *, dry_run: bool = False) -> Obj:
        """PUT the whole object; its metadata.resourceVersion makes a stale write an APIConflict."""
        kind = kind_of(obj)
        replaced: Obj = self.send("PUT", kind.object_path(*_name_ns(obj, kind)), _dry(dry_run),
                                  obj)
        self._saw(kind, replaced, dry_run)
        return replaced

    def patch(self, kind: Kind, name: str, namespace: str | None, body: Obj | JsonPatch, *,
              patch_type: Literal["merge", "strategic", "json"] = "merge",
              dry_run: bool = False) -> Obj:
        """PATCH; retried like every request, so a JSON patch must be idempotent (guard it with a
        `test`, never `add` to `/-`)."""
        patched: Obj = self.send("PATCH", kind.object_path(name, namespace), _dry(dry_run), body,
                                 PATCH_TYPES[patch_type])
        self._saw(kind, patched, dry_run)
        return patched

    def delete(self, kind: Kind, name: str, namespace: str | None = None, *, uid: str | None = None,
               resource_version: str | None = None, dry_run: bool = False) -> None:
        """DELETE, optionally only if uid/resourceVersion still match (else APIConflict)."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version))
                         if v}
        if preconditions:
            options["preconditions"] = preconditions
        deleted = self.send("DELETE", kind.object_path(name, namespace), _dry(dry_run), options)
        self._saw(kind, deleted, dry_run)
