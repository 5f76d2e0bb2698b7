"""Clock skew: the guard's Lease is judged against the API server's time (the `Date` of its
answers), not the host's, so a `verify` on a skewed cron host neither pages on a live guard nor
passes a dead one. The tool's clock here is skewed an hour either way; the sim's is true."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dcgm_sim.server import ADMIN_TOKEN
from migrator.engine.reads import read_snapshot
from migrator.kube import Kube, RetryPolicy
from migrator.model.stacks import load_catalog
from migrator.model.traffic import lease_live
from tests.helpers.clock import FakeClock

Api = Any


def lease(name: str, renewed: datetime) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {"app.kubernetes.io/managed-by": "dcgm-migrate"}},
            "spec": {"holderIdentity": "guard-0", "leaseDurationSeconds": 15,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


@pytest.mark.parametrize("skew_hours", [1, -1])
def test_a_skewed_host_judges_the_guard_by_the_servers_clock(api: Api, skew_hours: int
                                                              ) -> None:
    now = datetime.now(UTC)
    kube = Kube.for_server(api.url, ADMIN_TOKEN, retry=RetryPolicy(attempts=1))
    kube.create(lease("live", now))
    kube.create(lease("dead", now - timedelta(minutes=10)))
    skewed = FakeClock(start=now + timedelta(hours=skew_hours))
    snap = read_snapshot(kube, "ns", load_catalog(), clock=skewed)
    assert snap.leases_read and snap.taken_at is not None
    assert abs((snap.taken_at - now).total_seconds()) < 10  # the server's time, not the host's
    live = {lease["metadata"]["name"]: lease_live(lease, snap.taken_at)
            for lease in snap.guard_leases}
    assert live == {"live": True, "dead": False}
    # the host's own clock would have judged both the same way, one of them wrongly
    by_host = {lease_live(lease, skewed.now()) for lease in snap.guard_leases}
    assert len(by_host) == 1
