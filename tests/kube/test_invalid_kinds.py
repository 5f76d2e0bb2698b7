"""A 422 is not always a failed JSON-patch `test`: against the simulated API server, a failed
`test` is `APITestFailed` (re-read and re-decide), while an immutable field and a
ValidatingAdmissionPolicy-style denial are `APIInvalid` naming what refused them; the guard's
writers report such a refusal as what it is and do not send the same patch again."""

from __future__ import annotations

import time
from typing import Any

import pytest

from dcgm_sim.server import ADMIN_TOKEN
from migrator.engine.guard import Guard
from migrator.engine.guardwrites import Outcome
from migrator.errors import APIInvalid, APITestFailed, APIWebhookDenied
from migrator.kube import Kube, RetryPolicy
from migrator.model import guarding, kinds
from migrator.model.stacks import load_catalog

Api = Any


def patches(api: Api, since: int, count: int) -> int:
    """Service patches logged since `since`, once `count` are there (or 5 s passed): the sim
    logs a request just after answering it."""
    deadline = time.monotonic() + 5
    while True:
        found = len(api.log.find(since, verb="patch", resource="services"))
        if found >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def service(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"selector": {"app": name}, "ports": [{"port": 9400}], **spec}}


@pytest.fixture
def kube(api: Api) -> Kube:
    return Kube.for_server(api.url, ADMIN_TOKEN, retry=RetryPolicy(attempts=1))


def test_a_failed_test_is_told_from_an_immutable_field(kube: Kube) -> None:
    live = kube.create(service("a"))
    with pytest.raises(APITestFailed):
        kube.patch(kinds.SERVICE, "a", "ns", [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "1"},
            {"op": "replace", "path": "/spec/selector", "value": {"app": "b"}}],
            patch_type="json")
    with pytest.raises(APIInvalid) as info:
        kube.patch(kinds.SERVICE, "a", "ns", [
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": live["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/spec/clusterIP", "value": "10.96.200.200"},
            {"op": "replace", "path": "/spec/clusterIPs", "value": ["10.96.200.200"]}],
            patch_type="json")
    assert not isinstance(info.value, APITestFailed)
    assert "may not change once set" in info.value.message
    assert any(c.startswith("spec.clusterIPs[0]") for c in info.value.causes)
    assert "bug" not in info.value.hint


def test_an_admission_policy_denial_is_reported_as_such(api: Api, kube: Kube) -> None:
    kube.create(service("a"))
    api.faults.update(deny_writes=["services/a"], deny_message="aliases are frozen")
    with pytest.raises(APIInvalid) as info:
        kube.patch(kinds.SERVICE, "a", "ns", {"metadata": {"labels": {"x": "y"}}},
                   patch_type="merge")
    assert not isinstance(info.value, APITestFailed)
    assert info.value.message == (
        "services \"a\" is forbidden: ValidatingAdmissionPolicy 'sim-deny' with binding "
        "'sim-deny' denied request: aliases are frozen.")
    assert info.value.reason == "Invalid" and info.value.status == 422


def test_an_admission_webhook_denial_is_a_forbidden_with_its_message(api: Api,
                                                                      kube: Kube) -> None:
    """A webhook that sets no code is answered 403 with no reason (`ToStatusErr`): typed as a
    webhook's refusal, not a missing permission."""
    kube.create(service("a"))
    api.faults.update(deny_writes=["services/a"], deny_by="webhook",
                      deny_message="aliases are frozen")
    with pytest.raises(APIWebhookDenied) as info:
        kube.patch(kinds.SERVICE, "a", "ns", {"metadata": {"labels": {"x": "y"}}},
                   patch_type="merge")
    assert info.value.message == ('admission webhook "deny.sim.dcgm-migrate" denied the '
                                  "request: aliases are frozen.")
    assert info.value.status == 403


def test_the_guard_does_not_send_a_refused_patch_again(api: Api, kube: Kube) -> None:
    live = kube.create(service("nvidia-dcgm", type="LoadBalancer", loadBalancerClass="a"))
    guard = Guard(kube, "ns", load_catalog(), log=lambda _: None)
    sync = guarding.Correction(guarding.SYNC, "nvidia-dcgm", "differs in loadBalancerClass",
                               fields={"loadBalancerClass": "b"},
                               resource_version=live["metadata"]["resourceVersion"])
    seq = api.log.last_seq
    for _ in range(3):
        done, skipped = guard.writers.apply([sync])
        assert done == [] and [s.outcome for s in skipped] == [Outcome.REFUSED]
        assert "may not change once set" in str(skipped[0])
    time.sleep(0.2)
    assert patches(api, seq, 1) == 1  # sent once
    # the Service changed: the patch decided on its new version is sent
    changed = kube.patch(kinds.SERVICE, "nvidia-dcgm", "ns",
                         {"metadata": {"labels": {"x": "y"}}}, patch_type="merge")
    again = guarding.Correction(guarding.SYNC, "nvidia-dcgm", "differs in loadBalancerClass",
                                fields={"loadBalancerClass": "b"},
                                resource_version=changed["metadata"]["resourceVersion"])
    guard.writers.apply([again])
    assert patches(api, seq, 3) == 3
