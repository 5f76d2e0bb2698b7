"""The lean-engine targets of docs/architecture.md ("Targets"), measured and printed.

    python3 -m tests.helpers.targets            # print every figure; exit 1 if a hard one fails

Figures, each against its target:

- product lines: every line of `migrator/**/*.py` and `phases/*.py` (the package as it
  installs), at most 10,000;
- the largest module, at most 400 lines;
- import cycles among the product's modules (strongly connected components of the import
  graph, built by grimp, import-linter's own graph library), none;
- sites that spell a phase status as a string literal (compared, assigned, passed or keyed
  as a status) outside the module that defines the status type, none (a status is decided by
  one function);
- the frames from `main()` to the socket on the first write of `apply --phase 1` against a
  simulated cluster: the product's own frames (migrator/, phases/) and all of them;
- `duplicates` over the product, where the command is on the PATH (a development machine's
  tool; CI may not have it).

Each is printed with `met` / `NOT met`. They are goals a change moves towards; `--strict`
makes a missed one exit 1 (for the day they are all met).
"""

from __future__ import annotations

import ast
import contextlib
import http.client
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

import grimp  # import-linter's graph library, installed with the lint tools

from dcgm_sim.cluster import SimCluster
from migrator.cli import app
from tests.helpers.layout import REPO, lay_out

PRODUCT_DIRS = ("migrator", "phases")
MAX_PRODUCT_LINES = 10_000
MAX_MODULE_LINES = 400
MAX_PRODUCT_FRAMES = 12
# The values of the state document's per-phase `status`.
STATUSES = frozenset({"completed", "in-progress", "rolled-back", "failed", "pending"})
WRITE_METHODS = (b"POST ", b"PUT ", b"PATCH ", b"DELETE ")


@dataclass(frozen=True)
class Figure:
    name: str
    value: str
    target: str
    met: bool

    def line(self) -> str:
        verdict = "met" if self.met else "NOT met"
        return f"{self.name:<34} {self.value:<44} target {self.target:<18} {verdict}"


def product_files(repo: Path = REPO) -> list[Path]:
    return sorted(p for d in PRODUCT_DIRS for p in (repo / d).rglob("*.py"))


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def size_figures(repo: Path = REPO) -> list[Figure]:
    files = product_files(repo)
    total = sum(line_count(p) for p in files)
    largest = max(files, key=line_count)
    big = [p for p in files if line_count(p) > MAX_MODULE_LINES]
    return [
        Figure("product lines (migrator, phases)", f"{total:,} in {len(files)} files",
               f"<= {MAX_PRODUCT_LINES:,}", total <= MAX_PRODUCT_LINES),
        Figure("largest module", f"{line_count(largest)} {largest.relative_to(repo)}",
               f"<= {MAX_MODULE_LINES}", not big),
    ]


def status_literal_sites(repo: Path = REPO) -> list[str]:
    """`path:line` of each phase status spelled as a string outside the module that defines
    the status type (the one holding `class PhaseStatus`): a status word (`STATUSES`) that is
    compared, assigned, passed as `status=`, the value of a `"status"` key, or a branch of a
    conditional that reads a `status` (`_reads_as_status`). The same words elsewhere (a
    counter named "failed", a report's "failed" key, prose) are not a phase's status."""
    sites = []
    for path in product_files(repo):
        text = path.read_text(encoding="utf-8")
        if "class PhaseStatus" in text:
            continue
        tree = ast.parse(text)
        parents = {child: node for node in ast.walk(tree)
                   for child in ast.iter_child_nodes(node)}
        lines = {node.lineno for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and node.value in STATUSES
                 and _reads_as_status(node, parents)}
        sites += [f"{path.relative_to(repo)}:{n}" for n in sorted(lines)]
    return sites


def _reads_as_status(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    parent = parents.get(node)
    while isinstance(parent, ast.Tuple | ast.List | ast.Set):  # ("in-progress", "failed")
        node, parent = parent, parents.get(parent)
    if isinstance(parent, ast.Compare):
        return True
    if isinstance(parent, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
        return parent.value is node
    if isinstance(parent, ast.keyword):
        return parent.arg == "status"
    if isinstance(parent, ast.Dict):
        return any(v is node and isinstance(k, ast.Constant) and k.value == "status"
                   for k, v in zip(parent.keys, parent.values, strict=True))
    if isinstance(parent, ast.IfExp) and node is not parent.test:
        return any((isinstance(n, ast.Attribute) and n.attr == "status")
                   or (isinstance(n, ast.Name) and n.id == "status")
                   or (isinstance(n, ast.Constant) and n.value == "status")
                   for n in ast.walk(parent))
    return False


def cycles(package_root: Path, package: str = "migrator") -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    sys.path.insert(0, str(package_root))
    try:
        graph = grimp.build_graph(package, cache_dir=None)
    finally:
        sys.path.remove(str(package_root))
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & set(modules))
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in modules:
        if module not in index:
            visit(module)
    return found


def cycle_figure() -> Figure:
    with tempfile.TemporaryDirectory(prefix="dcgm-migrate-targets-") as tmp:
        lay_out(Path(tmp))
        found = cycles(Path(tmp))
    shown = "; ".join(" <-> ".join(c) for c in found[:3]) or "none"
    return Figure("import cycles", f"{len(found)} ({shown})", "0", not found)


@dataclass(frozen=True)
class Depth:
    product: int
    total: int
    request: str


def first_write_depth(argv: list[str], write_path: str) -> Depth | None:
    """Run the CLI's `main()` in this process with `argv` and return the depth of the stack
    at the first write request whose path contains `write_path`, counted from `main()`."""
    seen: list[Depth] = []
    original = http.client.HTTPConnection.send
    caller = threading.get_ident()

    def send(self: http.client.HTTPConnection, data: object) -> None:
        if (not seen and threading.get_ident() == caller and isinstance(data, bytes)
                and data.startswith(WRITE_METHODS)
                and write_path.encode() in data.split(b"\r\n", 1)[0]):
            frames = traceback.extract_stack()[:-1]
            start = next(i for i, f in enumerate(frames)
                         if f.name == "main" and f.filename.endswith(
                             os.path.join("migrator", "cli", "app.py")))
            path = frames[start:]
            ours = [f for f in path if _is_product(f.filename)]
            seen.append(Depth(len(ours), len(path), data.split(b"\r\n", 1)[0].decode()))
        original(self, data)  # type: ignore[arg-type]

    http.client.HTTPConnection.send = send  # type: ignore[method-assign]
    saved = sys.argv
    sys.argv = ["dcgm-migrate", *argv]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            app.main()
    except SystemExit:
        pass
    finally:
        sys.argv = saved
        http.client.HTTPConnection.send = original  # type: ignore[method-assign]
    return seen[0] if seen else None


def _is_product(filename: str) -> bool:
    parts = Path(filename).resolve().parts
    return any(d in parts for d in PRODUCT_DIRS) and "site-packages" not in parts and (
        "tests" not in parts)


def frames_figure() -> Figure:
    with SimCluster(nodes=3, stack="gpucluster", time_scale=0.002) as sim:
        depth = first_write_depth(
            ["apply", "--phase", "1", "--yes", "--kubeconfig", sim.kubeconfig, "-o", "json"],
            "/daemonsets/")
    if depth is None:
        return Figure("frames main() -> first write", "no DaemonSet write seen",
                      f"<= {MAX_PRODUCT_FRAMES}", False)
    return Figure("frames main() -> first write",
                  f"{depth.product} ours, {depth.total} in all",
                  f"<= {MAX_PRODUCT_FRAMES} ours", depth.product <= MAX_PRODUCT_FRAMES)


def duplicates_figure(repo: Path = REPO) -> Figure | None:
    tool = shutil.which("duplicates")
    if tool is None:
        return None
    lines: list[str] = []
    for folder in PRODUCT_DIRS:
        out = subprocess.run([tool, "--repo", str(repo / folder), "--seconds", "30"],
                             capture_output=True, text=True, timeout=120).stdout
        lines.append(out.splitlines()[0] if out else "")
    pairs = sum(int(m.group(1)) for line in lines if (m := re.match(r"(\d+) pair", line)))
    return Figure("duplicates (product)", f"{pairs} pairs", "0", pairs == 0)


def main(argv: list[str] | None = None) -> int:
    strict = "--strict" in (sys.argv[1:] if argv is None else argv)
    figures = size_figures()
    sites = status_literal_sites()
    figures.append(Figure("phase status as a string literal",
                          f"{len(sites)} sites" + (f" ({', '.join(sites[:4])}...)"
                                                   if sites else ""),
                          "0 sites", not sites))
    figures.append(cycle_figure())
    figures.append(frames_figure())
    dup = duplicates_figure()
    if dup is not None:
        figures.append(dup)
    print("== lean-engine targets (docs/architecture.md, Targets)")
    for figure in figures:
        print(figure.line())
    return 1 if strict and not all(f.met for f in figures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
