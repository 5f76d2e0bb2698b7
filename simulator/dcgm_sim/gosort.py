"""Go's `sort.SliceStable` (sort/zsortfunc.go `stable_func`), step by step.

apimachinery's strategic merge orders a merged list with `sort.SliceStable` and a less function
that is not a strict order (true whenever one of the two is not in the order list), so the
result is whatever Go's algorithm makes of it: insertion sort in blocks of 20, then `symMerge`
of the blocks. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def go_stable_sort(items: list[Any], less: Callable[[Any, Any], bool]) -> list[Any]:
    """Go's `sort.SliceStable` step by step (insertion sort in blocks of 20, then SymMerge),
    so a `less` that is not a strict order gives what Go gives."""
    data = list(items)
    n = len(data)

    def lt(i: int, j: int) -> bool:
        return less(data[i], data[j])

    def swap(i: int, j: int) -> None:
        data[i], data[j] = data[j], data[i]

    def insertion(a: int, b: int) -> None:
        for i in range(a + 1, b):
            j = i
            while j > a and lt(j, j - 1):
                swap(j, j - 1)
                j -= 1

    def swap_range(a: int, b: int, count: int) -> None:
        for i in range(count):
            swap(a + i, b + i)

    def rotate(a: int, m: int, b: int) -> None:
        i, j = m - a, b - m
        while i != j:
            if i > j:
                swap_range(m - i, m, j)
                i -= j
            else:
                swap_range(m - i, m + j - i, i)
                j -= i
        swap_range(m - i, m, i)

    def sym_merge(a: int, m: int, b: int) -> None:
        if m - a == 1:
            i, j = m, b
            while i < j:
                h = (i + j) >> 1
                if lt(h, a):
                    i = h + 1
                else:
                    j = h
            for k in range(a, i - 1):
                swap(k, k + 1)
            return
        if b - m == 1:
            i, j = a, m
            while i < j:
                h = (i + j) >> 1
                if not lt(m, h):
                    i = h + 1
                else:
                    j = h
            for k in range(m, i, -1):
                swap(k, k - 1)
            return
        mid = (a + b) >> 1
        total = mid + m
        start, r = (total - b, mid) if m > mid else (a, m)
        p = total - 1
        while start < r:
            c = (start + r) >> 1
            if not lt(p - c, c):
                start = c + 1
            else:
                r = c
        end = total - start
        if start < m < end:
            rotate(start, m, end)
        if a < start < mid:
            sym_merge(a, start, mid)
        if mid < end < b:
            sym_merge(mid, end, b)

    block = 20
    a, b = 0, block
    while b <= n:
        insertion(a, b)
        a, b = b, b + block
    insertion(a, n)
    while block < n:
        a, b = 0, 2 * block
        while b <= n:
            sym_merge(a, a + block, b)
            a, b = b, b + 2 * block
        if a + block < n:
            sym_merge(a, a + block, n)
        block *= 2
    return data
