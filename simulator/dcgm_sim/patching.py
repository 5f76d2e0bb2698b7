"""The three patch formats the API server accepts: JSON merge patch (RFC 7386), JSON patch
(RFC 6902, as evanphx/json-patch v4 applies it) and Kubernetes strategic merge patch.

Strategic merge patch is schema-driven on a real server; here the schema (`KUBERNETES`) is the
table of `patchMergeKey`s of the fields this project and kubectl touch (from the `k8s.io/api`
struct tags): lists of containers, env, volumes, volumeMounts, ports, ownerReferences, ...
merge element-wise by key, `finalizers` merge as a set, every other list is replaced. The
merge itself (maps, null, `$patch`, `$retainKeys`, `$deleteFromPrimitiveList/<f>`,
`$setElementOrder/<f>`, the merged list's order) is apimachinery's, ported in `strategic`.

Pure functions on JSON-like values; inputs are never mutated.
"""

from __future__ import annotations

import json
from typing import Any

from dcgm_sim import strategic
from dcgm_sim.jsoncopy import clone
from dcgm_sim.strategic import MergeSchema, PatchError

__all__ = ["KUBERNETES", "MergeSchema", "PatchError", "json_patch", "merge_key", "merge_patch",
           "strategic_merge"]

Path = tuple[str, ...]


# ---- RFC 7386 JSON merge patch -------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply a JSON merge patch: objects merge recursively, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---- RFC 6902 JSON patch, as kube-apiserver applies it -------------------------------------
#
# kube-apiserver applies JSON patches with evanphx/json-patch v4 (gopkg.in/evanphx/json-patch.v4
# v4.12.0, `Patch.Apply` in apiserver/pkg/endpoints/handlers/patch.go `applyJSPatch`); where
# that library departs from RFC 6902 the sim does as it does (patch.go at v4.12.0):
# - `replace` of a missing object member sets it (`partialDoc.get` never fails);
# - array indices are `strconv.Atoi`'s ("01" is 1, "+1" too) and negative ones count from the
#   end (`SupportNegativeIndices` defaults to true);
# - `add` and `replace` without a `value` write null; `add` at the root ("") is refused
#   (`findObject` needs a "/"), a root `replace` takes only an object or an array;
# - `copy` from a missing object member writes null; `test` of a missing member against null
#   passes, and scalars are equal only as the same JSON text (1 is not 1.0).
# tests/peers/test_jsonpatch.py runs json-patch/json-patch-tests against this and lists where
# the library (and so this) differs from the RFC suite.


def _string_member(op: dict[str, Any], name: str) -> str:
    """`Operation.Path` / `Operation.From`: present, not null, a string."""
    value = op.get(name)
    if not isinstance(value, str):
        raise PatchError(f"operation missing {name} field" if value is None
                         else f"json: cannot unmarshal {name} into Go value of type string")
    return value


def _find(doc: Any, path: str) -> tuple[Any, str]:
    """`findObject`: the container of the path's last token, and that token; PatchError when
    the path has no "/" or a container on the way is missing."""
    split = path.split("/")
    if len(split) < 2:
        raise PatchError(f'doc is missing path: "{path}"')
    node = doc
    for part in split[1:-1]:
        child = _member(node, _decode(part))
        if not isinstance(child, (dict, list)):
            raise PatchError(f'doc is missing path: "{path}"')
        node = child
    return node, _decode(split[-1])


def _decode(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _atoi(key: str) -> int:
    body = key[1:] if key[:1] in ("+", "-") else key
    if not body.isascii() or not body.isdigit():
        raise PatchError(f"value was not a proper array index: '{key}'")
    return int(key)


def _array_index(items: list[Any], key: str, size: int) -> int:
    """An index into `size` slots (`len` to read, `len + 1` to insert), negatives from the end."""
    idx = _atoi(key)
    if idx < 0:
        if idx < -size:
            raise PatchError(f"Unable to access invalid index: {idx}")
        idx += size
    if idx >= size:
        raise PatchError(f"Unable to access invalid index: {idx}")
    return idx


def _member(node: Any, key: str) -> Any:
    """`container.get`: an object's missing member is None (no error), an array's index must
    exist."""
    if isinstance(node, dict):
        return node.get(key)
    if isinstance(node, list):
        return node[_array_index(node, key, len(node))]
    raise PatchError(f"doc is missing key: {key}")


def _insert(node: Any, key: str, value: Any) -> None:
    """`container.add`: set an object member; insert into an array ("-" appends)."""
    if isinstance(node, dict):
        node[key] = value
    elif key == "-":
        node.append(value)
    else:
        node.insert(_array_index(node, key, len(node) + 1), value)


def _delete(node: Any, key: str) -> None:
    if isinstance(node, dict):
        if key not in node:
            raise PatchError(f"Unable to remove nonexistent key: {key}")
        del node[key]
    else:
        del node[_array_index(node, key, len(node))]


def _equal(a: Any, b: Any) -> bool:
    """`lazyNode.equal`: members and elements recursively, scalars as the same JSON text."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    return bool(json.dumps(a) == json.dumps(b))


def _apply_one(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    value = clone(op.get("value"))
    if kind == "add":
        node, key = _find(doc, _string_member(op, "path"))
        _insert(node, key, value)
    elif kind == "remove":
        node, key = _find(doc, _string_member(op, "path"))
        _delete(node, key)
    elif kind == "replace":
        path = _string_member(op, "path")
        if path == "":
            if not isinstance(value, (dict, list)):
                raise PatchError("replace operation value must be object or array")
            return value
        node, key = _find(doc, path)
        if isinstance(node, list):
            node[_array_index(node, key, len(node))] = value
        else:
            node[key] = value
    elif kind in ("move", "copy"):
        node, key = _find(doc, _string_member(op, "from"))
        moved = clone(_member(node, key))
        if kind == "move":
            _delete(node, key)
        target, at = _find(doc, _string_member(op, "path"))
        _insert(target, at, moved)
    elif kind == "test":
        _test(doc, op)
    else:
        raise PatchError(f"Unexpected kind: {kind if isinstance(kind, str) else 'unknown'}")
    return doc


def _test(doc: Any, op: dict[str, Any]) -> None:
    path = _string_member(op, "path")
    failed = PatchError(f"testing value {path} failed: test failed")
    if path == "":
        if "value" not in op or not _equal(doc, op["value"]):
            raise failed
        return
    node, key = _find(doc, path)
    current = _member(node, key)
    if "value" not in op:  # upstream dereferences the missing value (a panic: 500)
        raise failed
    if current is None:
        if op["value"] is not None:
            raise failed
    elif not _equal(current, op["value"]):
        raise failed


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply an RFC 6902 operation list (add, remove, replace, move, copy, test) as
    kube-apiserver's evanphx/json-patch v4 does (see above)."""
    if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
        raise PatchError("a JSON patch must be a list of operations")
    doc = clone(doc)
    for op in operations:
        doc = _apply_one(doc, op)
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


KUBERNETES = MergeSchema(_MERGE_KEYS, frozenset(_PRIMITIVE_MERGE))


def merge_key(path: Path) -> str | None:
    """The patchMergeKey of the list at `path` (field names only), None when it is replaced."""
    return KUBERNETES.merge_key(path)


def strategic_merge(original: Any, patch: Any, path: Path = (),
                    schema: MergeSchema = KUBERNETES) -> Any:
    """Apply a strategic merge patch to `original` (an object or a nested map at `path`), as
    apimachinery's strategicpatch does (`strategic.apply`)."""
    return strategic.apply(original, patch, schema, path)
