"""Just enough Kubernetes protobuf to read what kubectl sends that way.

kubectl's typed clients send built-in objects as `application/vnd.kubernetes.protobuf` (and
accept JSON back). The sim reads JSON only, except for the such bodies the project needs: the
SelfSubjectAccessReview behind `kubectl auth can-i`, and the ConfigMap behind `kubectl create
configmap` (the runbook restores the state ConfigMap that way; fields from
`k8s.io/api/core/v1/generated.proto`: ConfigMap metadata=1, data=2, binaryData=3,
immutable=4; ObjectMeta name=1, generateName=2, namespace=3, labels=11, annotations=12;
a map entry key=1, value=2). The envelope is the `k8s\\x00` magic
plus a `runtime.Unknown` (typeMeta=1 {apiVersion=1, kind=2}, raw=2); field numbers of the
review come from `k8s.io/api/authorization/v1/generated.proto`. Pure.
"""

from __future__ import annotations

import base64
from typing import Any

MAGIC = b"k8s\x00"
_RESOURCE_FIELDS = {1: "namespace", 2: "verb", 3: "group", 4: "version", 5: "resource",
                    6: "subresource", 7: "name"}
_NON_RESOURCE_FIELDS = {1: "path", 2: "verb"}


class ProtobufError(ValueError):
    """A body this reader cannot turn into JSON."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos:pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _strings(data: bytes, names: dict[int, str]) -> dict[str, str]:
    return {names[n]: v.decode() for n, v in fields(data)
            if n in names and isinstance(v, bytes) and v}


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw message) of a Kubernetes protobuf body."""
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (no k8s magic)")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(MAGIC):]):
        if number == 1 and isinstance(value, bytes):
            meta = _strings(value, {1: "apiVersion", 2: "kind"})
            api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
        elif number == 2 and isinstance(value, bytes):
            raw = value
    return api_version, kind, raw


def self_subject_access_review(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf SelfSubjectAccessReview (metadata is ignored)."""
    api_version, kind, raw = unwrap(body)
    if kind and kind != "SelfSubjectAccessReview":
        raise ProtobufError(f"expected a SelfSubjectAccessReview, got {kind}")
    spec: dict[str, Any] = {}
    for number, value in fields(raw):
        if number != 2 or not isinstance(value, bytes):
            continue
        for sub, attrs in fields(value):
            if sub == 1 and isinstance(attrs, bytes):
                spec["resourceAttributes"] = _strings(attrs, _RESOURCE_FIELDS)
            elif sub == 2 and isinstance(attrs, bytes):
                spec["nonResourceAttributes"] = _strings(attrs, _NON_RESOURCE_FIELDS)
    return {"apiVersion": api_version or "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview", "spec": spec}


_META_STRINGS = {1: "name", 2: "generateName", 3: "namespace"}


def _map(entries: list[bytes]) -> dict[str, str]:
    out = {}
    for entry in entries:
        kv = {n: v for n, v in fields(entry) if isinstance(v, bytes)}
        out[kv.get(1, b"").decode()] = kv.get(2, b"").decode()
    return out


def _object_meta(data: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = _strings(data, _META_STRINGS)
    pairs = fields(data)
    for number, key in ((11, "labels"), (12, "annotations")):
        entries = [v for n, v in pairs if n == number and isinstance(v, bytes)]
        if entries:
            meta[key] = _map(entries)
    return meta


def config_map(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf ConfigMap (binaryData base64, as JSON carries it)."""
    api_version, kind, raw = unwrap(body)
    if kind and kind != "ConfigMap":
        raise ProtobufError(f"expected a ConfigMap, got {kind}")
    out: dict[str, Any] = {"apiVersion": api_version or "v1", "kind": "ConfigMap",
                           "metadata": {}}
    pairs = fields(raw)
    data = [v for n, v in pairs if n == 2 and isinstance(v, bytes)]
    binary = [v for n, v in pairs if n == 3 and isinstance(v, bytes)]
    for number, value in pairs:
        if number == 1 and isinstance(value, bytes):
            out["metadata"] = _object_meta(value)
        elif number == 4 and isinstance(value, int):
            out["immutable"] = bool(value)
    if data:
        out["data"] = _map(data)
    if binary:
        raw_map = {}
        for entry in binary:
            kv = {n: v for n, v in fields(entry) if isinstance(v, bytes)}
            raw_map[kv.get(1, b"").decode()] = base64.b64encode(kv.get(2, b"")).decode()
        out["binaryData"] = raw_map
    return out


def kind_of(body: bytes) -> str:
    """The kind a protobuf body names ("" when it names none or is not protobuf)."""
    try:
        return unwrap(body)[1]
    except ProtobufError:
        return ""
