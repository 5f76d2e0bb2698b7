"""The guard's signals as plain logic, no cluster: Event aggregation and rate (a flapping object
costs a bounded number of writes), the probes' answers over a fake clock, the metrics page
from a verdict (absent before the first, gone with the leadership), the bind address, and the
order of a pass's slice writes (what restores reach first, deletes last)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from prometheus_client import generate_latest

from migrator.engine import guardwrites as slicewrites
from migrator.engine.events import BURST, PATCH_SECONDS, SERIES_SECONDS, Aggregator, Occurrence
from migrator.engine.serving import GuardMetrics, Health, parse_address
from migrator.model import objects, sharing
from migrator.model.outcome import Finding, Verdict
from migrator.model.reach import Reach
from tests.helpers.clock import FakeClock

SVC = {"apiVersion": "v1", "kind": "Service",
       "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "uid": "u1"}}


def _occ(clock: FakeClock, reason: str = "SharedEndpointSlices") -> Occurrence:
    return Occurrence(SVC, "Normal", reason, "Share", "note", clock.now())


def test_a_repeat_within_the_series_window_is_counted_and_patched_at_most_every_interval(
) -> None:
    clock, agg = FakeClock(), Aggregator()
    occ = _occ(clock)
    assert agg.observe(occ, clock.monotonic()) == "create"
    agg.created(occ, "nvidia-dcgm-exporter.1", clock.monotonic())
    for _ in range(50):  # a flapping node: fifty repeats within a second
        clock.advance(0.02)
        assert agg.observe(_occ(clock), clock.monotonic()) == "series"
    assert agg.due(clock.monotonic()) == []  # the create was just sent
    clock.advance(PATCH_SECONDS)
    [(_, series)] = agg.due(clock.monotonic())
    assert (series.count, series.name) == (51, "nvidia-dcgm-exporter.1")
    series.sent = series.count
    assert agg.due(clock.monotonic() + PATCH_SECONDS) == []  # nothing new: nothing sent
    clock.advance(SERIES_SECONDS + 1)  # the series ended: the next one is a new Event
    assert agg.due(clock.monotonic()) == [] and not agg.series
    assert agg.observe(_occ(clock), clock.monotonic()) == "create"


def test_new_events_of_one_object_and_reason_stop_at_the_burst_then_one_per_refill() -> None:
    clock, agg = FakeClock(), Aggregator()
    # each occurrence a new Event (its series forgotten): the core recorder's spam filter
    outcomes = []
    for _ in range(BURST + 10):
        outcomes.append(agg.observe(_occ(clock, "Flap"), clock.monotonic()))
        clock.advance(1)
    assert outcomes == ["create"] * BURST + ["dropped"] * 10
    clock.advance(300)  # one token back
    assert agg.observe(_occ(clock, "Flap"), clock.monotonic()) == "create"
    assert agg.observe(_occ(clock, "Flap"), clock.monotonic()) == "dropped"
    assert agg.observe(_occ(clock, "Other"), clock.monotonic()) == "create"  # its own bucket


def test_probes_answer_from_beats_syncs_and_the_lease() -> None:
    clock = FakeClock()
    health = Health(clock, stall_seconds=60)
    health.beat("loop")
    health.watch("watch/services")
    health.expect("watch/endpointslices")
    assert health.alive()[0]
    ready, why = health.ready()
    assert not ready and "watch/endpointslices" in why and "watch/services" in why
    health.synced("watch/services")
    health.synced("watch/endpointslices")
    assert health.ready() == (False, "the Lease has not been tried yet")
    health.leading = False
    assert health.ready() == (True, "ok: standing by")
    health.leading = True
    assert health.ready() == (True, "ok: leading")
    clock.advance(61)
    health.beat("loop")
    alive, why = health.alive()
    assert not alive and why.startswith("watch/services: no progress for 61 s")
    health.beat("watch/services")
    health.check("watch/endpointslices", lambda: "its watch thread ended")
    assert health.alive() == (False, "watch/endpointslices: its watch thread ended")


def test_the_metrics_page_shows_the_last_verdict_only_while_leading() -> None:
    metrics = GuardMetrics()
    page = generate_latest(metrics.registry).decode()
    assert "dcgm_migrate_verdict_ok" not in page and "dcgm_migrate_leader 0.0" in page
    verdict = Verdict("gpucluster", (
        Finding("stable-name", "Service/nvidia-dcgm", True, "exists"),
        Finding("nodes-covered", "Service/nvidia-dcgm", False, "no ready endpoint on 1 of 3"),
        Finding("scrape-once", "Pod/exporters", True, "ok")))
    metrics.status.leading(True)
    metrics.status.judged(verdict, {"nvidia-dcgm": Reach(3, 2)}, 1.7e9)
    metrics.status.passed({"nvidia-dcgm": 4}, 1.7e9)
    metrics.writes.labels("EndpointSlice", "ok").inc()
    metrics.repaired("share", 0.3)
    page = generate_latest(metrics.registry).decode()
    for line in ('dcgm_migrate_verdict_ok 0.0', 'dcgm_migrate_leader 1.0',
                 'dcgm_migrate_check_ok{check="nodes-covered",name="nvidia-dcgm"} 0.0',
                 'dcgm_migrate_check_ok{check="scrape-once",name="exporters"} 1.0',
                 'dcgm_migrate_nodes_wanted{name="nvidia-dcgm"} 3.0',
                 'dcgm_migrate_nodes_reached{name="nvidia-dcgm"} 2.0',
                 'dcgm_migrate_shared_endpoints{name="nvidia-dcgm"} 4.0',
                 'dcgm_migrate_writes_total{kind="EndpointSlice",result="ok"} 1.0',
                 'dcgm_migrate_repair_seconds_bucket{le="0.5",repair="share"} 1.0'):
        assert line in page, line
    metrics.status.leading(False)
    page = generate_latest(metrics.registry).decode()
    assert "dcgm_migrate_verdict_ok" not in page and "dcgm_migrate_nodes_wanted{" not in page
    assert GuardMetrics().registry is not metrics.registry  # no shared default registry


@pytest.mark.parametrize(("text", "address"), [
    (":8080", ("0.0.0.0", 8080)), ("127.0.0.1:0", ("127.0.0.1", 0)),
    ("[::1]:9090", ("::1", 9090)), ("0", None)])
def test_bind_addresses_read_as_controller_runtime_reads_them(
        text: str, address: tuple[str, int] | None) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["8080", "host:", ":99999", "localhost:http"])
def test_a_bind_address_without_a_port_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="HOST"):
        parse_address(text)


def _write(action: str, name: str, service: str, nodes: list[str]) -> sharing.SliceWrite:
    body = {"endpoints": [{"nodeName": n, "conditions": {"ready": True}} for n in nodes]}
    return sharing.SliceWrite(action, name, service, "r", body if action != "delete" else {})


def test_writes_that_restore_reach_go_first_and_deletes_last() -> None:
    covered = slicewrites.covered_nodes([
        {"metadata": {"labels": {objects.SERVICE_NAME_LABEL: "a"}},
         "endpoints": [{"nodeName": "n1", "conditions": {"ready": True}},
                       {"nodeName": "n2", "conditions": {"ready": False}}]}])
    assert covered == {"a": {"n1"}}
    refresh = _write("update", "a-0", "a", ["n1"])
    one = _write("update", "a-1", "a", ["n1", "n2"])
    gone = _write("delete", "a-2", "a", [])
    three = _write("create", "b-0", "b", ["m1", "m2", "m3"])
    first, last = slicewrites.ordered([gone, refresh, one, three], covered)
    assert [w.name for w in first] == ["b-0", "a-1", "a-0"] and last == [gone]


def test_a_batch_starts_only_once_the_one_before_it_is_answered() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def write(w: sharing.SliceWrite) -> str:
        with lock:
            seen.append(w.name)
        return w.name.upper()

    first = [_write("create", f"s-{i}", "a", [f"n{i}"]) for i in range(20)]
    deletes = [_write("delete", "old", "a", [])]
    out = slicewrites.run((first, deletes), write, workers=4)
    assert [r for _, r in out] == [w.name.upper() for w in first] + ["OLD"]
    assert seen[-1] == "old" and set(seen[:-1]) == {w.name for w in first}


def test_the_occurrence_key_ignores_the_note_as_client_go_does() -> None:
    clock = FakeClock()
    a = Occurrence(SVC, "Normal", "SharedEndpointSlices", "Share", "one", clock.now())
    b = Occurrence(SVC, "Normal", "SharedEndpointSlices", "Share", "two",
                   clock.now() + timedelta(seconds=1))
    assert a.key == b.key
    assert a.reference() == {"apiVersion": "v1", "kind": "Service",
                             "name": "nvidia-dcgm-exporter", "namespace": "gpu-operator",
                             "uid": "u1"}
