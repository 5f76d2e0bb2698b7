"""`Waiter` on a fake clock and a scripted API: rollouts, gates that must come true, the settle
countdown and every deadline, with no real time spent and every sleep accounted for.

The scripted watch stands in for the server: it hands out the events a test queued for it, and
when it has none it "blocks" for the timeout the waiter asked for by moving the fake clock, the
way a real watch returns empty at its timeoutSeconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from dcgm_sim.server import ADMIN_TOKEN, ApiServer
from dcgm_sim.store import Store
from migrator.engine.waiting import Pace, Waiter
from migrator.errors import APIError, WatchExpired
from migrator.kube.client import Kube, ObjList
from migrator.model import kinds
from migrator.model.gates import GateResult
from migrator.model.kinds import Kind
from migrator.model.tables import Row, daemonset_row
from tests.helpers.builders import NS, daemonset
from tests.helpers.clock import FakeClock

Obj = dict[str, Any]


@dataclass
class Page:
    resource_version: str


@dataclass
class ScriptedKube:
    """list/watch/pages as the Waiter uses them; records every watch it was asked for. A list
    answers at the collection's version `rv-<n>`, n counting every list and page read."""

    clock: FakeClock
    objects: dict[str, Obj] = field(default_factory=dict)
    streams: list[list[tuple[str, Obj]] | Exception] = field(default_factory=list)
    watches: list[dict[str, Any]] = field(default_factory=list)
    lists: int = 0

    def list(self, kind: Kind, namespace: str, *, field_selector: str) -> ObjList:
        name = field_selector.removeprefix("metadata.name=")
        self.lists += 1
        found = self.objects.get(name)
        return ObjList([found] if found is not None else [], f"rv-{self.lists}")

    def watch(self, kind: Kind, namespace: str, *, resource_version: str,
              field_selector: str | None = None, label_selector: str | None = None,
              timeout_seconds: int, printed: bool = False) -> Iterator[tuple[str, Obj]]:
        self.watches.append({"kind": kind, "rv": resource_version, "timeout": timeout_seconds,
                             "fields": field_selector, "labels": label_selector,
                             "printed": printed})
        script = self.streams.pop(0) if self.streams else []
        if isinstance(script, Exception):
            raise script
        for etype, obj in script:
            if obj.get("kind") == "DaemonSet":
                self.objects[obj["metadata"]["name"]] = obj  # the watch shows the live object
            yield etype, obj
        self.clock.advance(timeout_seconds)  # no more events: the stream ends at its timeout

    def watch_table(self, kind: Kind, namespace: str, **kw: Any) -> Iterator[tuple[str, Row]]:
        for etype, obj in self.watch(kind, namespace, **kw):
            yield etype, daemonset_row(obj)

    def pages(self, kind: Kind, namespace: str, *, label_selector: str | None = None,
              page_size: int, printed: bool = False) -> Iterator[Page]:
        self.lists += 1
        yield Page(f"rv-{self.lists}")


def ds(updated: int, available: int, desired: int = 3, rv: str = "1") -> Obj:
    obj = daemonset("nvidia-dcgm-dra", desired=desired, updated=updated, available=available)
    obj["metadata"]["resourceVersion"] = rv
    return obj


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def kube(clock: FakeClock) -> ScriptedKube:
    return ScriptedKube(clock)


@pytest.fixture
def beats() -> list[float]:
    return []


@pytest.fixture
def waiter(kube: ScriptedKube, clock: FakeClock, beats: list[float]) -> Waiter:
    return Waiter(cast(Kube, kube), NS, clock, heartbeat=lambda: beats.append(clock.mono))


# ---- rollout ------------------------------------------------------------------------------------

def test_a_complete_rollout_returns_at_once(waiter: Waiter, kube: ScriptedKube,
                                            clock: FakeClock) -> None:
    kube.objects["nvidia-dcgm-dra"] = ds(3, 3)
    seen: list[Obj] = []
    assert waiter.rollout("nvidia-dcgm-dra", 60, lambda d, pace: seen.append(d)).complete
    assert kube.watches == [] and clock.slept == [] and len(seen) == 1


def test_a_missing_daemonset_is_no_rollout(waiter: Waiter, clock: FakeClock) -> None:
    out = waiter.rollout("nvidia-dcgm-dra", 60, lambda d, pace: None)
    assert out.ds is None and not out.complete


def test_a_rollout_follows_the_watch_until_complete(waiter: Waiter, kube: ScriptedKube,
                                                    clock: FakeClock,
                                                    beats: list[float]) -> None:
    kube.objects["nvidia-dcgm-dra"] = ds(0, 3)
    kube.streams = [[("MODIFIED", ds(1, 2, rv="2")), ("MODIFIED", ds(2, 2, rv="3")),
                     ("MODIFIED", ds(3, 3, rv="4")), ("MODIFIED", ds(3, 3, rv="5"))]]
    seen: list[tuple[int, int]] = []

    def report(d: Obj, pace: Pace) -> None:
        seen.append((d["status"]["updatedNumberScheduled"], d["status"]["numberAvailable"]))

    done = waiter.rollout("nvidia-dcgm-dra", 600, report)
    assert done.complete and done.ds is not None
    assert done.ds["metadata"]["resourceVersion"] == "4"  # stops at complete
    # Rows as they came; the row that looks complete is then confirmed by one read.
    assert seen == [(0, 3), (1, 2), (2, 2), (3, 3), (3, 3)]
    assert [w["rv"] for w in kube.watches] == ["rv-1"]  # from the version of the list it read
    assert kube.watches[0]["fields"] == "metadata.name=nvidia-dcgm-dra"
    assert kube.watches[0]["timeout"] == 30  # one watch is at most 30 s
    assert clock.slept == [] and len(beats) >= 4


def test_rows_that_only_look_complete_do_not_end_the_wait(waiter: Waiter, kube: ScriptedKube,
                                                         clock: FakeClock) -> None:
    # Right after a template change the controller has not observed generation 2: the row
    # still shows the old generation's complete counts. A row has no generations, so the
    # waiter asks the object, sees observedGeneration 1 < 2 and keeps following.
    def gen2(updated: int, available: int, observed: int, rv: str) -> Obj:
        obj = ds(updated, available, rv=rv)
        obj["metadata"]["generation"] = 2
        obj["status"]["observedGeneration"] = observed
        return obj

    kube.objects["nvidia-dcgm-dra"] = gen2(3, 3, observed=1, rv="1")
    kube.streams = [[("MODIFIED", gen2(3, 3, observed=1, rv="2"))],
                    [("MODIFIED", gen2(0, 2, observed=2, rv="3")),
                     ("MODIFIED", gen2(3, 3, observed=2, rv="4"))]]
    out = waiter.rollout("nvidia-dcgm-dra", 600, lambda d, pace: None)
    assert out.complete and out.ds is not None
    assert out.ds["metadata"]["resourceVersion"] == "4"
    assert [w["rv"] for w in kube.watches] == ["rv-1", "rv-2"]  # read again after the look-alike


def test_a_stuck_rollout_gives_up_at_the_progress_deadline(waiter: Waiter, kube: ScriptedKube,
                                                           clock: FakeClock) -> None:
    kube.objects["nvidia-dcgm-dra"] = ds(1, 2)
    start = clock.mono
    out = waiter.rollout("nvidia-dcgm-dra", 75, lambda d, pace: None)
    assert not out.complete and out.stalled_for == 75
    # Watches of 30 s, then what is left of the 75 s: never a wait past the deadline.
    assert [w["timeout"] for w in kube.watches] == [30, 30, 15]
    assert clock.mono == start + 75


def test_a_watch_timeout_is_rounded_up_to_whole_seconds(waiter: Waiter, kube: ScriptedKube,
                                                        clock: FakeClock) -> None:
    kube.objects["nvidia-dcgm-dra"] = ds(1, 2)
    assert not waiter.rollout("nvidia-dcgm-dra", 0.2, lambda d, pace: None).complete
    assert [w["timeout"] for w in kube.watches] == [1]  # timeoutSeconds is an integer >= 1


def test_events_past_the_deadline_end_the_rollout(waiter: Waiter, kube: ScriptedKube,
                                                  clock: FakeClock) -> None:
    kube.objects["nvidia-dcgm-dra"] = ds(1, 2)

    def late(d: Obj, pace: Pace) -> None:
        clock.advance(4)  # each report comes 4 s after the previous one

    events = [("MODIFIED", ds(1, 2, rv=str(i))) for i in range(2, 10)]  # no progress
    kube.streams = [events]
    assert not waiter.rollout("nvidia-dcgm-dra", 10, late).complete
    # Reports at 4 s (the first read), 8 s (event rv 2) and 12 s (rv 3): the stream is left at
    # the first event past the deadline, not followed to its end.
    assert len(kube.watches) == 1
    assert kube.objects["nvidia-dcgm-dra"]["metadata"]["resourceVersion"] == "3"


# ---- until --------------------------------------------------------------------------------------

def gates(*oks: bool) -> list[GateResult]:
    return [GateResult(f"g{i}", ok) for i, ok in enumerate(oks)]


def test_until_returns_at_once_when_the_gates_hold(waiter: Waiter, kube: ScriptedKube,
                                                   clock: FakeClock) -> None:
    results = waiter.until(lambda: gates(True, True), clock.mono + 60)
    assert all(r.ok for r in results)
    assert kube.lists == 0 and kube.watches == [] and clock.slept == []


def test_until_stops_at_once_on_a_fatal_failure(waiter: Waiter, kube: ScriptedKube,
                                                clock: FakeClock) -> None:
    results = waiter.until(lambda: gates(True, False), clock.mono + 60,
                           fatal=lambda rs: not rs[1].ok)
    assert not results[1].ok and kube.watches == [] and clock.slept == []


def test_until_rechecks_after_a_wake_up_with_backoff(waiter: Waiter, kube: ScriptedKube,
                                                     clock: FakeClock,
                                                     beats: list[float]) -> None:
    checks: list[float] = []
    slice_event = ("MODIFIED", {"kind": "EndpointSlice", "metadata": {"resourceVersion": "9"}})
    kube.streams = [[slice_event], [slice_event], [slice_event]]

    def check() -> list[GateResult]:
        checks.append(clock.mono)
        return gates(len(checks) >= 4)

    results = waiter.until(check, clock.mono + 60, label_selector="app=x")
    assert results[0].ok and len(checks) == 4
    assert kube.lists == 1  # the resourceVersion to watch from, read once
    assert [w["rv"] for w in kube.watches] == ["rv-1", "9", "9"]
    assert all(w["kind"] is kinds.ENDPOINTSLICE and w["labels"] == "app=x"
               for w in kube.watches)
    # A wake-up needs the event's version, not the slice: it watches printed rows.
    assert all(w["printed"] for w in kube.watches)
    # An event wakes the waiter at once; it lets a burst of changes land (at most recheck_min)
    # before reading again.
    assert clock.slept == [waiter.recheck_min] * 3
    assert len(beats) == 4


def test_until_backs_off_while_nothing_happens_and_stops_at_the_deadline(
        waiter: Waiter, kube: ScriptedKube, clock: FakeClock) -> None:
    start = clock.mono
    checks = 0

    def never() -> list[GateResult]:
        nonlocal checks
        checks += 1
        return gates(True, False)

    results = waiter.until(never, start + 10)
    assert not results[1].ok
    # With no events each wait is one watch of the delay (recheck_min doubling up to
    # recheck_max, at most 1 s here) rounded up to a whole second: a check a second until the
    # deadline, then the last results.
    assert [w["timeout"] for w in kube.watches] == [1] * 10
    assert checks == 11 and clock.mono == start + 10
    assert clock.slept == []  # a quiet watch already waited longer than the delay


def test_a_long_wait_says_what_it_waits_for_once_and_again_when_that_changes(
        waiter: Waiter, kube: ScriptedKube, clock: FakeClock) -> None:
    """Nothing is said of a wait shorter than `patience` (most pass within a recheck); past
    it, the failed gates, then each time they change, never the same twice in a row."""
    start = clock.mono
    told: list[list[GateResult]] = []
    details = iter(["a", "a", "a", "a", "a", "a", "a", "b", "b", "b"])

    def check() -> list[GateResult]:
        detail = next(details, None)
        return [GateResult("g", detail is None, detail or "")]

    results = waiter.until(check, start + 60, waiting=told.append)
    assert results[0].ok
    assert [(r.name, r.detail) for failed in told for r in failed] == [("g", "a"), ("g", "b")]
    assert waiter.patience == 5.0 and clock.mono - start >= waiter.patience
    quick = waiter.until(iter([gates(False), gates(True)]).__next__, clock.mono + 60,
                         waiting=told.append)
    assert quick[0].ok and len(told) == 2  # one recheck: nothing said
    at_once: list[list[GateResult]] = []
    waiter.until(iter([gates(False), gates(True)]).__next__, clock.mono + 60,
                 waiting=at_once.append, patience=0.0)
    assert [[r.name for r in failed] for failed in at_once] == [["g0"]]


def test_an_expired_watch_costs_a_short_sleep_and_a_fresh_list(
        waiter: Waiter, kube: ScriptedKube, clock: FakeClock) -> None:
    kube.streams = [WatchExpired("too old", status=410), []]
    checks = 0

    def check() -> list[GateResult]:
        nonlocal checks
        checks += 1
        return gates(checks >= 3)

    assert waiter.until(check, clock.mono + 60)[0].ok
    assert kube.lists == 2  # listed again after the expired watch
    assert clock.slept[0] == waiter.recheck_min


def test_an_api_error_in_a_rollout_watch_re_reads(waiter: Waiter, kube: ScriptedKube,
                                                  clock: FakeClock) -> None:
    kube.objects["nvidia-dcgm-dra"] = ds(1, 2)
    kube.streams = [APIError("broken", status=500)]
    start = clock.mono
    assert not waiter.rollout("nvidia-dcgm-dra", 5, lambda d, pace: None).complete
    assert clock.slept[0] == waiter.recheck_min  # then it watched again until the deadline
    assert clock.mono >= start + 5


def test_a_watch_that_keeps_failing_backs_off_instead_of_looping(
        waiter: Waiter, kube: ScriptedKube, clock: FakeClock) -> None:
    # A watch refused every time (a proxy, a broken stream) costs a read and a failed watch
    # per try: the pause between tries doubles from recheck_min to recheck_max.
    kube.objects["nvidia-dcgm-dra"] = ds(1, 2)
    kube.streams = [APIError("broken", status=500) for _ in range(100)]
    assert not waiter.rollout("nvidia-dcgm-dra", 10, lambda d, pace: None).complete
    assert clock.slept[:6] == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.0])
    assert len(kube.watches) <= 16  # 10 s of tries, not 10 / 0.05 = 200


# ---- settle -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("seconds", "sleeps", "reports"), [
    (3.0, [1.0, 1.0, 1.0], [3.0, 2.0, 1.0, 0.0]),
    (2.5, [1.0, 1.0, 0.5], [2.5, 1.5, 0.5, 0.0]),
    (0.25, [0.25], [0.25, 0.0]),
    (0.0, [], [0.0]),
])
def test_settle_counts_down_in_whole_seconds(waiter: Waiter, clock: FakeClock,
                                             beats: list[float], seconds: float,
                                             sleeps: list[float], reports: list[float]) -> None:
    seen: list[float] = []
    waiter.settle(seconds, seen.append)
    assert clock.slept == pytest.approx(sleeps)
    assert seen == pytest.approx(reports)
    assert math.isclose(sum(clock.slept), seconds)
    assert len(beats) == len(sleeps)  # the lock is kept alive through the countdown


def test_a_stalled_rollout_watches_from_a_current_version_not_its_own() -> None:
    """A DaemonSet that last changed long ago (a stalled rollout) has a resourceVersion a real
    API server's watch cache may have moved past: a watch from it is answered 410, again at
    every pass. The waiter watches from the version of the list it read, which is current, so
    one watch spans its wait (here on a sim keeping 20 events)."""
    store = Store(event_log_size=20)
    store.create(kinds.NAMESPACE, {"metadata": {"name": NS}})
    with ApiServer(store) as server:
        kube = Kube.for_server(server.url, ADMIN_TOKEN)
        kube.create(ds(1, 1))
        for i in range(30):  # the DaemonSet's own version falls out of the window
            kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": f"c{i}", "namespace": NS}})
        seq = server.log.last_seq
        out = Waiter(kube, NS).rollout("nvidia-dcgm-dra", 2.0, lambda d, pace: None)
        watches = server.log.find(verb="watch", resource="daemonsets")
    assert not out.complete and out.blocked == ""  # no progress for the whole timeout
    assert len([w for w in watches if w.seq > seq]) == 1, watches
