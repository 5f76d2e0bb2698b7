"""The rollout wait's progress deadline, ETA and blocked probe, on a fake clock and a scripted
DaemonSet status (no real time passes), and the ETA text the CLI shows."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from migrator.cli.live import eta_text
from migrator.engine.progress import RolloutProgress
from migrator.engine.waiting import Pace, Waiter
from migrator.kube.client import Kube, ObjList
from migrator.model.tables import Row, daemonset_row
from tests.helpers.clock import FakeClock

Obj = dict[str, Any]


def _ds(updated: int, available: int, desired: int = 10) -> Obj:
    return {"metadata": {"name": "d", "generation": 2, "resourceVersion": "1"},
            "status": {"observedGeneration": 2, "updatedNumberScheduled": updated,
                       "numberAvailable": available, "desiredNumberScheduled": desired}}


@dataclass
class ScriptedKube:
    """Each read (a list of one, or a watch wake-up) costs `step` seconds and shows the status
    the script gives for that moment."""

    clock: FakeClock
    script: Any  # Callable[[float], Obj]
    step: float = 5.0
    gets: int = 0
    calls: list[str] = field(default_factory=list)

    def list(self, kind: Any, namespace: str | None = None, **kw: Any) -> ObjList:
        self.gets += 1
        return ObjList([dict(self.script(self.clock.mono))], "1")

    def watch(self, kind: Any, namespace: str | None = None, **kw: Any) -> Iterator[
            tuple[str, Obj]]:
        self.clock.advance(min(self.step, float(kw.get("timeout_seconds", self.step))))
        yield "MODIFIED", dict(self.script(self.clock.mono))

    def watch_table(self, kind: Any, namespace: str | None = None, **kw: Any) -> Iterator[
            tuple[str, Row]]:
        for etype, obj in self.watch(kind, namespace, **kw):
            yield etype, daemonset_row(obj)


class Time:
    """Seconds since the wait began, on the fake clock."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.start = clock, clock.mono

    @property
    def t(self) -> float:
        return self.clock.mono - self.start


def _waiter(script: Any, step: float = 5.0) -> tuple[Waiter, Time]:
    clock = FakeClock(monotonic=0.0)
    kube = ScriptedKube(clock, script, step)
    return Waiter(cast(Kube, kube), "ns", clock), Time(clock)  # ScriptedKube stands in


def test_a_slow_rollout_that_keeps_moving_outlives_the_timeout() -> None:
    # One node every 45 s, 10 nodes: 450 s in all, far past a 100 s timeout.
    waiter, time = _waiter(lambda t: _ds(min(10, int(t // 45)), 10), step=5.0)
    out = waiter.rollout("d", 100.0, lambda ds, pace: None)
    assert out.complete and time.t >= 450


def test_no_progress_for_the_timeout_fails_after_the_timeout_not_before() -> None:
    # 3 nodes roll, then nothing moves: fails 100 s after the last progress.
    waiter, time = _waiter(lambda t: _ds(min(3, int(t // 45)), 10), step=5.0)
    out = waiter.rollout("d", 100.0, lambda ds, pace: None)
    assert not out.complete and out.blocked == ""
    assert 135 + 100 <= time.t <= 135 + 100 + 30
    assert out.stalled_for >= 100


def test_blocked_probe_ends_a_stalled_wait_at_once() -> None:
    waiter, time = _waiter(lambda t: _ds(2, 9), step=5.0)
    asked: list[float] = []

    def blocked() -> str:
        asked.append(time.t)
        return "node n1 not reporting" if time.t >= 60 else ""

    out = waiter.rollout("d", 600.0, lambda ds, pace: None, blocked=blocked, probe_every=30.0)
    assert not out.complete and out.blocked == "node n1 not reporting"
    assert asked[0] >= 30 and time.t < 100, "probed only after 30 s without progress"


def test_blocked_is_not_asked_while_the_rollout_moves() -> None:
    waiter, time = _waiter(lambda t: _ds(min(10, int(t // 10)), 10), step=5.0)
    asked: list[float] = []

    def blocked() -> str:
        asked.append(time.t)
        return ""

    out = waiter.rollout("d", 600.0, lambda ds, pace: None, blocked=blocked, probe_every=30.0)
    assert out.complete and asked == []


def test_pace_estimates_the_rest_from_the_rate_so_far() -> None:
    pace = Pace(0.0)
    pace.note(_ds(0, 10, 1000), 0.0)
    assert pace.eta is None
    pace.note(_ds(10, 10, 1000), 450.0)  # 45 s per node
    assert pace.eta == 990 * 45.0
    assert pace.moved == 450.0
    pace.note(_ds(10, 9, 1000), 500.0)  # a pod went unavailable: no progress
    assert pace.moved == 450.0


def test_eta_text() -> None:
    def p(eta: float | None) -> RolloutProgress:
        return RolloutProgress("d", 1, 1, 10, eta_seconds=eta)
    assert eta_text(p(None)) == ""
    assert eta_text(p(42.2)) == "ETA 42s"
    assert eta_text(p(125)) == "ETA 2m05s"
    assert eta_text(p(990 * 45.0)) == "ETA 12h22m"
