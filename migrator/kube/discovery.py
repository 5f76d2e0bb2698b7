"""What the API server lets this connection do and what it serves: access reviews
(SelfSubjectAccessReview, SubjectAccessReview), API discovery (cached per group/version for the
connection's life) and a ping. A part of `Kube` (kube/client.py), which holds the transport and
the discovery cache.
"""

from __future__ import annotations

import threading
from typing import Any

from migrator.errors import APINotFound
from migrator.kube.transport import Transport
from migrator.model import kinds
from migrator.model.kinds import Kind

Obj = dict[str, Any]


class Discovery:
    """Access reviews and API discovery over `Kube`'s transport."""

    _transport: Transport
    _apis: dict[tuple[str, str], frozenset[str] | None]
    _apis_lock: threading.Lock

    def can_i(
        self, verb: str, kind: Kind, namespace: str | None = None, name: str | None = None,
        subresource: str | None = None,
    ) -> tuple[bool, str]:
        """SelfSubjectAccessReview: may the current user do this? (allowed, reason)."""
        attributes = {"verb": verb, "group": kind.group, "resource": kind.plural}
        for key, value in (("namespace", namespace), ("name", name),
                           ("subresource", subresource)):
            if value:
                attributes[key] = value
        review = {
            "apiVersion": kinds.SELF_SUBJECT_ACCESS_REVIEW.api_version,
            "kind": kinds.SELF_SUBJECT_ACCESS_REVIEW.kind,
            "spec": {"resourceAttributes": attributes},
        }
        answer = self._transport.send(
            "POST", kinds.SELF_SUBJECT_ACCESS_REVIEW.collection_path(), (), review
        ).json() or {}
        status = answer.get("status") or {}
        reason = str(status.get("reason") or status.get("evaluationError") or "")
        return bool(status.get("allowed")), reason

    def can_they(self, spec: Obj) -> bool:
        """SubjectAccessReview: may the user in `spec` (user, groups, resourceAttributes) do
        it? APIForbidden unless the caller may `create subjectaccessreviews`."""
        review = {"apiVersion": kinds.SUBJECT_ACCESS_REVIEW.api_version,
                  "kind": kinds.SUBJECT_ACCESS_REVIEW.kind, "spec": spec}
        answer = self._transport.send(
            "POST", kinds.SUBJECT_ACCESS_REVIEW.collection_path(), (), review).json() or {}
        return bool((answer.get("status") or {}).get("allowed"))

    def _resources(self, group: str, version: str) -> frozenset[str] | None:
        """Plural names served under group/version (discovery, cached); None if not served."""
        with self._apis_lock:
            if (group, version) in self._apis:
                return self._apis[(group, version)]
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = self._transport.send("GET", path).json() or {}
            found: frozenset[str] | None = frozenset(
                str(r.get("name")) for r in doc.get("resources") or []
            )
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
        found = self._resources(kind.group, kind.version)
        return found is not None and kind.plural in found

    def ping(self) -> None:
        """One cheap request: APIUnreachable when there is no answer, APIForbidden when refused."""
        try:
            self._transport.send("GET", "/version")
        except APINotFound:
            self._transport.send("GET", "/api")  # a server without /version still answered
