"""The path of one apply (docs/architecture.md, "The path of one apply"), measured: the stack at
the first write's bytes on the socket, from `main()`. The write goes through the one loop and
its apply back end (no second loop, no dry-run branch), and the product frames on the way are
counted and printed (the figure the engine is held to)."""

from __future__ import annotations

import gc
import socket
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dcgm_sim.cluster import SimCluster
from migrator.cli import app as cli

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (ROOT / "migrator", ROOT / "phases")


def _first_write_stack(monkeypatch: pytest.MonkeyPatch, sim: SimCluster,
                       *args: str) -> traceback.StackSummary:
    seen: list[traceback.StackSummary] = []
    sendall = socket.socket.sendall

    def spy(sock: socket.socket, data: Any, *rest: Any) -> None:
        if not seen and bytes(data[:6]) == b"PATCH ":
            seen.append(traceback.extract_stack())
        sendall(sock, data, *rest)

    monkeypatch.setattr(socket.socket, "sendall", spy)
    monkeypatch.setattr(sys, "argv", ["dcgm-migrate", *args, "--kubeconfig", sim.kubeconfig,
                                      "-o", "json"])
    try:
        cli.main()
    except SystemExit as done:
        assert done.code in (0, None), done.code
    finally:
        gc.unfreeze()  # main() freezes the heap for the process's end; this one goes on
    assert seen, "no write reached the socket"
    return seen[0]


def _product(stack: traceback.StackSummary) -> list[str]:
    start = next(i for i, f in enumerate(stack) if f.name == "main"
                 and Path(f.filename) == ROOT / "migrator" / "cli" / "app.py")
    return [f"{Path(f.filename).relative_to(ROOT)}:{f.name}" for f in stack[start:]
            if any(Path(f.filename).is_relative_to(p) for p in PRODUCT)]


def test_the_first_write_of_an_apply_goes_through_the_one_loop(
        monkeypatch: pytest.MonkeyPatch, make_sim: Callable[..., SimCluster],
        capsys: pytest.CaptureFixture[str]) -> None:
    sim = make_sim(nodes=2, stack="gpucluster")
    frames = _product(_first_write_stack(monkeypatch, sim, "apply", "--phase", "1", "--yes"))
    names = [f.rsplit(":", 1)[1] for f in frames]
    engine = frames[frames.index("migrator/commands.py:apply"):
                    next(i for i, f in enumerate(frames) if f.startswith("migrator/kube/"))]
    assert engine == ["migrator/commands.py:apply", "migrator/engine/loop.py:apply",
                      "migrator/engine/loop.py:_phase", "migrator/engine/applying.py:write",
                      "migrator/engine/executor.py:_set_labels"], frames
    assert "runner" not in " ".join(frames) and "<lambda>" not in names
    with capsys.disabled():
        print(f"\napply path: {len(frames)} product frames from main() to the socket "
              f"({len(engine)} in commands and the engine): {' > '.join(frames)}")
