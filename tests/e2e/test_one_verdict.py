"""One verdict: `apply`, `plan`, `status`, `verify` and `guard --once` give the same verdict on
the same cluster, and where a run's own phases are done while the identity is not whole yet
(both stacks before the guard shares the names) the report says both, in its last lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dcgm_sim.controllers.releases import FUTURE_COEXISTENCE as FUTURE
from tests.e2e.conftest import E2E
from tests.e2e.test_guard import running_guard

RECONCILE = 2.0


def _checks(doc: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(c["name"], c["ok"]) for c in doc["verdict"]["checks"]]


def _closing(text: str) -> str:
    """The table's closing lines (after `writes`, or the last verdict line), unwrapped."""
    flat = " ".join(text.split())
    return flat[max(flat.rfind("verdict OK — "), flat.rfind("verdict NOT OK — ")):]


def test_every_command_gives_the_same_verdict_and_apply_says_both(
        e2e_factory: Callable[..., E2E]) -> None:
    env = e2e_factory("mixed", operator_release=FUTURE, nodes=4,
                      operator_reconcile_seconds=RECONCILE, time_scale=0.05)
    applied = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
    assert applied.code == 0, applied.stdout + applied.stderr  # its phases are done ...
    closing = _closing(applied.stdout)  # ... and the identity is not whole yet: both said
    assert closing.startswith("verdict NOT OK — 3 of "), closing
    assert ("run OK — phases 1-3 done; the stable identity is not whole yet (guard-live/guard, "
            "nodes-covered/nvidia-dcgm, nodes-covered/nvidia-dcgm-exporter), which no phase "
            "answers for; fix: run `dcgm-migrate guard -n gpu-operator --kubeconfig "
            f"{env.sim.kubeconfig}`") in closing, closing
    docs = {cmd: env.cli(cmd, "-o", "json") for cmd in ("plan", "status", "verify")}
    docs["apply"] = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
    assert {cmd: r.json()["verdict"]["ok"] for cmd, r in docs.items()} == dict.fromkeys(
        docs, False)
    first = _checks(docs["verify"].json())
    assert all(_checks(r.json()) == first for r in docs.values())
    assert docs["verify"].code == docs["status"].code == 1 and docs["apply"].code == 0
    table = env.cli("verify")
    assert _closing(table.stdout).startswith("verdict NOT OK — 3 of "), table.stdout

    with running_guard(env) as g:
        env.until(g.leading, 30, "leading")
        docs = {}
        for _ in range(200):  # the guard's first pass shares the names
            docs["verify"] = env.cli("verify", "-o", "json")
            if docs["verify"].code == 0:
                break
        assert docs["verify"].code == 0, [c for c in docs["verify"].json()["verdict"]["checks"]
                                          if not c["ok"]]
        for cmd in ("plan", "status"):
            docs[cmd] = env.cli(cmd, "-o", "json")
        docs["apply"] = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s", "-o", "json")
        docs["guard"] = env.cli("guard", "--once", "-o", "json")
        assert {cmd: r.json()["verdict"]["ok"] for cmd, r in docs.items()} == dict.fromkeys(
            docs, True)
        first = _checks(docs["verify"].json())
        assert all(_checks(r.json()) == first for cmd, r in docs.items() if cmd != "guard")
        again = env.cli("apply", "--phase", "3", "--yes", "--settle", "0s")
        assert _closing(again.stdout) == (
            f"verdict OK — the stable identity works ({len(first)} checks) "
            "run OK — phases 1-3 done"), again.stdout
