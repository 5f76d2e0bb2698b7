"""The guard's knobs and its verdict cadence, apart from the loop that reads them (so the loop,
the CLI and the benchmark share one definition; `engine/guard.py` re-exports them). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from migrator.engine import slicewrites
from migrator.engine.elector import JITTER_FACTOR, Timing

DEFAULT_LEASE = "dcgm-migrate-guard"
VERDICT_DEBOUNCE_MAX = 5.0  # a burst of changes delays the cached verdict at most 5 debounces
# The cached verdict's CPU: after one that took t seconds the next waits at least this many t,
# so under endless churn it uses at most a fifth of a core (about 1 s at 15,000 nodes).
VERDICT_COST_FACTOR = 4.0


@dataclass(frozen=True)
class GuardSettings:
    lease_name: str = DEFAULT_LEASE
    identity: str = "dcgm-migrate-guard"
    lease_seconds: int = 15  # client-go's default LeaseDuration
    retry_seconds: float = 2.0  # client-go's default RetryPeriod: renew / try to acquire
    # client-go's RenewDeadline: a leader that has not renewed for this long stops writing.
    # None: two thirds of the lease, client-go's 10 s of 15 (`timing`).
    renew_deadline_seconds: float | None = None
    resync_seconds: float = 30.0  # a full pass at least this often
    min_pass_seconds: float = 1.0  # full passes triggered by events at most this often
    # The verdict while leading, logged when it changes: the first line an SRE sees when a
    # stable name stops reaching nodes. From the guard's caches (its DaemonSets, Services,
    # stable names' EndpointSlices and the DCGM pods as printed rows) once the changes it
    # watches have been quiet this long, or this long times `VERDICT_DEBOUNCE_MAX` after the
    # first of a burst (`cached_verdict_due`): the gauge follows a node failure in seconds.
    verdict_debounce_seconds: float = 1.0
    # The whole read of the namespace, the cross-check of the cached one: at most this often,
    # and only when something it reads changed since the last one (`verdict_due`)...
    verdict_seconds: float = 300.0
    # ... and at least this often regardless (what no watched event shows: a pod relabelled
    # by hand whose Service the tool does not follow).
    verdict_idle_seconds: float = 3600.0
    # Shared-slice writes of one pass in flight at once (`engine/slicewrites.py`).
    write_concurrency: int = slicewrites.WORKERS
    # Liveness: the loop and every watch show progress at least this often (`engine/health.py`).
    stall_seconds: float = 300.0
    # After a stable name changes hands, passes follow its events without `min_pass_seconds`
    # for this long: the EndpointSlice controller empties the old owner's slices of it a
    # moment after the takeover, and that is when the GPUCluster nodes lose the name.
    takeover_seconds: float = 10.0


def timing(settings: GuardSettings) -> Timing:
    """The election's timing: the lease, its renew deadline (two thirds of the lease unless
    set) and the retry period, shortened for a short lease so that client-go's rule (a renew
    deadline longer than 1.2 retry periods) holds: `--lease-seconds 2` renews every 0.67 s."""
    deadline = settings.renew_deadline_seconds or settings.lease_seconds * 2.0 / 3.0
    retry = min(settings.retry_seconds, deadline / (JITTER_FACTOR + 0.3))
    return Timing(float(settings.lease_seconds), deadline, retry)


def verdict_due(settings: GuardSettings, now: float, last: float | None,
                changed: bool) -> bool:
    """Is a verdict due at `now`, the last one taken at `last` (None: never)? Its inputs —
    the DaemonSets (their status counts every pod's readiness), the Services and the stable
    names' EndpointSlices — reach the guard as watch events, so a quiet cluster is judged
    once per `verdict_idle_seconds` instead of once per `verdict_seconds`: the whole read is
    nearly all of the guard's steady-state API bytes (docs/performance.md)."""
    if last is None:
        return True
    elapsed = now - last
    return elapsed >= settings.verdict_idle_seconds or (changed and
                                                         elapsed >= settings.verdict_seconds)


def cached_verdict_due(settings: GuardSettings, now: float, first: float | None,
                       last: float, *, previous_end: float = float("-inf"),
                       previous_cost: float = 0.0) -> bool:
    """Is the verdict from the caches due at `now`? `first`/`last`: when the first and the
    latest change it has not judged yet arrived (None: none). Debounced: a rollout's burst of
    pod events makes one verdict once it is quiet, not one per event; a burst that does not
    end is judged every `VERDICT_DEBOUNCE_MAX` debounces anyway. `previous_end`/`_cost`: when
    the last one ended and how long it took (`VERDICT_COST_FACTOR`)."""
    if first is None or now - previous_end < previous_cost * VERDICT_COST_FACTOR:
        return False
    wait = settings.verdict_debounce_seconds
    return now - last >= wait or now - first >= wait * VERDICT_DEBOUNCE_MAX
