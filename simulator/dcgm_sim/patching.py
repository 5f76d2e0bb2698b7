"""The three patch formats the API server accepts: JSON merge patch (RFC 7386), JSON patch
(RFC 6902) and Kubernetes strategic merge patch.

Strategic merge patch is schema-driven on a real server; here the schema is the table of
`patchMergeKey`s of the fields this project and kubectl touch (from the `k8s.io/api` struct
tags): lists of containers, env, volumes, volumeMounts, ports, ownerReferences, ... merge
element-wise by key, `finalizers` merge as a set, every other list is replaced. Maps merge
recursively, `null` deletes a key, and the `$patch`, `$retainKeys`,
`$deleteFromPrimitiveList/<f>` and `$setElementOrder/<f>` directives are honoured.

Pure functions on JSON-like values; inputs are never mutated.
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str, ...]


class PatchError(ValueError):
    """The patch cannot be applied (422 for JSON patch, 400 for a malformed document)."""


# ---- RFC 7386 JSON merge patch -------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: objects merge recursively, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---- RFC 6902 JSON patch -------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, adding: bool, path: str) -> int:
    if adding and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r} in {path}")
    idx = int(token)
    limit = len(container) if adding else len(container) - 1
    if idx > limit:
        raise PatchError(f"array index out of bounds: {path}")
    return idx


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f'doc is missing path: "{path}"')
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, adding=False, path=path)]
        else:
            raise PatchError(f'doc is missing path: "{path}"')
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f'doc is missing path: "{path}"')
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, adding=False, path=path)]
    raise PatchError(f'doc is missing path: "{path}"')


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, adding=True, path=path), value)
    else:
        raise PatchError(f'doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f'remove operation does not apply: doc is missing path: "{path}"')
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, adding=False, path=path))
    raise PatchError(f'remove operation does not apply: doc is missing path: "{path}"')


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply an RFC 6902 operation list (add, remove, replace, move, copy, test)."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid JSON patch operation: {op!r}")
        kind, path = op["op"], op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"missing value for {kind} operation at {path}")
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            if _pointer(path):
                doc, _ = _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "move":
            doc, value = _remove(doc, op.get("from", ""))
            doc = _add(doc, path, value)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op.get("from", ""))))
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"unexpected kind of operation: {kind!r}")
    return doc


# ---- strategic merge patch -----------------------------------------------------------------

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")

# (parent field, list field) -> patchMergeKey, from the k8s.io/api struct tags.
_MERGE_KEYS: dict[tuple[str, str], str] = {
    **{("spec", c): "name" for c in _CONTAINER_LISTS},
    **{(c, "ports"): "containerPort" for c in _CONTAINER_LISTS},
    **{(c, "env"): "name" for c in _CONTAINER_LISTS},
    **{(c, "volumeMounts"): "mountPath" for c in _CONTAINER_LISTS},
    **{(c, "volumeDevices"): "devicePath" for c in _CONTAINER_LISTS},
    **{(c, "resizePolicy"): "resourceName" for c in _CONTAINER_LISTS},
    ("spec", "volumes"): "name",
    ("spec", "ports"): "port",  # ServiceSpec.ports
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "resourceClaims"): "name",
    ("spec", "schedulingGates"): "name",
    ("metadata", "ownerReferences"): "uid",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
}
_PRIMITIVE_MERGE = {("metadata", "finalizers")}
_DIRECTIVE = "$patch"
_RETAIN = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_ORDER = "$setElementOrder/"


def merge_key(path: Path) -> str | None:
    """The patchMergeKey of the list at `path` (field names only), None when it is replaced."""
    if len(path) < 2:
        return None
    return _MERGE_KEYS.get((path[-2], path[-1]))


def _strip(value: Any) -> Any:
    """A patch fragment added as new content: drop directives it carries."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()
                if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value if not (isinstance(v, dict) and v.get(_DIRECTIVE))]
    return value


def strategic_merge(original: Any, patch: Any, path: Path = ()) -> Any:
    """Apply a strategic merge patch to `original` (an object or a nested map at `path`)."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    directive = patch.get(_DIRECTIVE)
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != _DIRECTIVE})
    if directive not in (None, "merge"):
        raise PatchError(f"unknown patch type: {directive!r} in map at {'.'.join(path)}")
    result: dict[str, Any] = dict(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith(_DELETE_PRIMITIVE):
            fld = key[len(_DELETE_PRIMITIVE):]
            drop = value if isinstance(value, list) else []
            if isinstance(result.get(fld), list):
                result[fld] = [v for v in result[fld] if v not in drop]
            continue
        if key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys (below), $patch
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get(_DIRECTIVE) == "delete":
                result.pop(key, None)
            else:
                result[key] = strategic_merge(result.get(key), value, (*path, key))
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, (*path, key))
        else:
            result[key] = value
    retain = patch.get(_RETAIN)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(original: Any, patch: list[Any], path: Path) -> list[Any]:
    if any(isinstance(v, dict) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [_strip(v) for v in patch if not (isinstance(v, dict) and v.get(_DIRECTIVE))]
    current = list(original) if isinstance(original, list) else []
    if path[-2:] in _PRIMITIVE_MERGE:
        return current + [v for v in patch if v not in current]
    key = merge_key(path)
    if key is None:
        return [_strip(v) for v in patch]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        found = next((i for i, v in enumerate(current)
                      if isinstance(v, dict) and v.get(key) == item[key]), None)
        if item.get(_DIRECTIVE) == "delete":
            current = [v for v in current if not (isinstance(v, dict) and v.get(key) == item[key])]
        elif found is None:
            current.append(strategic_merge({}, item, path))
        else:
            current[found] = strategic_merge(current[found], item, path)
    return current
