"""Applying a strategic merge patch, ported from apimachinery's
`pkg/util/strategicpatch/patch.go` (`StrategicMergeMapPatchUsingLookupPatchMeta`, whose options
are `MergeParallelList` and `IgnoreUnmatchedNulls`): `mergeMap` (the `$patch` replace/delete
of a map, `$retainKeys`, `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`, null
deleting a key, a value of another type replacing), `mergeSliceHandler`/`mergeSlice` (lists
merged by their `patchMergeKey` or as sets of scalars, `$patch: delete`/`replace` elements,
every other list replaced) and the element order the server gives the merged list
(`normalizeElementOrder`, `mergeSortedSlice`, with Go's `sort.SliceStable` that it relies on).

What merges how comes from a `MergeSchema` (patching.KUBERNETES for the sim's kinds, from the
k8s.io/api struct tags). Not ported: the checks that only fail malformed patches
(`validatePatchWithSetOrderList`, retainKeys' list of the patch's own keys). `PatchError` is the
error of all three patch formats (re-exported by `patching`). Pure; inputs are not mutated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dcgm_sim.gosort import go_stable_sort
from dcgm_sim.jsoncopy import clone

Path = tuple[str, ...]
DIRECTIVE = "$patch"
RETAIN = "$retainKeys"
ORDER = "$setElementOrder/"
DELETE_SCALARS = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """The patch cannot be applied (422 for JSON patch, 400 for a malformed document)."""


@dataclass(frozen=True)
class MergeSchema:
    """Which lists merge (the fields' `patchStrategy:"merge"`): by a `patchMergeKey`, or as a
    set of scalars; every other list is replaced, as are the maps in `replaced_maps`
    (`patchStrategy:"replace"`). Keys are (parent field, field), the parent "*" for any."""

    merge_keys: Mapping[tuple[str, str], str]
    scalar_sets: frozenset[tuple[str, str]] = frozenset()
    replaced_maps: frozenset[tuple[str, str]] = frozenset()

    @staticmethod
    def _keys(path: Path) -> tuple[tuple[str, str], tuple[str, str]]:
        return (path[-2] if len(path) > 1 else "", path[-1]), ("*", path[-1])

    def merge_key(self, path: Path) -> str | None:
        if not path:
            return None
        own, anywhere = self._keys(path)
        return self.merge_keys.get(own) or self.merge_keys.get(anywhere)

    def merges(self, path: Path) -> bool:
        return bool(path) and (self.merge_key(path) is not None
                               or bool({*self._keys(path)} & self.scalar_sets))

    def replaces_map(self, path: Path) -> bool:
        return bool(path) and bool({*self._keys(path)} & self.replaced_maps)


def apply(original: Any, patch: Any, schema: MergeSchema, path: Path = ()) -> Any:
    """`original` with `patch` applied (a JSON object or a nested map at `path`)."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    start = clone(original) if isinstance(original, dict) else None
    return _merge_map(start, clone(patch), path, schema)


def _kind(value: Any) -> str:
    """Go's reflect type of a decoded JSON value (every number is a float64)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, list):
        return "list"
    return "string" if isinstance(value, str) else "null"


def _same(a: Any, b: Any) -> bool:
    """Go's `==` on two decoded scalars (interfaces: same type and value)."""
    return _kind(a) == _kind(b) and a == b


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any], path: Path,
               schema: MergeSchema) -> Any:
    if DIRECTIVE in patch:
        directive = patch.pop(DIRECTIVE)
        if directive == "replace":
            return patch
        if directive == "delete":
            return {}
        raise PatchError(f"Unknown patch type: {directive!r} in map: {patch}")
    result = {} if original is None else original
    retain = patch.pop(RETAIN, None)
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError("invalid patch: the $retainKeys directive must be a list")
        for key in [k for k in result if k not in retain]:
            del result[key]
    _merge_ordered_lists(result, patch, path, schema)
    for key, value in patch.items():
        delete_list = key.startswith(DELETE_SCALARS)
        if delete_list:
            key = key[len(DELETE_SCALARS):]
        if value is None:
            result.pop(key, None)
            continue
        if key not in result or _kind(result[key]) != _kind(value):
            if not delete_list:
                kept, keep = _remove_directives(_without_nulls(value))
                if keep:
                    result[key] = kept
                else:
                    result.pop(key, None)
            continue
        at = (*path, key)
        if isinstance(value, dict):
            result[key] = (value if schema.replaces_map(at)
                           else _merge_map(result[key], value, at, schema))
        elif isinstance(value, list):
            result[key] = _merge_slice_handler(result[key], value, at, schema, delete_list)
        else:
            result[key] = value
    return result


def _without_nulls(value: Any) -> Any:
    """`discardNullValuesFromPatch`."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """`removeDirectives`: (the value without directives, whether to keep it at all)."""
    if isinstance(value, dict):
        if DIRECTIVE in value:
            return None, False
        out = {}
        for k, v in value.items():
            kept, keep = _remove_directives(v)
            if keep:
                out[k] = kept
        return out, True
    if isinstance(value, list):
        return [kept for kept, keep in map(_remove_directives, value) if keep], True
    return value, True


def _merge_slice_handler(original: list[Any], patch: list[Any], path: Path,
                         schema: MergeSchema, delete_list: bool) -> list[Any]:
    if schema.merges(path) or delete_list:
        return _merge_slice(original, patch, path, schema, delete_list)
    return patch


def _element_kind(*lists: list[Any]) -> str:
    """`sliceElementType`: every element of one kind, not a list."""
    kinds = {_kind(v) for items in lists for v in items}
    if not kinds:
        raise PatchError("no elements in any of the given slices")
    if len(kinds) > 1:
        raise PatchError(f"list element types are not identical: {list(lists)}")
    if kinds == {"list"}:
        raise PatchError("lists of lists are not supported")
    return kinds.pop()


def _merge_slice(original: list[Any], patch: list[Any], path: Path, schema: MergeSchema,
                 delete_list: bool) -> list[Any]:
    if not original and not patch:
        return original
    kind = _element_kind(original, patch)
    key = schema.merge_key(path) or ""
    if kind != "map":
        if delete_list:
            return [v for v in original if not any(_same(v, d) for d in patch)]
        merged = _dedupe_scalars(original + patch)
    else:
        if not key:
            raise PatchError(f"cannot merge lists without merge key for {'.'.join(path)}")
        original, patch = _special_elements(original, patch, key)
        merged = _merge_by_key(list(original), patch, key, path, schema)
    in_patch, server_only = _partition(merged, patch, key)
    return _normalize_order(in_patch, server_only, patch, original, key)


def _dedupe_scalars(items: list[Any]) -> list[Any]:
    """`deduplicateScalars`, its order included (a duplicate takes the last item's place)."""
    s = list(items)
    length = len(s) - 1
    i = 0
    while i < length:
        j = i + 1
        while j <= length:
            if _same(s[i], s[j]):
                s[j] = s[length]
                s = s[:length]
                length -= 1
                j -= 1
            j += 1
        i += 1
    return s


def _special_elements(original: list[Any], patch: list[Any],
                      key: str) -> tuple[list[Any], list[Any]]:
    """`mergeSliceWithSpecialElements`: `$patch: delete` elements drop their matches from the
    original, `$patch: replace` makes the patch's other elements the whole list."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        directive = item.get(DIRECTIVE)
        if DIRECTIVE not in item:
            plain.append(item)
        elif directive == "delete":
            if key not in item:
                raise PatchError(f"map: {item} does not contain declared merge key: {key}")
            original = [v for v in original if not _same(v.get(key), item[key])]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch")
        else:
            raise PatchError(f"Unknown patch type: {directive!r} in map: {item}")
    return (plain, []) if replace else (original, plain)


def _merge_by_key(original: list[Any], patch: list[Any], key: str, path: Path,
                  schema: MergeSchema) -> list[Any]:
    """`mergeSliceWithoutSpecialElements`: a patch element merges into the original element
    with its key, else it is appended as it is."""
    for item in patch:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        found = next((i for i, v in enumerate(original) if _same(v.get(key), item[key])), None)
        if found is None:
            original.append(item)
        else:
            original[found] = _merge_map(original[found], clone(item), path, schema)
    return original


def _key_of(item: Any, key: str) -> Any:
    return item.get(key) if key and isinstance(item, dict) else item


def _index(items: list[Any], item: Any, key: str) -> int:
    """`index`: where `item` (by its merge key, or itself for scalars) is in `items`, or -1."""
    value = _key_of(item, key)
    return next((i for i, v in enumerate(items) if _same(_key_of(v, key), value)), -1)


def _partition(merged: list[Any], by: list[Any], key: str) -> tuple[list[Any], list[Any]]:
    """`partition{Primitives,Maps}ByPresentInList`: (in `by`, server-only), each in order."""
    if key and any(not isinstance(v, dict) or key not in v for v in merged):
        raise PatchError(f"map: {merged} does not contain declared merge key: {key}")
    inside = [v for v in merged if _index(by, v, key) >= 0]
    return inside, [v for v in merged if _index(by, v, key) < 0]


def _normalize_order(in_patch: list[Any], server_only: list[Any], patch_order: list[Any],
                     server_order: list[Any], key: str) -> list[Any]:
    """`normalizeElementOrder`: each part sorted by its order, then merged by the server's."""
    in_patch = _sort_by(in_patch, patch_order, key)
    server_only = _sort_by(server_only, server_order, key)
    return _merge_sorted(server_only, in_patch, server_order, key)


def _sort_by(items: list[Any], order: list[Any], key: str) -> list[Any]:
    """`normalizeSliceOrder` (deletions last), with its less function as it is: true unless
    both are in `order` (not a strict order, so Go's stable sort's steps decide)."""
    deleted = [v for v in items if key and isinstance(v, dict) and v.get(DIRECTIVE) == "delete"]
    kept = [v for v in items if not any(v is d for d in deleted)]

    def less(a: Any, b: Any) -> bool:
        ia, ib = _index(order, a, key), _index(order, b, key)
        return ia < ib if ia >= 0 and ib >= 0 else True

    return go_stable_sort(kept, less) + deleted


def _merge_sorted(left: list[Any], right: list[Any], order: list[Any], key: str) -> list[Any]:
    """`mergeSortedSlice`: insert the server-only items (left) among the patch's (right)."""
    out: list[Any] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = _index(order, left[i], key), _index(order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


def _merge_ordered_lists(result: dict[str, Any], patch: dict[str, Any], path: Path,
                         schema: MergeSchema) -> None:
    """`mergePatchIntoOriginal`: each `$setElementOrder/<list>` with its list, merged and put
    in that order (then the server's for what the order does not name)."""
    for directive in [k for k in patch if k.startswith(ORDER)]:
        order = patch.pop(directive)
        if not isinstance(order, list):
            raise PatchError("invalid patch: the $setElementOrder list must be a list")
        name = directive[len(ORDER):]
        at = (*path, name)
        key = schema.merge_key(at) or ""
        found_original, found_patch = name in result, name in patch
        current = result.get(name) if found_original else []
        patched = patch.get(name) if found_patch else []
        if not isinstance(current, list) or not isinstance(patched, list):
            raise PatchError(f"invalid patch: {name} must be a list")
        if found_original and not found_patch:
            merged = current
        elif found_patch and not found_original:
            merged = _remove_directives(patched)[0]
        elif found_original and found_patch:
            merged = _merge_slice_handler(current, patched, at, schema, False)
        else:
            continue
        inside, server_only = _partition(merged, order, key)
        _element_kind(current, patched)  # sliceElementType: fails for two empty lists
        result[name] = _normalize_order(inside, server_only, order, current, key)
        patch.pop(name, None)
