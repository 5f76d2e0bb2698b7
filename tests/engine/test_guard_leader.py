"""The guard's leader election renews on its own thread with client-go's timing
(engine/leader.py): a pass longer than the lease keeps the Lease and a second replica never
leads or writes meanwhile; a leader that cannot renew stops writing once its renew deadline
passes, before any other replica could take the Lease. Time is a clock the test steps
(`StepClock`): no test waits out a lease."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from dcgm_sim.cluster import SimCluster, kubeconfig_document
from migrator.engine.guard import Guard, GuardSettings
from migrator.engine.guardloop import timing
from migrator.engine.guardwrites import Outcome
from migrator.engine.leader import LeaderElector, LeaseLock, Timing
from migrator.kube.client import Kube
from migrator.kube.transport import RetryPolicy
from migrator.model import kinds
from migrator.model.guarding import Correction
from migrator.model.stacks import load_catalog
from tests.helpers import cli

NS = "gpu-operator"
REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
REAL_BOUND = 20.0  # real seconds any wait for another thread may take (a loaded machine)


class StepClock:
    """Time moves only when the test `advance`s it; a wait on it ends when its condition holds
    or the test has moved time past its end (polled, so it needs no notify of its own)."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = T0
        self._parked: set[int] = set()  # the threads in `wait_for`, their end fixed

    def now(self) -> datetime:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def sleep(self, seconds: float) -> None:
        end = self.mono + seconds
        while self.mono < end:
            time.sleep(0.002)

    def wait_for(self, condition: threading.Condition, ready: Callable[[], bool],
                 seconds: float) -> bool:
        end, bound = self.mono + seconds, time.monotonic() + REAL_BOUND
        me = threading.get_ident()
        self._parked.add(me)
        try:
            while not ready() and self.mono < end and time.monotonic() < bound:
                condition.wait(0.002)
        finally:
            self._parked.discard(me)
        return ready()

    def waiting(self, elector: LeaderElector) -> bool:
        """The elector's thread waits on this clock, the end of its wait fixed: time moved
        now counts towards its next attempt. (Moved while it is between an attempt and its
        wait, a step would count towards nothing, and the test would wait for an attempt
        that never comes.)"""
        thread = elector._thread  # which thread is the elector's
        return thread is not None and thread.ident in self._parked

    def advance(self, seconds: float) -> None:
        self.mono += seconds
        self.wall += timedelta(seconds=seconds)


def _until(predicate: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + REAL_BOUND
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.002)


@dataclass
class FakeLock:
    """A LeaseLock whose attempts succeed while `ok`, and block while `hang` is set."""

    ok: bool = True
    hang: threading.Event = field(default_factory=threading.Event)
    go_on: threading.Event = field(default_factory=threading.Event)
    released: bool = False
    is_leader: bool = False

    def try_acquire_or_renew(self) -> bool:
        if self.hang.is_set():
            self.go_on.wait(REAL_BOUND)
        self.is_leader = self.ok
        return self.ok

    def release(self) -> bool:
        self.released = self.is_leader
        return self.released


TIMING = Timing(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)  # client-go's


@contextmanager
def electing(lock: FakeLock, clock: StepClock) -> Iterator[tuple[LeaderElector, list[str]]]:
    said: list[str] = []
    elector = LeaderElector(cast(LeaseLock, lock), TIMING, clock,
                            on_started=lambda: said.append("started"),
                            on_stopped=lambda: said.append("stopped"))
    elector.start()
    try:
        yield elector, said
    finally:
        lock.go_on.set()
        elector.stop()


def _step(elector: LeaderElector, clock: StepClock, seconds: float) -> None:
    """Move the clock one retry period and wait until the elector made its attempt."""
    _until(lambda: clock.waiting(elector), "the elector never waited")
    before = elector.attempts
    clock.advance(seconds)
    _until(lambda: elector.attempts > before, "no attempt after a retry period")


def test_the_elector_renews_every_retry_period_on_its_own_thread() -> None:
    clock, lock = StepClock(), FakeLock()
    with electing(lock, clock) as (elector, said):
        _until(elector.leading, "never led")
        for _ in range(30):  # 60 s: four lease durations, while no caller does anything
            _step(elector, clock, TIMING.retry_period)
            assert elector.leading()
        assert said == ["started"] and elector.attempts == 31
    assert lock.released  # stopping gives the Lease up (client-go's ReleaseOnCancel)


def test_failed_renewals_stop_the_leader_at_its_renew_deadline_before_the_lease_ends() -> None:
    clock, lock = StepClock(), FakeLock()
    with electing(lock, clock) as (elector, said):
        _until(elector.leading, "never led")
        _step(elector, clock, TIMING.retry_period)
        renewed = clock.mono  # when the last good renewal began
        lock.ok = False  # the API server refuses from here on
        while clock.mono + TIMING.retry_period < renewed + TIMING.renew_deadline:
            _step(elector, clock, TIMING.retry_period)  # a failed renewal, retried
            assert elector.leading()
        clock.advance(renewed + TIMING.renew_deadline - clock.mono - 0.25)
        assert elector.leading()
        clock.advance(0.25)  # exactly at the renew deadline: it stops leading at once
        assert not elector.leading()
        assert clock.mono - renewed < TIMING.lease_duration  # before anyone could take it
        _until(lambda: said == ["started", "stopped"], "on_stopped never ran")
        lock.ok = True  # the API is back: it leads again through acquire
        _step(elector, clock, TIMING.retry_period)
        _until(elector.leading, "never led again")
        assert said == ["started", "stopped", "started"]


def test_a_renewal_hanging_on_a_dead_connection_closes_the_fence_by_the_clock() -> None:
    clock, lock = StepClock(), FakeLock()
    with electing(lock, clock) as (elector, _said):
        _until(elector.leading, "never led")
        lock.hang.set()  # the next attempt never returns (until the test lets it)
        clock.advance(TIMING.retry_period)
        before = clock.mono - TIMING.retry_period
        clock.advance(TIMING.renew_deadline - TIMING.retry_period - 0.25)
        assert elector.leading()
        clock.advance(0.25)  # the deadline, with the elector's thread still stuck
        assert not elector.leading() and clock.mono - before == TIMING.renew_deadline


@pytest.mark.parametrize(("lease", "deadline", "retry"), [(10, 10, 2), (15, 2, 2)])
def test_timing_is_checked_as_client_go_checks_it(lease: float, deadline: float,
                                                  retry: float) -> None:
    with pytest.raises(ValueError):
        Timing(lease, deadline, retry)


def test_the_settings_give_client_go_timing_and_a_valid_one_for_short_leases() -> None:
    assert timing(GuardSettings()) == TIMING
    for lease in (1, 2, 3, 15, 60):  # every --lease-seconds the CLI takes builds
        built = timing(GuardSettings(lease_seconds=lease))
        assert built.renew_deadline < built.lease_duration == lease


# ---- on the simulated cluster ----------------------------------------------------------------

def _guard(sim: SimCluster, identity: str, clock: StepClock) -> Guard:
    kube = Kube.connect(sim.kubeconfig, retry=RetryPolicy(attempts=1))
    settings = GuardSettings(identity=identity, lease_seconds=3, retry_seconds=0.5,
                             min_pass_seconds=0.05)
    return Guard(kube, NS, load_catalog(), settings, clock=clock)


@contextmanager
def _running(guard: Guard) -> Iterator[threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=guard.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield stop
    finally:
        stop.set()
        thread.join(20)
        guard.kube.close()


def _session_affinity(sim: SimCluster) -> str:
    return str(sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm-exporter")["spec"]
               ["sessionAffinity"])


def _hand_edit(sim: SimCluster) -> None:
    """A hand edit of the alias's config: the leader's next pass re-syncs it."""
    alias = copy.deepcopy(sim.store.get(kinds.SERVICE, NS, "nvidia-dcgm-exporter"))
    alias["spec"]["sessionAffinity"] = "ClientIP"
    sim.store.update(kinds.SERVICE, alias)


def _slow_reads(guard: Guard) -> tuple[threading.Event, threading.Event]:
    """The leader's pass blocks in its read (a 5,000-pod list behind a queueing API server)
    until the test lets it go: (entered, let go)."""
    entered, let_go = threading.Event(), threading.Event()
    read = guard.read

    def slow(*, pods: bool = True) -> Any:
        entered.set()
        assert let_go.wait(60)
        return read(pods=pods)

    guard.read = slow  # type: ignore[method-assign]  # the slow step, here only
    return entered, let_go


def test_a_pass_longer_than_the_lease_keeps_it_and_the_standby_never_writes(
        make_sim: Callable[..., SimCluster]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster", operator_reconcile_seconds=None)
    assert cli.run(sim.kubeconfig, "apply", "--phase", "2", "--yes").code == 0
    _hand_edit(sim)
    clock = StepClock()
    a, b = _guard(sim, "guard-a", clock), _guard(sim, "guard-b", clock)
    entered, let_go = _slow_reads(a)
    b_led: list[bool] = []
    b.elector.on_attempt = lambda leading: b_led.append(leading)
    with _running(a):
        assert entered.wait(REAL_BOUND)  # a leads and its first pass is stuck in its read
        with _running(b):
            _until(lambda: b.elector.attempts >= 1, "b never tried")
            lease_seconds = a.settings.lease_seconds
            for _ in range(int(4 * lease_seconds / 0.5)):  # four lease durations, in steps
                _step_both(a, b, clock, 0.5)
                assert a.elector.leading()
            spec = sim.store.get(kinds.LEASE, NS, "dcgm-migrate-guard")["spec"]
            assert spec["holderIdentity"] == "guard-a" and spec["leaseTransitions"] == 0
            # renewed during the pass (within a retry period of now), not only before it
            assert _renew_time(sim) >= clock.wall - timedelta(seconds=0.5)
            assert b_led and not any(b_led) and b.passes == 0 and b.writers.written == []
            assert a.passes == 0 and _session_affinity(sim) == "ClientIP"  # nobody wrote
            let_go.set()
            _until(lambda: a.passes >= 1, "a's pass never ended")
            assert _session_affinity(sim) == "None"  # written by the leader, once free
            assert [c.action for c in a.writers.written] == ["sync"]
            assert b.writers.written == [] and not any(b_led)


def test_a_leader_that_loses_the_api_stops_writing_before_its_lease_could_pass(
        make_sim: Callable[..., SimCluster]) -> None:
    sim = make_sim(nodes=3, stack="gpucluster", operator_reconcile_seconds=None)
    assert cli.run(sim.kubeconfig, "apply", "--phase", "2", "--yes").code == 0
    clock = StepClock()
    a = _guard(sim, "guard-a", clock)
    with _running(a):
        _until(lambda: a.passes >= 1 and a.elector.leading(), "a never led")
        t = timing(a.settings)
        sim.server.faults.update(error_rate=1.0, error_codes=[503])  # the API is gone
        renewed = _renew_time(sim)  # the last renewal that got through began then
        while a.elector.leading():
            clock.advance(0.05)
        lost = clock.wall
        # Stopped within the renew deadline of that renewal, so before the moment another
        # replica, which judges expiry from when it saw that renewal, could take the Lease.
        assert lost - renewed <= timedelta(seconds=t.renew_deadline + 0.05)
        assert lost - renewed < timedelta(seconds=t.lease_duration)
        assert _renew_time(sim) == renewed  # no renewal got through meanwhile
        _until(lambda: a.metrics.registry.get_sample_value(  # each failed attempt counted
            "dcgm_migrate_api_errors_total", {"operation": "lease"}), "no Lease error counted")
        mark = sim.server.log.entries()[-1].seq
        hold = Correction("hold", "nvidia-dcgm-exporter", "r", {"app": "x"}, {"app": "y"})
        done, skipped = a.writers.apply([hold])
        assert done == [] and [s.outcome for s in skipped] == [Outcome.NOT_LEADING]
        sent = [e for e in sim.server.log.entries() if e.seq > mark and e.verb == "patch"]
        assert sent == []  # refused by the fence, never sent
        sim.server.faults.reset()  # the API is back: it leads again (it still holds the record)
        for _ in range(10):
            if a.elector.leading():
                break
            _step(a.elector, clock, t.retry_period)
        assert a.elector.leading()
        assert _renew_time(sim) > lost - timedelta(seconds=t.retry_period)


def _step_both(a: Guard, b: Guard, clock: StepClock, seconds: float) -> None:
    """Move the clock one retry period and wait until both electors made their attempt."""
    _until(lambda: clock.waiting(a.elector) and clock.waiting(b.elector),
           "an elector never waited")
    before = (a.elector.attempts, b.elector.attempts)
    clock.advance(seconds)
    _until(lambda: a.elector.attempts > before[0] and b.elector.attempts > before[1],
           "an elector missed a retry period")


def _renew_time(sim: SimCluster) -> datetime:
    spec = sim.store.get(kinds.LEASE, NS, "dcgm-migrate-guard")["spec"]
    return datetime.strptime(spec["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


GUARD_TOKEN = "dcgm-migrate-guard-leader-token"  # a test credential, for the sim only
GUARD_USER = "system:serviceaccount:gpu-operator:dcgm-migrate-guard"


def test_a_steady_leader_writes_nothing_but_its_lease_renewals(
        make_sim: Callable[..., SimCluster], tmp_path: Path) -> None:
    """After phase 3, with nothing changing: many passes and renewals later, the only writes
    the guard sent are updates of its Lease (its renewals, on the elector's thread), each
    renewal one request (client-go's optimistic fast path for the leader)."""
    sim = make_sim(nodes=3, stack="gpucluster", operator_reconcile_seconds=None)
    assert cli.run(sim.kubeconfig, "apply", "--phase", "3", "--yes", "--settle", "0s").code == 0
    sim.server.access.add_token(GUARD_TOKEN, (REPO / "docs" / "guard.yaml").read_text())
    kubeconfig = tmp_path / "kubeconfig-guard"
    kubeconfig.write_text(yaml.safe_dump(kubeconfig_document(sim.url, NS, GUARD_TOKEN)))
    log: list[str] = []
    settings = GuardSettings(identity="guard-a", lease_seconds=3, retry_seconds=0.2,
                             resync_seconds=0.2, min_pass_seconds=0.05)
    guard = Guard(Kube.connect(str(kubeconfig)), NS, load_catalog(), settings, log=log.append)
    created = ("dcgm_migrate_events_total", {"result": "created"})
    with _running(guard):
        _until(lambda: any(line.startswith("verdict:") for line in log)
               and guard.metrics.registry.get_sample_value(*created), "no first verdict")
        sim.wait_idle()
        mark = sim.server.log.entries()[-1].seq
        passes, attempts = guard.passes, guard.elector.attempts
        _until(lambda: guard.passes >= passes + 10 and guard.elector.attempts >= attempts + 5,
               "too few passes")
        mine = [(e.verb, e.resource, e.name) for e in sim.server.log.writes(mark)
                if e.user == GUARD_USER]
        leases = [e.verb for e in sim.server.log.since(mark)
                  if e.user == GUARD_USER and e.resource == "leases"]
    assert mine and set(mine) == {("update", "leases", "dcgm-migrate-guard")}, mine
    assert set(leases) == {"update"}  # a renewal is one request: no read before it
