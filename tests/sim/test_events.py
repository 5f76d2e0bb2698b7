"""Events through `events.k8s.io/v1` on the simulated cluster, as upstream serves them: what the
guard's recorder writes under the Role of docs/guard.yaml (create, then a `series` patch for
repeats) is read back through core/v1 by `kubectl describe svc`, with its count; create
validation and the events.k8s.io field selectors as upstream's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dcgm_sim.cluster import SimCluster, kubeconfig_document
from migrator.engine.events import (
    EVENTS,
    NOTE_LIMIT,
    PATCH_SECONDS,
    REPORTING_CONTROLLER,
    Recorder,
)
from migrator.kube.client import Kube
from migrator.model import kinds
from tests.helpers.clock import FakeClock

REPO = Path(__file__).resolve().parents[2]
NS = "gpu-operator"
SERVICE = "nvidia-dcgm-exporter-dra"
GUARD_TOKEN = "dcgm-migrate-guard-events-token"  # a test credential, for the sim only
GUARD_USER = "system:serviceaccount:gpu-operator:dcgm-migrate-guard"


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster(nodes=2, stack="gpucluster", time_scale=0.02,
                    operator_reconcile_seconds=None) as cluster:
        yield cluster


def _guard_kube(sim: SimCluster, tmp_path: Path) -> Kube:
    """A connection with the guard's Role (docs/guard.yaml) and nothing else."""
    policy = sim.server.access.add_token(GUARD_TOKEN, (REPO / "docs" / "guard.yaml").read_text())
    assert policy.user == GUARD_USER
    path = tmp_path / "kubeconfig-guard"
    path.write_text(yaml.safe_dump(kubeconfig_document(sim.url, NS, GUARD_TOKEN)))
    return Kube.connect(str(path))


def _core_events(sim: SimCluster, svc: dict[str, Any]) -> list[dict[str, Any]]:
    """What kubectl describe lists: core/v1 Events by involvedObject name, namespace, kind,
    uid."""
    meta = svc["metadata"]
    selector = (f"involvedObject.name={meta['name']},involvedObject.namespace={NS},"
                f"involvedObject.kind=Service,involvedObject.uid={meta['uid']}")
    return list(_get(sim, f"/api/v1/namespaces/{NS}/events", fieldSelector=selector)["items"])


def _get(sim: SimCluster, path: str, **query: str) -> dict[str, Any]:
    url = f"{sim.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as answer:
        return dict(json.loads(answer.read()))


def _post(sim: SimCluster, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{sim.url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _describe(sim: SimCluster, tmp_path: Path, service: str) -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not on PATH")
    env = {**os.environ, "KUBECONFIG": sim.kubeconfig, "HOME": str(tmp_path),
           "KUBECACHEDIR": str(tmp_path / "cache")}
    out = subprocess.run([binary, "-n", NS, "describe", "svc", service], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_recorders_events_and_their_series_show_in_kubectl_describe(
        sim: SimCluster, tmp_path: Path) -> None:
    kube = _guard_kube(sim, tmp_path)
    clock = FakeClock()
    counted: list[str] = []
    recorder = Recorder(kube, "guard-a_1", clock, counted=counted.append)
    svc = {**sim.store.get(kinds.SERVICE, NS, SERVICE), "apiVersion": "v1", "kind": "Service"}
    with recorder.running():
        recorder.record(svc, "Normal", "SharedEndpointSlices", "Share",
                        "the guard's EndpointSlices: 1 created")
        sim.wait_for(lambda: len(_core_events(sim, svc)) == 1)
        for _ in range(5):  # a flapping pod: the same reason five more times
            recorder.record(svc, "Normal", "SharedEndpointSlices", "Share", "again")
        sim.wait_for(lambda: counted.count("aggregated") == 5)  # counted, nothing sent
        clock.advance(PATCH_SECONDS)  # the series' count is due
        sim.wait_for(lambda: (_core_events(sim, svc)[0].get("series") or {}).get("count") == 6)
    [event] = _core_events(sim, svc)
    # core/v1 names of what was written through events.k8s.io/v1
    assert event["message"] == "the guard's EndpointSlices: 1 created"  # the first note stays
    assert event["reportingComponent"] == REPORTING_CONTROLLER
    assert event["reportingInstance"] == "guard-a_1"
    assert event["involvedObject"]["uid"] == svc["metadata"]["uid"]
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal", "SharedEndpointSlices", "Share")
    verbs = [(e.verb, e.resource) for e in sim.server.log.entries() if e.user == GUARD_USER]
    assert verbs.count(("create", "events")) == 1 and verbs.count(("patch", "events")) == 1
    assert not [e for e in sim.server.log.entries() if e.user == GUARD_USER and e.code >= 400]

    described = _describe(sim, tmp_path, SERVICE)
    events = described.split("Events:", 1)[1]
    row = next(line for line in events.splitlines() if "SharedEndpointSlices" in line)
    assert row.split()[0] == "Normal" and "(x6 over" in row, row
    assert REPORTING_CONTROLLER in row and "the guard's EndpointSlices: 1 created" in row
    kube.close()


def test_an_event_reads_back_through_events_v1_with_its_field_selectors(
        sim: SimCluster, tmp_path: Path) -> None:
    kube = Kube.connect(sim.kubeconfig)
    svc = sim.store.get(kinds.SERVICE, NS, SERVICE)
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"{SERVICE}.1", "namespace": NS},
            "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "x/y",
            "reportingInstance": "i", "action": "Hold", "reason": "SelectorHeld",
            "type": "Warning", "note": "held",
            "regarding": {"apiVersion": "v1", "kind": "Service", "name": SERVICE,
                          "namespace": NS, "uid": svc["metadata"]["uid"]}}
    created = kube.create(body, kind=EVENTS)
    assert created["apiVersion"] == "events.k8s.io/v1" and created["note"] == "held"
    path = f"/apis/events.k8s.io/v1/namespaces/{NS}/events"
    listed = _get(sim, path, fieldSelector=f"regarding.name={SERVICE},reason=SelectorHeld")
    assert [e["regarding"]["name"] for e in listed["items"]] == [SERVICE]
    assert listed["apiVersion"] == "events.k8s.io/v1" and "involvedObject" not in listed[
        "items"][0]
    assert _get(sim, path, fieldSelector="reportingController=x/y")["items"]
    assert not _get(sim, path, fieldSelector="regarding.name=other")["items"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        _get(sim, path, fieldSelector="involvedObject.name=x")  # core's name: not this version's
    assert refused.value.code == 400
    kube.close()


@pytest.mark.parametrize(("change", "field"), [
    ({"reportingController": ""}, "reportingController: Required value"),
    ({"eventTime": None}, "eventTime: Required value"),
    ({"type": "Info"}, "type: Invalid value"),
    ({"deprecatedCount": 2}, "deprecatedCount: Invalid value"),
    ({"reason": "R" * 129}, 'reason: Invalid value: "": can have at most 128 characters'),
    # Go's len counts bytes: 1024 characters of which one takes two bytes are too many
    ({"note": "é" + "n" * 1023}, 'message: Invalid value: "": can have at most 1024 characters'),
    ({"action": "é" * 65}, 'action: Invalid value: "": can have at most 128 characters'),
])
def test_an_events_v1_create_is_validated_as_upstream(
        sim: SimCluster, change: dict[str, Any], field: str) -> None:
    body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e.1", "namespace": NS},
            "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "c",
            "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal",
            "regarding": {"kind": "Service", "name": SERVICE, "namespace": NS}, **change}
    code, status = _post(sim, f"/apis/events.k8s.io/v1/namespaces/{NS}/events", body)
    assert code == 422 and field in status["message"], status


def test_an_events_v1_note_of_1024_bytes_is_accepted(sim: SimCluster) -> None:
    """The limit is upstream's `len(event.Message) > NoteLengthLimit`: bytes, so 512 two-byte
    characters (1024 bytes) pass where 513 do not."""
    def create(name: str, note: str) -> int:
        body = {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": name, "namespace": NS},
                "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "c",
                "reportingInstance": "i", "action": "A", "reason": "R", "type": "Normal",
                "note": note, "regarding": {"kind": "Service", "name": SERVICE, "namespace": NS}}
        return _post(sim, f"/apis/events.k8s.io/v1/namespaces/{NS}/events", body)[0]

    assert create("e.512", "é" * 512) == 201
    assert create("e.ascii", "n" * 1024) == 201
    assert create("e.513", "é" * 513) == 422


def test_the_recorder_cuts_a_long_note_by_bytes_so_the_server_takes_it(
        sim: SimCluster, tmp_path: Path) -> None:
    """A note of 1,000 two-byte characters (2,000 bytes) is cut to at most 1,024 bytes, never
    inside a character, and the API server (which counts bytes, as upstream) accepts it."""
    kube = _guard_kube(sim, tmp_path)
    recorder = Recorder(kube, "guard-a_1", FakeClock())
    svc = {**sim.store.get(kinds.SERVICE, NS, SERVICE), "apiVersion": "v1", "kind": "Service"}
    with recorder.running():
        recorder.record(svc, "Warning", "EndpointSliceRefused", "Share", "é" * 1000)
        sim.wait_for(lambda: len(_core_events(sim, svc)) == 1)
    [event] = _core_events(sim, svc)
    assert event["message"] == "é" * (NOTE_LIMIT // 2)
    assert not [e for e in sim.server.log.entries() if e.user == GUARD_USER and e.code >= 400]
    kube.close()
