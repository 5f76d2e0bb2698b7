"""The GPU Operator imitation is on by default in `sim serve` (as on every real cluster), with
`--operator-reconcile 0` / `--no-operator` to turn it off (docs/architecture.md, "The simulated
cluster")."""

from __future__ import annotations

import inspect

import pytest

from dcgm_sim.controllers.operator import RESYNC_SECONDS, OperatorImitation
from dcgm_sim.serve import ServeError, ServeOptions, build
from dcgm_sim_cli import demo
from dcgm_sim_cli import sim as sim_cmd


def test_serve_runs_the_operator_by_default() -> None:
    sim = build(ServeOptions(nodes=1))
    operator = sim.controllers.get("operator")
    assert isinstance(operator, OperatorImitation)
    assert operator.period == RESYNC_SECONDS


def test_operator_reconcile_zero_turns_it_off() -> None:
    assert build(ServeOptions(nodes=1, operator_reconcile=0)).controllers.get("operator") is None


def test_negative_operator_reconcile_is_refused() -> None:
    with pytest.raises(ServeError, match="--operator-reconcile must be 0"):
        build(ServeOptions(nodes=1, operator_reconcile=-1))


def test_cli_flags_default_on_and_no_operator_turns_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ServeOptions] = []

    def fake_serve(options: ServeOptions) -> int:
        seen.append(options)
        return 0

    monkeypatch.setattr(sim_cmd, "serve", fake_serve)
    assert sim_cmd.main(["serve", "--nodes", "1"]) == 0
    assert sim_cmd.main(["serve", "--nodes", "1", "--no-operator"]) == 0
    assert sim_cmd.main(["serve", "--nodes", "1", "--operator-reconcile", "0"]) == 0
    assert [o.operator_reconcile for o in seen] == [RESYNC_SECONDS, 0.0, 0.0]
    default = inspect.signature(sim_cmd.serve_cmd).parameters["operator_reconcile"].default
    assert default == RESYNC_SECONDS


def test_demo_runs_the_operator_unless_told_not_to() -> None:
    assert inspect.signature(demo.demo).parameters["operator"].default is True
